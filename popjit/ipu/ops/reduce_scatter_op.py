"""``ipu.reduce_scatter_op``: a reduction over replicas, each keeping its part."""

from popjit.frontend.replication import reduce_scatter

__all__ = ["reduce_scatter"]
