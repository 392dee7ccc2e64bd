"""``ipu.ops``: Graphcore's op modules (``ipu.ops.nn_ops``, ``rand_ops``, ``embedding_ops``,
``math_ops``, ``cross_replica_ops``, ``replication_ops``, ``all_to_all_op``, ``reduce_scatter_op``,
``pipelining_ops``), loaded on first use; the others (``functional_ops``, ``within_replica_ops``...) raise
``UnimplementedError`` naming themselves."""

from popjit.ipu._modules import package_getattr

__getattr__ = package_getattr("popjit.ipu.ops", "ipu.ops")
