"""Ops with no element-wise tensor inputs: constants, index ramps, fills."""

from __future__ import annotations

from typing import Any

import numpy as np

from popjit import dtypes
from popjit.dtypes import DType
from popjit.errors import InvalidArgumentError
from popjit.ir.graph import Aval
from popjit.ir.lazy import Lazy
from popjit.ir.loop import Apply, Const, IndexValue
from popjit.ir.opdef import REGISTRY, SOURCE, ElementCost, OpDef, register
from popjit.ops.elementwise import no_gradient


def _constant_infer(value: np.ndarray) -> Aval:
    return Aval(tuple(value.shape), dtypes.as_dtype(value.dtype))


def _lower_constant(ctx: Any, node: Any, args: list[Lazy]) -> list[Lazy]:
    value: np.ndarray = node.attrs["value"]
    aval = node.outputs[0].aval
    if value.size == 1:
        scalar = value.reshape(()).item()
        return [Lazy(aval.shape, aval.dtype, lambda idx: Const(scalar, aval.dtype))]
    if value.size > 1 and np.all(value == value.reshape(-1)[0]):
        scalar = value.reshape(-1)[0].item()
        return [Lazy(aval.shape, aval.dtype, lambda idx: Const(scalar, aval.dtype))]
    return [Lazy.of_buffer(ctx.constant_buffer(value), aval.shape)]


register(OpDef("constant", SOURCE, _constant_infer, lambda value: value, _lower_constant,
               cost=ElementCost(), doc="a constant baked into the executable"))


def _iota_infer(shape: tuple[int, ...], dtype: DType, axis: int = -1, start: Any = 0, delta: Any = 1) -> Aval:
    return Aval(tuple(shape), dtype)


def _iota_ref(shape: tuple[int, ...], dtype: DType, axis: int = -1, start: Any = 0, delta: Any = 1) -> np.ndarray:
    ax = axis % len(shape)
    r = start + delta * np.arange(shape[ax], dtype=np.float64 if dtype.is_floating else np.int64)
    r = r.reshape([-1 if k == ax else 1 for k in range(len(shape))])
    return np.broadcast_to(r, shape).astype(dtype.np)


def _lower_iota(ctx: Any, node: Any, args: list[Lazy]) -> list[Lazy]:
    a = node.attrs
    aval = node.outputs[0].aval
    ax = a.get("axis", -1) % len(aval.shape)
    start, delta = a.get("start", 0), a.get("delta", 1)

    def build(idx: tuple) -> Any:
        i = idx[ax]
        if aval.dtype.is_floating:
            v = Apply("cast", (IndexValue(i, dtypes.int64),), aval.dtype, (("dtype", aval.dtype),))
            return Apply("add", (Apply("mul", (v, Const(float(delta), aval.dtype)), aval.dtype),
                                 Const(float(start), aval.dtype)), aval.dtype)
        return IndexValue(i * int(delta) + int(start), aval.dtype)

    return [Lazy(aval.shape, aval.dtype, build, ops=("iota",))]


register(OpDef("iota", SOURCE, _iota_infer, _iota_ref, _lower_iota, cost=ElementCost(),
               doc="start + delta * index along an axis (tf.range, one_hot, eye)"))


def _eye_infer(shape: tuple[int, ...], dtype: DType) -> Aval:
    if len(shape) < 2 or any(int(d) < 0 for d in shape):
        raise InvalidArgumentError(f"eye: shape {list(shape)} must be [*batch_shape, num_rows, num_columns] with "
                                   "non-negative sizes [Op:Eye]")
    return Aval(tuple(int(d) for d in shape), dtype)


def _eye_ref(shape: tuple[int, ...], dtype: DType) -> np.ndarray:
    return np.broadcast_to(np.eye(shape[-2], shape[-1], dtype=dtype.np), shape).copy()


def _lower_eye(ctx: Any, node: Any, args: list[Lazy]) -> list[Lazy]:
    aval = node.outputs[0].aval
    one, zero = Const(1, aval.dtype), Const(0, aval.dtype)

    def build(idx: tuple) -> Any:
        diag = Apply("equal", (IndexValue(idx[-2], dtypes.int64), IndexValue(idx[-1], dtypes.int64)), dtypes.bool_)
        return Apply("select", (diag, one, zero), aval.dtype)

    return [Lazy(aval.shape, aval.dtype, build, ops=("eye",))]


register(OpDef("eye", SOURCE, _eye_infer, _eye_ref, _lower_eye, cost=ElementCost(),
               doc="tf.eye: ones on the diagonal of the last two axes (batched)"))


def _reserve_infer(shape: tuple[int, ...], dtype: DType) -> Aval:
    return Aval(tuple(int(d) for d in shape), dtype)


def _lower_reserve(ctx: Any, node: Any, args: list[Lazy]) -> list[Lazy]:
    aval = node.outputs[0].aval
    return [Lazy(aval.shape, aval.dtype, lambda idx: Const(0, aval.dtype))]


#: A stack that a counted loop carries and writes whole, row ``i`` at iteration ``i``, before anything reads
#: it (autodiff's saved iterations of a loop, :func:`popjit.ops.control_flow._forward_states`): zeros wherever
#: it is read as it is, but the loop carrying it does not fill its buffer first
#: (:meth:`~popjit.loop.lower.LowerCtx.lower_while`), as TensorFlow's ``TensorListReserve`` reserves a list
#: without writing it.
RESERVE = "reserve"

register(OpDef(RESERVE, SOURCE, _reserve_infer, lambda shape, dtype: np.zeros(shape, dtype.np), _lower_reserve,
               cost=ElementCost(), doc="a stack a counted loop writes row by row before reading it"))


# Gradient rules: sources have no inputs to differentiate.
for _name in ('constant', 'iota', 'eye', RESERVE):
    REGISTRY[_name].vjp = no_gradient
