"""Data-dependent indexing: gather, dynamic slices, one-hot.

A gathered index is an integer *value* used inside an index expression (an ``IValue`` atom),
so ``gather`` fuses like any movement: the consumer's loop loads ``params`` at the gathered
position directly.

Out-of-range indices are clamped into ``[0, dim - 1]``, as XLA (and so TensorFlow on the IPU)
clamps gather and dynamic-slice start indices: a negative index reads element 0, an index past
the end reads the last element. TensorFlow's CPU kernel raises an error instead and its GPU
kernel returns zeros; popjit's eager CPU path follows the IPU, so all three paths agree.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from popjit import dtypes
from popjit.errors import InvalidArgumentError
from popjit.graph.ir import Aval
from popjit.loop.ir import Apply, Const, IndexValue, as_index, iclamp, ivalue
from popjit.loop.lazy import Lazy
from popjit.ops.registry import MOVEMENT, OpDef, register

INDEX_DTYPES = (dtypes.int32, dtypes.int64, dtypes.int16, dtypes.int8, dtypes.uint8, dtypes.uint16, dtypes.uint32)


def _check_indices(dtype: dtypes.DType, what: str, op: str) -> None:
    if dtype not in INDEX_DTYPES:
        raise TypeError(f"Value passed to parameter '{what}' has DataType {dtype.name} not in list of allowed "
                        f"values: int16, int32, int64 [Op:{op}]")


# ----------------------------------------------------------------------------------------------
# gather(params, indices; axis, batch_dims)


def _gather_infer(params: Aval, indices: Aval, axis: int = 0, batch_dims: int = 0) -> Aval:
    _check_indices(indices.dtype, "indices", "GatherV2")
    if params.ndim == 0:
        raise InvalidArgumentError("params must be at least 1 dimensional [Op:GatherV2]")
    b = batch_dims % indices.ndim if batch_dims < 0 and indices.ndim else batch_dims
    if not 0 <= b <= indices.ndim:
        raise InvalidArgumentError(f"batch_dims ({batch_dims}) must be in range [{-indices.ndim}, "
                                   f"{indices.ndim}] for indices of rank {indices.ndim} [Op:GatherV2]")
    if not -params.ndim <= axis < params.ndim:
        raise InvalidArgumentError(f"Expected axis in the range [{-params.ndim}, {params.ndim}), but got {axis} "
                                   "[Op:GatherV2]")
    ax = axis % params.ndim
    if ax < b:
        raise InvalidArgumentError(f"batch_dims ({b}) must be less than or equal to axis ({ax}) [Op:GatherV2]")
    if params.shape[:b] != indices.shape[:b]:
        raise InvalidArgumentError(f"params.shape[:{b}] {list(params.shape[:b])} must equal indices.shape[:{b}] "
                                   f"{list(indices.shape[:b])} [Op:GatherV2]")
    if params.shape[ax] == 0 and indices.size:
        raise InvalidArgumentError(f"Gather from an empty dimension {ax} of params {list(params.shape)} [Op:GatherV2]")
    return Aval(params.shape[:ax] + indices.shape[b:] + params.shape[ax + 1:], params.dtype)


def _gather_ref(params: np.ndarray, indices: np.ndarray, axis: int = 0, batch_dims: int = 0) -> np.ndarray:
    ax = axis % params.ndim
    b = batch_dims % indices.ndim if batch_dims < 0 else batch_dims
    ind = np.clip(indices.astype(np.int64), 0, max(params.shape[ax] - 1, 0))
    if b == 0:
        return np.take(params, ind, axis=ax)
    batch = params.shape[:b]
    out_shape = params.shape[:ax] + indices.shape[b:] + params.shape[ax + 1:]
    p = params.reshape((-1,) + params.shape[b:])
    i = ind.reshape((-1,) + indices.shape[b:])
    parts = [np.take(p[k], i[k], axis=ax - b) for k in range(int(np.prod(batch, dtype=np.int64)))]
    return np.stack(parts).reshape(out_shape) if parts else np.zeros(out_shape, params.dtype)


def _gather_lower(ctx: Any, node: Any, args: list[Lazy]) -> list[Lazy]:
    params, indices = args
    out = node.outputs[0].aval
    ax = node.attrs.get("axis", 0) % params.ndim
    b = node.attrs.get("batch_dims", 0)
    b = b % indices.ndim if b < 0 else b
    ni = indices.ndim - b
    dim = params.shape[ax]

    def index_map(idx: tuple) -> tuple:
        where = indices.build(tuple(idx[:b]) + tuple(idx[ax:ax + ni]))
        j = iclamp(ivalue(where), 0, dim - 1)
        return tuple(idx[:ax]) + (j,) + tuple(idx[ax + ni:])

    return [params.remap(out.shape, index_map, ("gather",))]


register(OpDef("gather", MOVEMENT, _gather_infer, _gather_ref, _gather_lower,
               doc="tf.gather(params, indices, axis, batch_dims); out-of-range indices clamp (as XLA)"))

# ----------------------------------------------------------------------------------------------
# dynamic_slice(x, begin; size): a slice of static size at a computed start (clamped to fit)


def _dynamic_slice_infer(x: Aval, begin: Aval, size: tuple[int, ...]) -> Aval:
    _check_indices(begin.dtype, "begin", "Slice")
    if begin.shape != (x.ndim,) or len(size) != x.ndim:
        raise InvalidArgumentError(f"Expected begin and size arguments to be 1-D tensors of size {x.ndim}, but got "
                                   f"shapes {list(begin.shape)} and [{len(size)}] instead. [Op:Slice]")
    for k, (d, n) in enumerate(zip(x.shape, size)):
        if not 0 <= n <= d:
            raise InvalidArgumentError(f"Expected size[{k}] in [0, {d}], but got {n} [Op:Slice]")
    return Aval(tuple(int(n) for n in size), x.dtype)


def _dynamic_slice_ref(x: np.ndarray, begin: np.ndarray, size: tuple[int, ...]) -> np.ndarray:
    starts = [int(np.clip(b, 0, d - n)) for b, d, n in zip(np.asarray(begin).reshape(-1), x.shape, size)]
    return x[tuple(slice(s, s + n) for s, n in zip(starts, size))].copy()


def _dynamic_slice_lower(ctx: Any, node: Any, args: list[Lazy]) -> list[Lazy]:
    x, begin = args
    size = tuple(node.attrs["size"])

    def index_map(idx: tuple) -> tuple:
        out = []
        for k, (i, d, n) in enumerate(zip(idx, x.shape, size)):
            start = iclamp(ivalue(begin.build((as_index(k),))), 0, d - n) if d != n else as_index(0)
            out.append(i + start)
        return tuple(out)

    return [x.remap(size, index_map, ("dynamic_slice",))]


register(OpDef("dynamic_slice", MOVEMENT, _dynamic_slice_infer, _dynamic_slice_ref, _dynamic_slice_lower,
               doc="tf.slice with a computed begin: starts clamp so the slice fits (as XLA's DynamicSlice)"))

# ----------------------------------------------------------------------------------------------
# one_hot(indices; depth, on_value, off_value, axis, dtype)


def _one_hot_infer(indices: Aval, depth: int, on_value: Any = 1, off_value: Any = 0, axis: int = -1,
                   dtype: dtypes.DType = dtypes.float32) -> Aval:
    _check_indices(indices.dtype, "indices", "OneHot")
    if depth < 0:
        raise InvalidArgumentError(f"depth must be non-negative, got: {depth} [Op:OneHot]")
    if not -1 <= axis <= indices.ndim:
        raise InvalidArgumentError(f"Expected axis to be -1 or between [0, {indices.ndim}].  But received: {axis} "
                                   "[Op:OneHot]")
    ax = indices.ndim if axis == -1 else axis
    return Aval(indices.shape[:ax] + (int(depth),) + indices.shape[ax:], dtype)


def _one_hot_ref(indices: np.ndarray, depth: int, on_value: Any = 1, off_value: Any = 0, axis: int = -1,
                 dtype: dtypes.DType = dtypes.float32) -> np.ndarray:
    ax = indices.ndim if axis == -1 else axis
    hot = np.expand_dims(indices.astype(np.int64), ax) == np.arange(depth).reshape(
        [-1 if k == ax else 1 for k in range(indices.ndim + 1)])
    return np.where(hot, np.asarray(on_value, dtype.np), np.asarray(off_value, dtype.np)).astype(dtype.np)


def _one_hot_lower(ctx: Any, node: Any, args: list[Lazy]) -> list[Lazy]:
    (indices,) = args
    out = node.outputs[0].aval
    a = node.attrs
    ax = indices.ndim if a.get("axis", -1) == -1 else a["axis"]
    on, off = Const(a.get("on_value", 1), out.dtype), Const(a.get("off_value", 0), out.dtype)

    def build(idx: tuple) -> Any:
        which = indices.build(tuple(idx[:ax]) + tuple(idx[ax + 1:]))
        hot = Apply("equal", (which, IndexValue(idx[ax], which.dtype)), dtypes.bool_)
        return Apply("select", (hot, on, off), out.dtype)

    return [Lazy(out.shape, out.dtype, build, None, (*indices.ops, "one_hot"))]


register(OpDef("one_hot", MOVEMENT, _one_hot_infer, _one_hot_ref, _one_hot_lower,
               doc="tf.one_hot: on_value where the index equals the position along axis, else off_value"))

