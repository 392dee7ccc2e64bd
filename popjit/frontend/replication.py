"""Values and exchanges of the replicas of a replicated program (``ipu.cross_replica_ops``,
``ipu.replication_ops``, ``ipu.all_to_all_op``, ``ipu.reduce_scatter_op``).

On a device of N IPUs a program runs as N replicas (:mod:`popjit.runtime.replicas`). These functions
add the cross-replica ops of :mod:`popjit.ops.collectives` to a traced program; outside one (eagerly,
or in a program run by a single replica) each replica is alone in its group.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from popjit import context, dtypes
from popjit.frontend.convert import convert_to_tensor
from popjit.frontend.tensor import Tensor
from popjit.frontend.tracing import apply_op, current_trace, tracing
from popjit.frontend.variables import Variable
from popjit.runtime import device as devices

with tracing(None):
    #: The replica's index as programs read it: each replica's own value (``popjit.frontend.function``).
    REPLICATION_INDEX = Variable(np.zeros((), np.int32), trainable=False, name="replication_index")

#: The dtypes Graphcore's collectives take.
COLLECTIVE_DTYPES = (dtypes.float16, dtypes.float32, dtypes.int32)


def _operand(x: Any, what: str) -> Tensor:
    t = convert_to_tensor(x)
    if t.dtype not in COLLECTIVE_DTYPES:
        raise TypeError(f"{what}: unsupported dtype {t.dtype.name}; cross-replica operations take float16, float32 "
                        "and int32 tensors.")
    return t


def _group(size: Any, what: str) -> int:
    if size is None:
        return 0
    if type(size) is not int or size < 1:
        raise ValueError(f"{what}: the replica group size must be a positive int, not {size!r}.")
    return size


def replication_index(name: str | None = None) -> Tensor:
    """The index of the replica running the program (an int32 scalar; 0 without replication)."""
    return REPLICATION_INDEX.read_value()


def cross_replica_sum(x: Any, replica_group_size: int | None = None, name: str | None = None) -> Tensor:
    """``x`` summed over the replicas of each group of ``replica_group_size`` consecutive replicas (all of them
    when None); the number of replicas must be a multiple of it, or the program fails to compile."""
    what = "cross_replica_sum"
    return apply_op("all_reduce", [_operand(x, what)], op="sum", group=_group(replica_group_size, what))


def cross_replica_mean(x: Any, replica_group_size: int | None = None, name: str | None = None) -> Tensor:
    """The mean of ``x`` over each group of replicas (see :func:`cross_replica_sum`)."""
    what = "cross_replica_mean"
    return apply_op("all_reduce", [_operand(x, what)], op="mean", group=_group(replica_group_size, what))


#: ``reduce_scatter``'s ``op`` names (Graphcore's ``COLLECTIVE_OP_*``) and what popjit computes for them.
COLLECTIVE_OPS = {"COLLECTIVE_OP_ADD": "sum", "COLLECTIVE_OP_MEAN": "mean", "COLLECTIVE_OP_MUL": "prod",
                  "COLLECTIVE_OP_MIN": "min", "COLLECTIVE_OP_MAX": "max"}


def reduce_scatter(x: Any, replication_factor: int, op: str = "COLLECTIVE_OP_ADD", name: str | None = None) -> Any:
    """Each rank-1 tensor of ``x`` (a tensor or a list of them) reduced over groups of ``replication_factor``
    replicas, zero-padded to a multiple of it, and this replica's ``ceil(n / replication_factor)`` part."""
    if op not in COLLECTIVE_OPS:
        raise ValueError(f"reduce_scatter: unsupported op {op!r}; popjit supports {sorted(COLLECTIVE_OPS)}.")
    group = _group(replication_factor, "reduce_scatter")
    xs = list(x) if isinstance(x, (list, tuple)) else [x]
    outs = [apply_op("reduce_scatter", [_operand(t, "reduce_scatter")], group=group, op=COLLECTIVE_OPS[op])
            for t in xs]
    return outs[0] if len(outs) == 1 else outs


def all_gather(x: Any, replication_factor: int, name: str | None = None) -> Tensor:
    """Every replica's ``x`` of this replica's group of ``replication_factor``, stacked: ``[group, *x.shape]``."""
    return apply_op("all_gather", [_operand(x, "all_gather")], group=_group(replication_factor, "all_gather"))


def all_to_all(x: Any, split_dimension: int, concat_dimension: int, replication_factor: int,
               name: str | None = None) -> Tensor:
    """XLA's all-to-all: ``x`` cut in ``replication_factor`` parts along ``split_dimension``; this replica
    receives part r of every replica in its group, concatenated along ``concat_dimension``."""
    return apply_op("all_to_all", [_operand(x, "all_to_all")], split_axis=int(split_dimension),
                    concat_axis=int(concat_dimension), group=_group(replication_factor, "all_to_all"))


def assume_equal_across_replicas(tensors: Any, inplace: bool = False) -> Any:
    """The tensors unchanged. Graphcore's compiler uses the mark to accept control flow that depends on
    them; popjit's replicas run their own control flow, so there is nothing to check."""
    return tensors


def sum_across_replicas(grads: list[Tensor]) -> list[Tensor]:
    """Gradients summed over the replicas when traced into a program on an IPU device (an optimizer's
    aggregation); unchanged elsewhere. A program compiled for one replica drops the sums
    (:func:`popjit.pipeline.compiler.single_replica`)."""
    if current_trace() is None or not devices.is_ipu_device(context.current_device()):
        return grads
    return [apply_op("all_reduce", [g], op="sum", group=0) if g.dtype in COLLECTIVE_DTYPES else g for g in grads]
