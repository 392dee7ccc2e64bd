"""Cross-replica collectives (``ipu.cross_replica_ops``, ``ipu.ops.all_to_all_op``, ``reduce_scatter_op``).

A replicated program runs once per replica; these ops exchange values between the replicas of a
*group*: ``group`` consecutive replicas (``{0..k-1}, {k..2k-1}, ...``; 0 means all of them).

- ``all_reduce[op, group](x)``: ``op`` (sum, mean, max, min, prod) of ``x`` over the group.
- ``all_gather[group](x)``: ``[group, *x.shape]``, row ``k`` being the group's k-th replica's ``x``.
- ``reduce_scatter[op, group](x)``: ``x`` (rank 1, ``n`` elements) reduced over the group, zero-padded to
  a multiple of ``group``, and this replica's ``ceil(n / group)`` part of it.
- ``all_to_all[split_axis, concat_axis, group](x)``: ``x`` cut in ``group`` parts along ``split_axis``;
  part ``r`` of every replica of the group, concatenated along ``concat_axis``, is replica ``r``'s result.

They lower to a loop-IR :class:`~popjit.ir.loop.Collective`, performed by the host between the
replicas' engines (:mod:`popjit.runtime.replicas`). :func:`collective_result` is their one definition
of what each replica receives, used there and by the interpreters (which run a single replica: a
group of one). They never fold into constants: the same constant differs after a sum over replicas.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from popjit.ir.graph import Aval
from popjit.ir.lazy import Lazy
from popjit.ir.loop import Collective
from popjit.ir.opdef import OTHER, OpDef, register

REDUCTIONS = {"sum": np.add, "mean": np.add, "max": np.maximum, "min": np.minimum, "prod": np.multiply}


def collective_result(op: str, contributions: list[np.ndarray], position: int, reduce: str = "sum",
                      split_axis: int = 0, concat_axis: int = 0) -> np.ndarray:
    """What the replica at ``position`` of its group receives, given every group member's ``src`` in
    group order (the same arithmetic, in the same order, on every replica)."""
    contributions = [np.asarray(c) for c in contributions]
    if op in REDUCTIONS:
        return _reduced(op, contributions)
    if op == "gather":
        return np.stack(contributions)
    if op == "reduce_scatter":
        total = _reduced(reduce, contributions)
        k = len(contributions)
        part = -(-total.size // k)
        padded = np.zeros(part * k, total.dtype)
        padded[:total.size] = total
        return padded[position * part:(position + 1) * part]
    if op == "all_to_all":
        k = len(contributions)
        parts = [np.split(c, k, axis=split_axis)[position] for c in contributions]
        return np.concatenate(parts, axis=concat_axis)
    raise ValueError(f"unknown collective {op!r}")


def statement_result(stmt: Collective, contributions: list[np.ndarray], position: int) -> np.ndarray:
    """What the loop-IR collective ``stmt`` gives the replica at ``position`` of its group, in its
    destination's shape (``contributions``: each group member's operand, in group order)."""
    return collective_result(stmt.op, contributions, position, stmt.reduce, stmt.split_axis,
                             stmt.concat_axis).reshape(stmt.dst.shape)


def _reduced(op: str, contributions: list[np.ndarray]) -> np.ndarray:
    combine = REDUCTIONS[op]
    total = np.array(contributions[0], copy=True)
    for c in contributions[1:]:
        combine(total, c, out=total)
    if op == "mean":
        if total.dtype.kind == "f":
            total /= np.asarray(len(contributions), total.dtype)
        else:
            total //= len(contributions)
    return total


# ----------------------------------------------------------------------------------------------
# Shapes


def _reduce_infer(x: Aval, op: str = "sum", group: int = 0) -> Aval:
    if op not in REDUCTIONS:
        raise ValueError(f"Unsupported cross-replica reduction {op!r}; expected one of {sorted(REDUCTIONS)}.")
    return x


def _gather_infer(x: Aval, group: int) -> Aval:
    return Aval((group, *x.shape), x.dtype)


def _scatter_infer(x: Aval, group: int, op: str = "sum") -> Aval:
    if len(x.shape) != 1:
        raise ValueError(f"reduce_scatter takes tensors of rank 1, not shape {list(x.shape)}.")
    _reduce_infer(x, op)
    return Aval((-(-x.shape[0] // group),), x.dtype)


def _all_to_all_infer(x: Aval, split_axis: int, concat_axis: int, group: int) -> Aval:
    rank = len(x.shape)
    for name, axis in (("split_dimension", split_axis), ("concat_dimension", concat_axis)):
        if not 0 <= axis < rank:
            raise ValueError(f"all_to_all: {name} {axis} is not in [0, {rank}) for a tensor of shape {list(x.shape)}.")
    if x.shape[split_axis] % group:
        raise ValueError(f"all_to_all: dimension {split_axis} of size {x.shape[split_axis]} cannot be split "
                         f"among {group} replicas.")
    shape = list(x.shape)
    shape[split_axis] //= group
    shape[concat_axis] *= group
    return Aval(tuple(shape), x.dtype)


# ----------------------------------------------------------------------------------------------
# One replica's view (the interpreters), lowering and gradients


def _single(op: str) -> Any:
    def reference(x: np.ndarray, group: int = 0, **attrs: Any) -> np.ndarray:
        if group > 1:
            raise ValueError(f"a cross-replica {op} over groups of {group} replicas needs a replicated program")
        return collective_result(op if op != "reduce" else attrs.get("op", "sum"), [np.asarray(x)], 0,
                                 attrs.get("op", "sum"), attrs.get("split_axis", 0), attrs.get("concat_axis", 0))
    return reference


def _lower(kind: str) -> Any:
    def lower(ctx: Any, node: Any, args: list[Lazy]) -> list[Lazy]:
        attrs = node.attrs
        src = ctx.materialize(args[0], node.op)
        assert src.view is not None
        out = node.outputs[0]
        dst = ctx.new_temp(out.shape, out.dtype, node.op)
        op = attrs.get("op", "sum") if kind == "reduce" else kind
        ctx.emit(Collective(ctx.name(node.op, ()), op, dst, src.view.buffer, attrs.get("group", 0),
                            attrs.get("op", "sum"), attrs.get("split_axis", 0), attrs.get("concat_axis", 0),
                            tuple(node.inputs[0].shape)))
        return [Lazy.of_buffer(dst, out.shape)]
    return lower


def _linear(op: str) -> None:
    if op not in ("sum", "mean"):
        raise ValueError(f"No gradient is defined for a cross-replica {op}.")


def _all_reduce_vjp(t: Any, primals: list, outputs: list, cts: list, op: str = "sum", group: int = 0) -> list[Any]:
    """Every replica's output depends on every replica's input: the cotangents reduced the same way."""
    _linear(op)
    return [t.apply_op("all_reduce", [cts[0]], op=op, group=group)]


def _all_gather_vjp(t: Any, primals: list, outputs: list, cts: list, group: int) -> list[Any]:
    """Row k of every replica's result is replica k's input: replica k's cotangent is the sum over the group
    of row k of theirs, its part of a reduce-scatter of the flattened cotangents."""
    (x,), (ct,) = primals, cts
    part = t.apply_op("reduce_scatter", [t.reshape(ct, [-1])], group=group, op="sum")
    return [t.reshape(part, t.shape_of(x))]


def _reduce_scatter_vjp(t: Any, primals: list, outputs: list, cts: list, group: int, op: str = "sum") -> list[Any]:
    """Each replica's part came from every replica's input: the parts' cotangents gathered (and unpadded)."""
    _linear(op)
    (x,), (ct,) = primals, cts
    every = t.reshape(t.apply_op("all_gather", [ct], group=group), [-1])
    n = t.shape_of(x)[0]
    grad = t.slice(every, [0], [n])
    return [grad / float(group) if op == "mean" else grad]


def _all_to_all_vjp(t: Any, primals: list, outputs: list, cts: list, split_axis: int, concat_axis: int,
                    group: int) -> list[Any]:
    """A permutation of the parts between replicas: its inverse, the exchange with the axes swapped."""
    return [t.apply_op("all_to_all", [cts[0]], split_axis=concat_axis, concat_axis=split_axis, group=group)]


register(OpDef("all_reduce", OTHER, _reduce_infer, _single("reduce"), _lower("reduce"), vjp=_all_reduce_vjp,
               doc="ipu.cross_replica_ops.cross_replica_sum / cross_replica_mean: reduce over replicas",
               extra={"replicated": True}))
register(OpDef("all_gather", OTHER, _gather_infer, _single("gather"), _lower("gather"), vjp=_all_gather_vjp,
               doc="ipu.all_to_all_op.all_gather: every replica's value, stacked", extra={"replicated": True}))
register(OpDef("reduce_scatter", OTHER, _scatter_infer, _single("reduce_scatter"), _lower("reduce_scatter"),
               vjp=_reduce_scatter_vjp, extra={"replicated": True},
               doc="ipu.reduce_scatter_op.reduce_scatter: reduce over replicas, each keeps its part"))
register(OpDef("all_to_all", OTHER, _all_to_all_infer, _single("all_to_all"), _lower("all_to_all"),
               vjp=_all_to_all_vjp, extra={"replicated": True},
               doc="ipu.all_to_all_op.all_to_all: exchange parts between replicas"))
