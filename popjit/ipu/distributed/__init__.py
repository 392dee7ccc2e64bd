"""``ipu.distributed`` (``ipu.horovod`` before SDK 2.4): Graphcore's Horovod functions, here over the instances
of a program started by ``popjit poprun`` (MPI, :mod:`popjit.runtime.instances`), and
``ipu.distributed.popdist_strategy.PopDistStrategy``.

    from tensorflow.python.ipu import distributed as hvd
    hvd.init()
    total = hvd.allreduce(loss, op=hvd.Sum)          # every instance's loss, summed, in every instance

The functions run on the host, between instances, on eager values (tensors, variables, arrays, Python
numbers); inside a ``tf.function`` they raise ``UnimplementedError`` (the replicas of a program exchange
values with ``ipu.cross_replica_ops`` instead). ``allgather`` needs every instance's tensor to have the same
shape (Horovod allows different first dimensions).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from popjit.errors import UnimplementedError
from popjit.frontend.convert import constant, convert_to_tensor
from popjit.frontend.tensor import Tensor
from popjit.frontend.tracing import current_trace
from popjit.ipu._modules import package_getattr
from popjit.runtime import instances

#: Horovod's reduction ops (the values of Horovod's own constants).
Average = 0
Sum = 1
Adasum = 2


def host_collective(what: str, fn: Callable[[np.ndarray], np.ndarray], value: Any) -> Tensor:
    """``fn`` applied on the host to ``value`` (a tensor, variable, array or Python value) as an array; the
    result as a tensor. Raises ``UnimplementedError`` inside a traced function (``what`` names the caller)."""
    if current_trace() is not None:
        raise UnimplementedError(
            f"{what} inside a tf.function is not implemented by popjit: it exchanges values between instances on "
            "the host. Call it outside the function (eagerly), or combine the replicas' values inside the program "
            "with ipu.cross_replica_ops.")
    return constant(fn(convert_to_tensor(value).numpy()))


def init() -> None:
    """Connect to the other instances (MPI); ``popjit run`` has already done it for a program of several."""
    instances.world().connect()


def shutdown() -> None:
    """Nothing to stop: the connection between instances lasts until the process ends (mpi4py finalizes MPI
    then), so the functions keep working after it."""


def size() -> int:
    """How many instances run the program."""
    return instances.world().count


def rank() -> int:
    """This instance's index."""
    return instances.world().index


def local_size() -> int:
    """How many instances run on this host."""
    return instances.local_placement()[0]


def local_rank() -> int:
    """This instance's index among those on its host."""
    return instances.local_placement()[1]


def allreduce(tensor: Any, op: int | None = None) -> Tensor:
    """Every instance's ``tensor`` combined: ``Sum``, or ``Average`` (the default: the sum over ``size()``)."""
    op = Average if op is None else op
    if op == Adasum:
        raise NotImplementedError("The Adasum reduction is not implemented.")
    if op not in (Average, Sum):
        raise ValueError(f"Unsupported reduce op: {op}")
    world = instances.world()

    def reduce(a: np.ndarray) -> np.ndarray:
        total = world.allreduce_sum(a)
        return mean_of(total, world.count) if op == Average else total

    return host_collective("ipu.distributed.allreduce", reduce, tensor)


def mean_of(total: np.ndarray, count: int) -> np.ndarray:
    """``total / count`` in ``total``'s dtype (an integer mean truncates, as TensorFlow's does)."""
    return np.asarray(total / count).astype(total.dtype)


def allgather(tensor: Any) -> Tensor:
    """Every instance's ``tensor`` concatenated on dimension 0, in instance order."""
    world = instances.world()

    def gather(a: np.ndarray) -> np.ndarray:
        if a.ndim == 0:
            raise ValueError("allgather needs a tensor of rank 1 or more (it concatenates on dimension 0)")
        return world.allgather(a).reshape(-1, *a.shape[1:])

    return host_collective("ipu.distributed.allgather", gather, tensor)


def broadcast(tensor: Any, root_rank: int) -> Tensor:
    """Instance ``root_rank``'s ``tensor``, in every instance."""
    world = instances.world()
    return host_collective("ipu.distributed.broadcast", lambda a: world.broadcast(a, root_rank), tensor)


__all__ = ["Adasum", "Average", "Sum", "allgather", "allreduce", "broadcast", "init", "local_rank", "local_size",
           "rank", "shutdown", "size"]

__getattr__ = package_getattr("popjit.ipu.distributed", "ipu.distributed")
