"""``dynamic_update_slice``: write a block into a tensor at a computed position (XLA's op), and
``dynamic_update_slice_add``: add a block into it.

``dynamic_update_slice(operand, update, begin)`` is ``operand`` with ``update`` written at
``begin`` (each start clamped so the block fits, as XLA does); ``dynamic_update_slice_add`` adds
``update`` to that block instead. Lowering writes in place when the operand is a loop-carried value
nothing else reads (a loop's accumulator: O(block) per step, not O(tensor)); otherwise it copies the
operand first. The graph pass :func:`popjit.graph.passes.accumulate.accumulate_blocks` turns
``acc + dynamic_update_slice(zeros, u, begin)`` (the gradient of a slice or a one-index gather
summed by a loop) into ``dynamic_update_slice_add(acc, u, begin)``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from popjit.errors import InvalidArgumentError
from popjit.ir.graph import Aval
from popjit.ir.lazy import Lazy
from popjit.ir.loop import (
    Apply,
    Kernel,
    Store,
    as_index,
    flat_index,
    freeze_attrs,
    iclamp,
    ivalue,
    ivar,
    row_major_strides,
)
from popjit.ir.opdef import MOVEMENT, OpDef, register
from popjit.ops.shapes import same_dtype


def _infer(operand: Aval, update: Aval, begin: Aval) -> Aval:
    same_dtype("DynamicUpdateSlice", operand, update)
    if not begin.dtype.is_integer or begin.shape != (operand.ndim,):
        raise InvalidArgumentError(f"begin must be a 1-D integer tensor of size {operand.ndim}, got {begin} "
                                   "[Op:DynamicUpdateSlice]")
    if update.ndim != operand.ndim or any(u > o for u, o in zip(update.shape, operand.shape)):
        raise InvalidArgumentError(f"update {list(update.shape)} does not fit in operand {list(operand.shape)} "
                                   "[Op:DynamicUpdateSlice]")
    return operand


def starts(begin: Any, operand_shape: tuple[int, ...], update_shape: tuple[int, ...]) -> list[int]:
    """The clamped start of each axis."""
    return [int(np.clip(b, 0, d - n)) for b, d, n in zip(np.asarray(begin).reshape(-1), operand_shape, update_shape)]


def _block(begin: np.ndarray, operand: np.ndarray, update: np.ndarray) -> tuple[slice, ...]:
    at = starts(begin, operand.shape, update.shape)
    return tuple(slice(s, s + n) for s, n in zip(at, update.shape))


def _reference(operand: np.ndarray, update: np.ndarray, begin: np.ndarray) -> np.ndarray:
    out = operand.copy()
    out[_block(begin, operand, update)] = update
    return out


def _add_reference(operand: np.ndarray, update: np.ndarray, begin: np.ndarray) -> np.ndarray:
    out = operand.copy()
    out[_block(begin, operand, update)] += update
    return out


def _in_place(ctx: Any, node: Any, operand: Lazy) -> bool:
    """The operand's buffer may be overwritten: it is a loop-carried value this op alone uses."""
    value = node.inputs[0]
    return (value.producer is None and ctx.plan.uses[value.uid] == 1 and operand.view is not None
            and operand.view.is_contiguous and operand.view.buffer.kind == "temp")


def _lower(ctx: Any, node: Any, args: list[Lazy], accumulate: bool = False) -> list[Lazy]:
    operand, update, begin = args
    out = node.outputs[0].aval
    target = operand if _in_place(ctx, node, operand) else ctx.materialize(
        operand, "update", into=ctx.new_temp(out.shape, out.dtype, "update"))
    assert target.view is not None
    idx = tuple(ivar(f"i{k}") for k in range(update.ndim))
    at = [iclamp(ivalue(begin.build((as_index(k),))), 0, d - n) if d != n else as_index(0)
          for k, (d, n) in enumerate(zip(out.shape, update.shape))]
    where = flat_index([i + s for i, s in zip(idx, at)], row_major_strides(out.shape))
    value = update.build(idx)
    if accumulate:
        current = Lazy.of_buffer(target.view.buffer, out.shape).build(tuple(i + s for i, s in zip(idx, at)))
        value = Apply("add", (current, value), out.dtype, freeze_attrs({}))
    op = node.op
    ctx.emit(Kernel(ctx.name(op, update.ops), update.shape, [Store(target.view.buffer, where, value)], None,
                    (*update.ops, op)))
    return [Lazy.of_buffer(target.view.buffer, out.shape)]


def _lower_add(ctx: Any, node: Any, args: list[Lazy]) -> list[Lazy]:
    return _lower(ctx, node, args, accumulate=True)


def _vjp(t: Any, primals: list, outputs: list, cts: list) -> list[Any]:
    _, update, begin = primals
    (ct,) = cts
    size = t.shape_of(update)
    # why: dynamic_slice clamps begin exactly as the forward op did, so the block read is the one written
    return [t.dynamic_update_slice(ct, t.zeros_like(update), begin), t.dynamic_slice(ct, begin, size), None]


register(OpDef("dynamic_update_slice", MOVEMENT, _infer, _reference, _lower, vjp=_vjp,
               doc="operand with update written at a computed begin (starts clamped, as XLA's DynamicUpdateSlice)"))


def _add_vjp(t: Any, primals: list, outputs: list, cts: list) -> list[Any]:
    _, update, begin = primals
    (ct,) = cts
    return [ct, t.dynamic_slice(ct, begin, t.shape_of(update)), None]


register(OpDef("dynamic_update_slice_add", MOVEMENT, _infer, _add_reference, _lower_add, vjp=_add_vjp,
               doc="operand with update added at a computed begin (starts clamped as dynamic_update_slice's)"))
