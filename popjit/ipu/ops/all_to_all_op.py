"""``ipu.all_to_all_op``: all-to-all and all-gather between replicas."""

from popjit.frontend.replication import all_gather, all_to_all

__all__ = ["all_gather", "all_to_all"]
