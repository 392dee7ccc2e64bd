"""``ipu.horovod``: SDK 2.x's name of ``ipu.distributed`` (:mod:`popjit.ipu.distributed`), the same functions."""

from popjit.ipu._modules import package_getattr
from popjit.ipu.distributed import (  # noqa: F401  (re-exported)
    Adasum,
    Average,
    Sum,
    allgather,
    allreduce,
    broadcast,
    init,
    local_rank,
    local_size,
    rank,
    shutdown,
    size,
)

__getattr__ = package_getattr("popjit.ipu.horovod", "ipu.horovod")
