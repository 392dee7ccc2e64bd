"""``ipu.replication_ops``: the index of the replica running the program."""

from popjit.frontend.replication import replication_index

__all__ = ["replication_index"]
