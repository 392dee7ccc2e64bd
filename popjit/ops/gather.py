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
from popjit.ir.graph import Aval
from popjit.ir.lazy import Lazy, elementwise
from popjit.ir.loop import (
    Apply,
    Const,
    IndexValue,
    Kernel,
    Store,
    as_index,
    flat_index,
    iclamp,
    ivalue,
    ivar,
    row_major_strides,
)
from popjit.ir.opdef import MOVEMENT, REDUCE, REGISTRY, OpDef, register
from popjit.ops.elementwise import no_gradient
from popjit.ops.shapes import check_dtype

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


# ----------------------------------------------------------------------------------------------
# unsorted_segment_sum(data, segment_ids; num_segments, batch_dims): the adjoint of gather
#
# out[b..., s, inner...] = sum of data[b..., n..., inner...] over the n with segment_ids[b..., n...] == s.
# Ids outside [0, num_segments) are dropped (as XLA's scatter; TensorFlow's CPU kernel drops negative
# ids and raises for ids past the end). ``batch_dims`` leading axes of ``segment_ids`` are batch axes
# shared with ``data`` and the output (gather's ``batch_dims`` backwards; TF's op has none, so the
# ``tf.math`` function always passes 0).
#
# Lowering: a true scatter, as Poplar's multiUpdateAdd: the output is zeroed, then one kernel over
# ``data``'s domain adds each row into the row its id names, ``out[ids[n], j] += data[n, j]`` (ids out of
# range add nothing). That costs |data| steps (an Embedding(20000, 128) gradient over 2,560 ids is 330 K
# additions, where a reduction over the ids for every output element was 6.5 G). Rows of different ids
# may collide, so the engine runs such a kernel serially (:func:`popjit.ir.loop.scatters`). float16
# sums in a float32 buffer, rounded once at the end, as the reference does.

SEGMENT_DTYPES = (dtypes.float16, dtypes.float32, dtypes.float64, dtypes.int8, dtypes.uint8, dtypes.int16,
                  dtypes.uint16, dtypes.int32, dtypes.uint32, dtypes.int64)


def _segment_sum_infer(data: Aval, segment_ids: Aval, num_segments: int, batch_dims: int = 0) -> Aval:
    _check_indices(segment_ids.dtype, "segment_ids", "UnsortedSegmentSum")
    check_dtype("unsorted_segment_sum", data.dtype, SEGMENT_DTYPES)
    if int(num_segments) < 0:
        raise InvalidArgumentError(f"num_segments must be non-negative, got {num_segments} [Op:UnsortedSegmentSum]")
    if data.shape[:segment_ids.ndim] != segment_ids.shape:
        raise InvalidArgumentError(f"data.shape = {list(data.shape)} does not start with segment_ids.shape = "
                                   f"{list(segment_ids.shape)} [Op:UnsortedSegmentSum]")
    if not 0 <= batch_dims <= segment_ids.ndim:
        raise InvalidArgumentError(f"batch_dims ({batch_dims}) must be in [0, {segment_ids.ndim}] "
                                   "[Op:UnsortedSegmentSum]")
    b = batch_dims
    return Aval(segment_ids.shape[:b] + (int(num_segments),) + data.shape[segment_ids.ndim:], data.dtype)


def _segment_sum_ref(data: np.ndarray, segment_ids: np.ndarray, num_segments: int,
                     batch_dims: int = 0) -> np.ndarray:
    b, s = batch_dims, int(num_segments)
    batch, inner = segment_ids.shape[:b], data.shape[segment_ids.ndim:]
    nb = int(np.prod(batch, dtype=np.int64))
    n = int(np.prod(segment_ids.shape[b:], dtype=np.int64))
    acc = np.float32 if data.dtype == np.float16 else (np.int64 if data.dtype.kind in "iu" else data.dtype)
    ids = segment_ids.astype(np.int64).reshape(nb, n)
    valid = (ids >= 0) & (ids < s)
    flat = (ids + np.arange(nb, dtype=np.int64)[:, None] * s)[valid]
    out = np.zeros((nb * s, *inner), acc)
    np.add.at(out, flat, data.astype(acc).reshape(nb * n, *inner)[valid.reshape(-1)])
    with np.errstate(all="ignore"):
        return out.reshape(batch + (s,) + inner).astype(data.dtype)


def _segment_sum_lower(ctx: Any, node: Any, args: list[Lazy]) -> list[Lazy]:
    data, ids = args
    out = node.outputs[0].aval
    b = node.attrs.get("batch_dims", 0)
    segments = out.shape[b]
    acc_dtype = dtypes.float32 if out.dtype == dtypes.float16 else out.dtype
    acc = ctx.new_temp(out.shape, acc_dtype, "segment_sum")
    strides = row_major_strides(out.shape)
    ovars = tuple(ivar(f"i{k}") for k in range(out.ndim))
    ctx.emit(Kernel(ctx.name("segment_zero", ()), out.shape, [Store(acc, flat_index(ovars, strides),
                                                                     Const(0, acc_dtype))], None, ("zeros",)))
    if data.size and segments:
        dvars = tuple(ivar(f"i{k}") for k in range(data.ndim))
        seg = Apply("cast", (ids.build(dvars[:ids.ndim]),), dtypes.int64, (("dtype", dtypes.int64),))
        row = dvars[:b] + (iclamp(ivalue(seg), 0, segments - 1),) + dvars[ids.ndim:]
        current = Lazy.of_buffer(acc, out.shape).build(row)
        value = data.build(dvars)
        if acc_dtype != out.dtype:
            value = Apply("cast", (value,), acc_dtype, (("dtype", acc_dtype),))
        inside = Apply("logical_and", (Apply("greater_equal", (seg, Const(0, dtypes.int64)), dtypes.bool_),
                                       Apply("less", (seg, Const(segments, dtypes.int64)), dtypes.bool_)), dtypes.bool_)
        added = Apply("select", (inside, Apply("add", (current, value), acc_dtype), current), acc_dtype)
        ops = (*data.ops, *ids.ops, "segment_sum")
        ctx.emit(Kernel(ctx.name("segment_sum", ops), data.shape, [Store(acc, flat_index(row, strides), added)],
                        None, ops))
    result = Lazy.of_buffer(acc, out.shape)
    if acc_dtype == out.dtype:
        return [result]
    return [elementwise("cast", [result], out.shape, out.dtype, {"dtype": out.dtype})]


register(OpDef("unsorted_segment_sum", REDUCE, _segment_sum_infer, _segment_sum_ref, _segment_sum_lower,
               doc="tf.math.unsorted_segment_sum (+ batch_dims): sums of data rows per segment id; ids out of "
                   "range are dropped (as XLA)", extra={"dtypes": SEGMENT_DTYPES}))

# ----------------------------------------------------------------------------------------------
# Gradient rules (see popjit.autodiff)


def _signed(t: Any, ids: Any) -> Any:
    """Index values as a signed type that holds them all (int64 only for int64 and uint32 ids)."""
    wide = dtypes.int64 if ids.dtype in (dtypes.int64, dtypes.uint32) else dtypes.int32
    return t.cast(ids, wide)


def _in_range(t: Any, ids: Any, lo: int, hi: int) -> Any:
    """``lo <= ids < hi``."""
    signed = _signed(t, ids)
    return t.logical_and(signed >= lo, signed < hi)


def _gather_vjp(t: Any, primals: list, outputs: list, cts: list, axis: int = 0, batch_dims: int = 0) -> list[Any]:
    """Scatter-add of the cotangent into ``params``' shape at the (clamped, as the forward) indices.

    The cotangent is ``P[:b] + P[b:a] + I[b:] + P[a+1:]``; the ``P[b:a]`` axes move behind the index
    axes so that ``unsorted_segment_sum`` (batch_dims ``b``) can sum it into ``P[:b] + (D,) + P[b:a] +
    P[a+1:]``, and move back.
    """
    (params, indices), (ct,) = primals, cts
    if not params.dtype.is_floating:
        return [None, None]
    pshape, ishape = t.shape_of(params), t.shape_of(indices)
    a = axis % len(pshape)
    if not ishape:  # one index: the cotangent is a block (summed by a loop without touching the rest)
        begin = t.stack([t.cast(indices, dtypes.int32) if k == a else t.constant(0, dtypes.int32)
                         for k in range(len(pshape))])
        return [t.dynamic_update_slice(t.zeros_like(params), t.expand_dims(ct, a), begin), None]
    b = batch_dims % len(ishape) if batch_dims < 0 else batch_dims
    ni, nouter = len(ishape) - b, a - b
    dim = pshape[a]
    ids = t.clip_by_value(_signed(t, indices), 0, max(dim - 1, 0))
    rank = len(t.shape_of(ct))
    lead = list(range(b))
    order = lead + list(range(a, a + ni)) + list(range(b, a)) + list(range(a + ni, rank))
    moved = t.transpose(ct, order) if order != list(range(rank)) else ct
    summed = t.unsorted_segment_sum(moved, ids, dim, batch_dims=b)
    back = lead + list(range(b + 1, b + 1 + nouter)) + [b] + list(range(b + 1 + nouter, len(pshape)))
    grad = t.transpose(summed, back) if back != list(range(len(pshape))) else summed
    return [grad, None]


def _segment_sum_vjp(t: Any, primals: list, outputs: list, cts: list, num_segments: int,
                     batch_dims: int = 0) -> list[Any]:
    """Each data row gets its segment's cotangent (0 for dropped ids)."""
    (data, ids), (ct,) = primals, cts
    if not data.dtype.is_floating:
        return [None, None]
    if num_segments == 0:
        return [t.zeros_like(data), None]
    b, rank = batch_dims, len(t.shape_of(ids))
    safe = t.clip_by_value(_signed(t, ids), 0, num_segments - 1)
    picked = t.gather(ct, safe, axis=b, batch_dims=b)
    inner = len(t.shape_of(data)) - rank
    keep = t.reshape(_in_range(t, ids, 0, num_segments), t.shape_of(ids) + (1,) * inner)
    return [t.where(keep, picked, t.zeros_like(picked)), None]


def _dynamic_slice_vjp(t: Any, primals: list, outputs: list, cts: list, size: tuple[int, ...]) -> list[Any]:
    """The cotangent written into zeros at the start the forward read (``dynamic_update_slice`` clamps
    it the same way)."""
    (x, begin), (ct,) = primals, cts
    if not x.dtype.is_floating:
        return [None, None]
    if not t.shape_of(x):
        return [ct, None]
    return [t.dynamic_update_slice(t.zeros_like(x), ct, begin), None]


REGISTRY["gather"].vjp = _gather_vjp
REGISTRY["unsorted_segment_sum"].vjp = _segment_sum_vjp
REGISTRY["dynamic_slice"].vjp = _dynamic_slice_vjp
REGISTRY["one_hot"].vjp = no_gradient  # indices only: TF's NotDifferentiable
