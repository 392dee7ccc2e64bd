"""TensorFlow array functions: shapes, slicing, joining, splitting, padding, creation.

Arguments that determine a shape (``tf.reshape``'s shape, ``tf.zeros``'s dims, a slice bound)
must be known while tracing, as XLA requires; :func:`static_value` raises TensorFlow's
"must be a compile-time constant" error otherwise. The one exception is an *index*: a scalar
integer tensor computed in the function (a loop counter, say) may index a tensor, ``x[i]``, and
becomes a gather (clamped into range, as XLA does on the IPU).

Shape errors raise ``InvalidArgumentError`` naming the user's file and line.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any

import numpy as np

from popjit import dtypes
from popjit.errors import InvalidArgumentError
from popjit.frontend import gather_ops, math_ops
from popjit.frontend.convert import convert_to_tensor
from popjit.frontend.tensor import Tensor, TensorShape
from popjit.frontend.tracing import apply_op, current_trace
from popjit.source import user_location, where

__all__ = [
    "identity",
    "broadcast_to",
    "concat",
    "expand_dims",
    "eye",
    "fill",
    "ones",
    "ones_like",
    "pad",
    "rank",
    "reshape",
    "reverse",
    "shape",
    "size",
    "slice",
    "split",
    "squeeze",
    "stack",
    "strided_slice",
    "tile",
    "transpose",
    "unstack",
    "zeros",
    "zeros_like",
]


def _t(x: Any, dtype: Any = None) -> Tensor:
    return convert_to_tensor(x, dtype=dtype)


def _error(message: str) -> InvalidArgumentError:
    """An ``InvalidArgumentError`` naming the user's file and line."""
    return InvalidArgumentError(f"{message}{where(user_location(2))}")


def static_value(x: Any, what: str = "shape", op: str = "Reshape", index: int = 1) -> np.ndarray:
    """The value of ``x`` if it is known while tracing; TensorFlow's XLA error otherwise."""
    if isinstance(x, Tensor):
        if not x.is_symbolic:
            return x.numpy()
        trace = current_trace()
        value = trace.constant_value(x) if trace else None
        if value is None:
            raise InvalidArgumentError(
                f"Input {index} to node `{op}` with op {op} must be a compile-time constant.\n\n"
                "XLA compilation requires that operator arguments that represent shapes or dimensions be "
                f"evaluated to concrete values at compile time. This error means that a {what} or dimension "
                "argument could not be evaluated at compile time, usually because the value of the argument "
                "depends on a parameter to the computation, on a variable, or on a stateful operation such as "
                f"a random number generator.{where(user_location(2))}"
            )
        return value
    if isinstance(x, TensorShape):
        return np.array(x.as_list())
    if isinstance(x, (list, tuple)):
        parts = [np.asarray(static_value(v, what, op, index)) for v in x]
        return np.array(parts) if parts else np.zeros((0,), np.int64)
    if hasattr(x, "read_value"):
        return static_value(x.read_value(), what, op, index)
    return np.asarray(x)


def _static_int(x: Any, what: str, op: str) -> int:
    value = np.asarray(static_value(x, what, op))
    if value.size != 1 or value.dtype.kind not in "iub":
        raise _error(f"{what} must be an integer scalar, got {value!r} [Op:{op}]")
    return int(value.reshape(()))


def _shape_list(shape: Any, op: str = "Reshape") -> list[int]:
    return [int(d) for d in np.ravel(static_value(shape, "shape", op))]


def _axis(axis: Any, ndim: int, op: str, extra: int = 0) -> int:
    """``axis`` normalised into ``[0, ndim + extra)``; an error naming the valid range otherwise."""
    a = _static_int(axis, "axis", op)
    n = ndim + extra
    if not -n <= a < n or n == 0:
        raise _error(f"Expected axis in the range [{-n}, {n}), but got {a} for a tensor of rank {ndim} [Op:{op}]")
    return a % n


# ----------------------------------------------------------------------------------------------
# Shapes


def shape(input: Any, out_type: Any = dtypes.int32, name: str | None = None) -> Tensor:
    """``tf.shape``: the (static) shape as a 1-D tensor."""
    return _t(np.array(_t(input).aval.shape, dtype=dtypes.as_dtype(out_type).np))


def size(input: Any, out_type: Any = dtypes.int32, name: str | None = None) -> Tensor:
    """``tf.size``: the number of elements."""
    return _t(np.array(_t(input).aval.size, dtype=dtypes.as_dtype(out_type).np))


def rank(input: Any, name: str | None = None) -> Tensor:
    """``tf.rank``: the number of dimensions."""
    return _t(np.array(_t(input).ndim, dtype=np.int32))


def reshape(tensor: Any, shape: Any, name: str | None = None) -> Tensor:
    """``tf.reshape``; one dimension may be -1."""
    x = _t(tensor)
    dims = _shape_list(shape)
    if dims.count(-1) > 1:
        raise _error(f"Only one input size may be -1, not both in shape {dims} [Op:Reshape]")
    if -1 in dims:
        known = int(np.prod([d for d in dims if d != -1], dtype=np.int64))
        if known == 0 or x.aval.size % known:
            raise _error(
                f"Input to reshape is a tensor with {x.aval.size} values, but the requested shape requires a "
                f"multiple of {known} [Op:Reshape]"
            )
        dims[dims.index(-1)] = x.aval.size // known
    if tuple(dims) == x.aval.shape:
        return x
    return apply_op("reshape", [x], shape=tuple(dims))


def transpose(a: Any, perm: Any = None, conjugate: bool = False, name: str | None = None) -> Tensor:
    """``tf.transpose``: reverse the axes, or permute them by ``perm``."""
    x = _t(a)
    p = tuple(reversed(range(x.ndim))) if perm is None else tuple(int(i) for i in np.ravel(static_value(perm)))
    if p == tuple(range(x.ndim)):
        return x
    return apply_op("transpose", [x], perm=p)


def expand_dims(input: Any, axis: Any, name: str | None = None) -> Tensor:
    """``tf.expand_dims``: insert a size-1 dimension at ``axis`` (in ``[-rank - 1, rank]``)."""
    x = _t(input)
    a = _static_int(axis, "axis", "ExpandDims")
    if not -x.ndim - 1 <= a <= x.ndim:
        raise _error(f"Tried to expand dim index {a} for tensor with {x.ndim} dimensions. [Op:ExpandDims]")
    a = a % (x.ndim + 1)
    return reshape(x, [*x.aval.shape[:a], 1, *x.aval.shape[a:]])


def squeeze(input: Any, axis: Any = None, name: str | None = None) -> Tensor:
    """``tf.squeeze``: drop size-1 dimensions (all of them, or those in ``axis``)."""
    x = _t(input)
    shp = x.aval.shape
    if axis is None:
        return reshape(x, [d for d in shp if d != 1])
    axes = set()
    for a in np.ravel(static_value(list(axis) if isinstance(axis, (list, tuple)) else axis, "axis", "Squeeze")):
        a = int(a)
        if not -x.ndim <= a < x.ndim:
            raise _error(f"Tried to squeeze dim index {a} for tensor with {x.ndim} dimensions. [Op:Squeeze]")
        if shp[a] != 1:
            raise _error(f"Can not squeeze dim[{a % x.ndim}], expected a dimension of 1, got {shp[a]} [Op:Squeeze]")
        axes.add(a % x.ndim)
    return reshape(x, [d for k, d in enumerate(shp) if k not in axes])


def broadcast_to(input: Any, shape: Any, name: str | None = None) -> Tensor:
    """``tf.broadcast_to``: NumPy broadcasting to ``shape``."""
    x = _t(input)
    dims = tuple(_shape_list(shape, "BroadcastTo"))
    return x if dims == x.aval.shape else apply_op("broadcast_to", [x], shape=dims)


# ----------------------------------------------------------------------------------------------
# Creation


def fill(dims: Any, value: Any, name: str | None = None) -> Tensor:
    """``tf.fill``: a tensor of shape ``dims`` filled with the scalar ``value``."""
    v = _t(value)
    if v.ndim != 0:
        raise _error(f"value must be a scalar, got a tensor of shape {list(v.aval.shape)} [Op:Fill]")
    dims_list = _shape_list(dims, "Fill")
    if any(d < 0 for d in dims_list):
        raise _error(f"dims must be non-negative, got {dims_list} [Op:Fill]")
    return broadcast_to(v, dims_list)


def zeros(shape: Any, dtype: Any = dtypes.float32, name: str | None = None) -> Tensor:
    """``tf.zeros``."""
    return fill(shape, _t(np.zeros((), dtypes.as_dtype(dtype).np)))


def ones(shape: Any, dtype: Any = dtypes.float32, name: str | None = None) -> Tensor:
    """``tf.ones``."""
    return fill(shape, _t(np.ones((), dtypes.as_dtype(dtype).np)))


def zeros_like(input: Any, dtype: Any = None, name: str | None = None) -> Tensor:
    """``tf.zeros_like``: zeros of ``input``'s shape (and dtype unless given)."""
    x = _t(input)
    return zeros(list(x.aval.shape), dtype or x.dtype)


def ones_like(input: Any, dtype: Any = None, name: str | None = None) -> Tensor:
    """``tf.ones_like``: ones of ``input``'s shape (and dtype unless given)."""
    x = _t(input)
    return ones(list(x.aval.shape), dtype or x.dtype)


def eye(num_rows: Any, num_columns: Any = None, batch_shape: Any = None, dtype: Any = dtypes.float32,
        name: str | None = None) -> Tensor:
    """``tf.eye``: identity matrices of shape ``batch_shape + [num_rows, num_columns]``."""
    rows = _static_int(num_rows, "num_rows", "Eye")
    cols = rows if num_columns is None else _static_int(num_columns, "num_columns", "Eye")
    batch = [] if batch_shape is None else _shape_list(batch_shape, "Eye")
    return apply_op("eye", [], shape=(*batch, rows, cols), dtype=dtypes.as_dtype(dtype))


_RANGE_ORDER = [dtypes.int32, dtypes.int64, dtypes.float16, dtypes.float32, dtypes.float64]


def range_(start: Any, limit: Any = None, delta: Any = 1, dtype: Any = None, name: str = "range") -> Tensor:
    """``tf.range``: ``start, start + delta, ...`` up to (excluding) ``limit``; bounds known while tracing."""
    if limit is None:
        start, limit = 0, start
    ts = [v if isinstance(v, Tensor) else _t(v) for v in (start, limit, delta)]
    if dtype is None:
        dtype = max((t.dtype for t in ts), key=lambda d: _RANGE_ORDER.index(d) if d in _RANGE_ORDER else 0)
    dtype = dtypes.as_dtype(dtype)
    vals = [np.asarray(static_value(t, "range bound", "Range")).reshape(()).astype(dtype.np) for t in ts]
    s, lim, d = vals
    if d == 0:
        raise _error("Requires delta != 0: 0 [Op:Range]")
    if (d > 0 and s > lim) or (d < 0 and s < lim):
        rel = "start <= limit when delta > 0" if d > 0 else "start >= limit when delta < 0"
        raise _error(f"Requires {rel}: {s}/{lim} [Op:Range]")
    if dtype.is_integer:
        n = (abs(int(lim) - int(s)) + abs(int(d)) - 1) // abs(int(d))
        return apply_op("iota", [], shape=(n,), dtype=dtype, axis=0, start=int(s), delta=int(d))
    with np.errstate(all="ignore"):
        n = int(np.ceil(np.abs((lim - s) / d)))
    return apply_op("iota", [], shape=(n,), dtype=dtype, axis=0, start=float(s), delta=float(d))


# ----------------------------------------------------------------------------------------------
# Joining and splitting


def _convert_all(values: Sequence[Any]) -> list[Tensor]:
    first = next((v for v in values if isinstance(v, Tensor) or hasattr(v, "read_value")), None)
    hint = convert_to_tensor(first).dtype if first is not None else None
    return [convert_to_tensor(v, dtype_hint=hint) for v in values]


def stack(values: Sequence[Any], axis: Any = 0, name: str | None = "stack") -> Tensor:
    """``tf.stack``: join equally shaped tensors along a new ``axis``."""
    ts = _convert_all(values)
    if not ts:
        raise _error("stack needs at least one tensor [Op:Pack]")
    for i, t in enumerate(ts[1:], start=1):
        if t.aval.shape != ts[0].aval.shape:
            raise _error(f"Shapes of all inputs must match: values[0].shape = {list(ts[0].aval.shape)} != "
                         f"values[{i}].shape = {list(t.aval.shape)} [Op:Pack]")
    a = _axis(axis, ts[0].ndim, "Pack", extra=1)
    return concat([expand_dims(t, a) for t in ts], a)


def unstack(value: Any, num: int | None = None, axis: Any = 0, name: str | None = "unstack") -> list[Tensor]:
    """``tf.unstack``: split along ``axis`` into a list of tensors with that axis removed."""
    x = _t(value)
    if x.ndim == 0:
        raise _error("Input shape axis 0 must be in range [-0, 0): cannot unstack a scalar [Op:Unpack]")
    a = _axis(axis, x.ndim, "Unpack")
    n = x.aval.shape[a]
    if num is not None and int(num) != n:
        raise _error(f"Input shape axis {a} has {n} elements, but num = {num} [Op:Unpack]")
    if n == 0:
        return []
    keep = [d for k, d in enumerate(x.aval.shape) if k != a]
    return [reshape(p, keep) for p in _split(x, a, [1] * n)]


def _split(x: Tensor, axis: int, sizes: Sequence[int]) -> list[Tensor]:
    if len(sizes) == 1:
        return [x]
    return list(apply_op("split", [x], axis=axis, sizes=tuple(int(s) for s in sizes)))


def split(value: Any, num_or_size_splits: Any, axis: Any = 0, num: int | None = None,
          name: str | None = "split") -> list[Tensor]:
    """``tf.split``: ``num_or_size_splits`` equal pieces, or pieces of the listed sizes (one may be -1)."""
    x = _t(value)
    if x.ndim == 0:
        raise _error("Can't split a scalar (rank 0) tensor [Op:Split]")
    a = _axis(axis, x.ndim, "Split")
    d = x.aval.shape[a]
    spec = np.asarray(static_value(num_or_size_splits, "num_or_size_splits", "SplitV"))
    if spec.ndim == 0:
        k = int(spec)
        if k <= 0 or d % k:
            raise _error(f"Number of ways to split should evenly divide the split dimension, but got split_dim {a} "
                         f"(size = {d}) and num_split {k} [Op:Split]")
        return _split(x, a, [d // k] * k)
    sizes = [int(s) for s in spec.reshape(-1)]
    if sizes.count(-1) > 1 or any(s < -1 for s in sizes):
        raise _error(f"There can only be one -1 in the input, and sizes must be >= -1: {sizes} [Op:SplitV]")
    if -1 in sizes:
        rest = d - sum(s for s in sizes if s != -1)
        if rest < 0:
            raise _error(f"Determined shape must either match input shape along split_dim exactly if fully "
                         f"specified, or be less than the size of the input along split_dim if not fully "
                         f"specified.  Got: {sum(s for s in sizes if s != -1)} [Op:SplitV]")
        sizes[sizes.index(-1)] = rest
    if num is not None and int(num) != len(sizes):
        raise _error(f"num = {num} does not match the {len(sizes)} sizes {sizes} [Op:SplitV]")
    return _split(x, a, sizes)


def concat(values: Sequence[Any], axis: Any, name: str | None = "concat") -> Tensor:
    """``tf.concat``: join tensors along an existing ``axis``."""
    ts = _convert_all(values)
    if not ts:
        raise _error("concat needs at least one tensor [Op:ConcatV2]")
    a = _static_int(axis, "axis", "ConcatV2")
    if len(ts) == 1:
        if ts[0].ndim == 0:
            raise _error("Can't concatenate scalars (use tf.stack instead) [Op:ConcatV2]")
        _axis(a, ts[0].ndim, "ConcatV2")
        return ts[0]
    return apply_op("concat", ts, axis=a)


def tile(input: Any, multiples: Any, name: str | None = None) -> Tensor:
    """``tf.tile``: repeat the tensor ``multiples[k]`` times along each axis ``k``."""
    x = _t(input)
    mult = tuple(_shape_list(multiples, "Tile"))
    if mult == (1,) * x.ndim:
        return x
    return apply_op("tile", [x], multiples=mult)


def pad(tensor: Any, paddings: Any, mode: str = "CONSTANT", constant_values: Any = 0,
        name: str | None = None) -> Tensor:
    """``tf.pad``: ``paddings[k] = [before, after]`` elements along axis ``k``; CONSTANT, REFLECT or SYMMETRIC."""
    x = _t(tensor)
    p = np.asarray(static_value(paddings, "paddings", "Pad"))
    if p.shape != (x.ndim, 2):
        raise _error(f"paddings must be a matrix with 2 columns and {x.ndim} rows (one per dimension of the input "
                     f"of shape {list(x.aval.shape)}), got shape {list(p.shape)} [Op:Pad]")
    pairs = tuple((int(lo), int(hi)) for lo, hi in p)
    mode = str(mode).upper()
    if not isinstance(constant_values, Tensor) and np.ndim(constant_values) == 0 and constant_values == 0:
        value = np.zeros((), x.dtype.np)  # the default works for every dtype, bool included (tf.pad's Pad op)
    else:
        value = np.asarray(static_value(_t(constant_values, dtype=x.dtype), "constant_values", "PadV2"))
    if value.size != 1:
        raise _error(f"constant_values must be a scalar, got shape {list(value.shape)} [Op:PadV2]")
    if all(lo == hi == 0 for lo, hi in pairs):
        return x
    return apply_op("pad", [x], paddings=pairs, mode=mode, constant_value=value.reshape(()).item())


def reverse(tensor: Any, axis: Any, name: str | None = None) -> Tensor:
    """``tf.reverse``: flip the listed axes (a negative-step slice: no copy)."""
    x = _t(tensor)
    axes = {_axis(int(a), x.ndim, "ReverseV2") for a in np.ravel(static_value(axis, "axis", "ReverseV2"))}
    if not axes:
        return x
    shp = x.aval.shape
    begin = tuple(max(d - 1, 0) if k in axes else 0 for k, d in enumerate(shp))
    step = tuple(-1 if k in axes else 1 for k in range(x.ndim))
    return apply_op("slice", [x], begin=begin, size=shp, step=step)


# ----------------------------------------------------------------------------------------------
# Indexing: x[...], tf.slice, tf.strided_slice


def _expand_key(key: Any, ndim: int) -> list[Any]:
    """The index entries with ``...`` expanded and trailing full slices added."""
    entries = list(key) if isinstance(key, tuple) else [key]
    n_ellipsis = sum(1 for k in entries if k is Ellipsis)
    if n_ellipsis > 1:
        raise _error("An index can only have a single ellipsis ('...')")
    n_real = sum(1 for k in entries if k is not None and k is not Ellipsis)
    if n_real > ndim:
        raise _error(f"Index out of range using input dim {ndim}; input has only {ndim} dims [Op:StridedSlice]")
    fill_in = [builtins.slice(None)] * (ndim - n_real)
    if n_ellipsis:
        i = entries.index(Ellipsis)
        return entries[:i] + fill_in + entries[i + 1:]
    return entries + fill_in


def _scalar_index(k: Any) -> int | Tensor:
    """A static index as an int, or a scalar integer tensor whose value is only known at run time."""
    if isinstance(k, (bool, np.bool_)):
        raise _bad_index(k)
    if isinstance(k, (int, np.integer)):
        return int(k)
    if hasattr(k, "read_value"):
        k = k.read_value()
    if isinstance(k, np.ndarray) and k.ndim == 0 and k.dtype.kind in "iu":
        return int(k)
    if isinstance(k, Tensor) and k.ndim == 0 and k.dtype.is_integer:
        trace = current_trace()
        value = k.numpy() if not k.is_symbolic else (trace.constant_value(k) if trace else None)
        return k if value is None else int(value)
    raise _bad_index(k)


def _bad_index(k: Any) -> TypeError:
    return TypeError("Only integers, slices (`:`), ellipsis (`...`), tf.newaxis (`None`) and scalar tf.int32/tf.int64 "
                     f"tensors are valid indices, got {k!r}{where(user_location(2))}")


def _slice_bound(v: Any) -> int | None:
    if v is None:
        return None
    if isinstance(v, Tensor) or hasattr(v, "read_value"):
        return int(np.asarray(static_value(v, "slice bound", "StridedSlice")).reshape(()))
    return int(v.__index__()) if hasattr(v, "__index__") else int(v)


def getitem(x: Tensor, key: Any) -> Tensor:
    """Python indexing: ints (negative from the end), slices with any step, ``...``, ``None`` (tf.newaxis) and
    scalar int tensors (a run-time index becomes a clamped gather)."""
    x = _t(x)
    begin: list[int] = []
    size: list[int] = []
    step: list[int] = []
    out_shape: list[int] = []
    dynamic: list[tuple[int, Tensor]] = []
    dim = 0
    for k in _expand_key(key, x.ndim):
        if k is None:
            out_shape.append(1)
            continue
        d = x.aval.shape[dim]
        if isinstance(k, builtins.slice):
            lo_, hi_, st_ = (_slice_bound(v) for v in (k.start, k.stop, k.step))
            if st_ == 0:
                raise _error(f"strides[{dim}] must be non-zero [Op:StridedSlice]")
            lo, hi, st = builtins.slice(lo_, hi_, st_).indices(d)
            n = len(range(lo, hi, st))
            begin.append(lo if n else 0)
            size.append(n)
            step.append(st)
            out_shape.append(n)
        else:
            i = _scalar_index(k)
            if isinstance(i, Tensor):
                dynamic.append((dim, i))
                begin.append(0)
                size.append(d)
            else:
                if not -d <= i < d:
                    raise _error(f"slice index {i} of dimension {dim} out of bounds. [Op:StridedSlice]")
                begin.append(i % d)
                size.append(1)
            step.append(1)
        dim += 1
    y = x
    if tuple(begin) != (0,) * x.ndim or tuple(size) != x.aval.shape or any(s != 1 for s in step):
        y = apply_op("slice", [x], begin=tuple(begin), size=tuple(size), step=tuple(step))
    for axis, i in reversed(dynamic):
        y = _dynamic_index(y, i, axis)
    return reshape(y, out_shape)


def _dynamic_index(x: Tensor, i: Tensor, axis: int) -> Tensor:
    """``x`` at run-time index ``i`` along ``axis`` (negative counts from the end; out of range clamps)."""
    d = x.aval.shape[axis]
    if i.dtype != dtypes.int32:
        i = math_ops.cast(i, dtypes.int32)
    wrapped = math_ops.where(math_ops.less(i, 0), math_ops.add(i, d), i)
    return gather_ops.gather(x, wrapped, axis=axis)


def slice(input_: Any, begin: Any, size: Any, name: str | None = None) -> Tensor:
    """``tf.slice``: ``size[k]`` elements from ``begin[k]`` (-1: to the end). A run-time ``begin`` (with static
    sizes) clamps so the slice stays inside, as XLA's DynamicSlice does."""
    x = _t(input_)
    sizes = _shape_list(size, "Slice")
    if len(sizes) != x.ndim:
        raise _error(f"Expected size to be a 1-D tensor of size {x.ndim}, but got {len(sizes)} [Op:Slice]")
    trace = current_trace()
    b = _t(begin)
    known = b.numpy() if not b.is_symbolic else (trace.constant_value(b) if trace else None)
    if known is None:
        if -1 in sizes:
            static_value(b, "begin", "Slice")
        if b.dtype != dtypes.int32:
            # why: math_ops is built on this module (importing it at the top would be circular)
            from popjit.frontend import math_ops

            b = math_ops.cast(b, dtypes.int32)
        return apply_op("dynamic_slice", [x, b], size=tuple(sizes))
    starts = [int(v) for v in np.ravel(known)]
    if len(starts) != x.ndim:
        raise _error(f"Expected begin to be a 1-D tensor of size {x.ndim}, but got {len(starts)} [Op:Slice]")
    for k, (s, n, d) in enumerate(zip(starts, sizes, x.aval.shape)):
        n = d - s if n == -1 else n
        if not (0 <= s <= d and 0 <= n <= d - s):
            raise _error(f"Expected size[{k}] in [0, {d - s}], but got {n} (begin[{k}] = {s}, dimension size {d}) "
                         "[Op:Slice]")
        sizes[k] = n
    if starts == [0] * x.ndim and tuple(sizes) == x.aval.shape:
        return x
    return apply_op("slice", [x], begin=tuple(starts), size=tuple(sizes), step=(1,) * x.ndim)


def strided_slice(input_: Any, begin: Any, end: Any, strides: Any = None, begin_mask: int = 0, end_mask: int = 0,
                  ellipsis_mask: int = 0, new_axis_mask: int = 0, shrink_axis_mask: int = 0, var: Any = None,
                  name: str | None = None) -> Tensor:
    """``tf.strided_slice`` with TensorFlow's bit masks (the same rules as Python indexing)."""
    x = _t(input_)
    b_t = _t(begin)
    trace = current_trace()
    b_known = b_t.numpy() if not b_t.is_symbolic else (trace.constant_value(b_t) if trace else None)
    ends = [int(v) for v in np.ravel(static_value(end, "end", "StridedSlice"))]
    n = len(ends)
    st = [1] * n if strides is None else [int(v) for v in np.ravel(static_value(strides, "strides", "StridedSlice"))]
    if len(st) != n or (b_known is not None and np.size(b_known) != n) or b_t.aval.shape != (n,):
        raise _error(f"Expected begin, end, and strides to be 1D equal size tensors, but got shapes "
                     f"{list(b_t.aval.shape)}, [{n}], and [{len(st)}] instead. [Op:StridedSlice]")
    key: list[Any] = []
    for k in range(n):
        bit = 1 << k
        if ellipsis_mask & bit:
            key.append(Ellipsis)
        elif new_axis_mask & bit:
            key.append(None)
        elif shrink_axis_mask & bit:
            key.append(int(np.ravel(b_known)[k]) if b_known is not None else b_t[k])
        else:
            if b_known is None and not begin_mask & bit:
                static_value(b_t, "begin", "StridedSlice")
            lo = None if begin_mask & bit else int(np.ravel(b_known)[k])
            key.append(builtins.slice(lo, None if end_mask & bit else ends[k], st[k]))
    return getitem(x, tuple(key))


def identity(input: Any, name: str | None = None) -> Tensor:
    """The same value (a new tensor)."""
    return apply_op("identity", [_t(input)])
