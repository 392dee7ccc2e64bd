"""``ipu.cross_replica_ops``: sums and means over the replicas of a replicated program."""

from popjit.frontend.replication import assume_equal_across_replicas, cross_replica_mean, cross_replica_sum

__all__ = ["assume_equal_across_replicas", "cross_replica_mean", "cross_replica_sum"]
