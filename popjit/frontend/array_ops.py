"""TensorFlow array functions: shapes, slicing, joining, creation.

Arguments that determine a shape (``tf.reshape``'s shape, ``tf.zeros``'s dims, a slice bound)
must be known while tracing, as XLA requires; :func:`static_value` raises TensorFlow's
"must be a compile-time constant" error otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from popjit import dtypes
from popjit.errors import InvalidArgumentError
from popjit.frontend.convert import convert_to_tensor
from popjit.frontend.tensor import Tensor, TensorShape
from popjit.frontend.tracing import apply_op, current_trace
from popjit.source import user_location, where

__all__ = [
    "broadcast_to",
    "concat",
    "expand_dims",
    "fill",
    "ones",
    "ones_like",
    "rank",
    "reshape",
    "shape",
    "size",
    "squeeze",
    "stack",
    "transpose",
    "unstack",
    "zeros",
    "zeros_like",
]


def _t(x: Any, dtype: Any = None) -> Tensor:
    return convert_to_tensor(x, dtype=dtype)


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
        return np.array([int(static_value(v, what, op, index)) if not isinstance(v, (int, np.integer)) else int(v)
                         for v in x], dtype=np.int64)
    return np.asarray(x)


def _shape_list(shape: Any, op: str = "Reshape") -> list[int]:
    return [int(d) for d in np.ravel(static_value(shape, "shape", op))]


def shape(input: Any, out_type: Any = dtypes.int32, name: str | None = None) -> Tensor:
    """``tf.shape``: the (static) shape as a 1-D tensor."""
    return _t(np.array(_t(input).aval.shape, dtype=dtypes.as_dtype(out_type).np))


def size(input: Any, out_type: Any = dtypes.int32, name: str | None = None) -> Tensor:
    return _t(np.array(_t(input).aval.size, dtype=dtypes.as_dtype(out_type).np))


def rank(input: Any, name: str | None = None) -> Tensor:
    return _t(np.array(_t(input).ndim, dtype=np.int32))


def reshape(tensor: Any, shape: Any, name: str | None = None) -> Tensor:
    """``tf.reshape``; one dimension may be -1."""
    x = _t(tensor)
    dims = _shape_list(shape)
    if dims.count(-1) > 1:
        raise InvalidArgumentError(f"Only one input size may be -1, not both in shape {dims} [Op:Reshape]")
    if -1 in dims:
        known = int(np.prod([d for d in dims if d != -1], dtype=np.int64))
        if known == 0 or x.aval.size % known:
            raise InvalidArgumentError(
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


def expand_dims(input: Any, axis: int, name: str | None = None) -> Tensor:
    x = _t(input)
    axis = int(axis)
    if not -x.ndim - 1 <= axis <= x.ndim:
        raise InvalidArgumentError(f"Tried to expand dim index {axis} for tensor with {x.ndim} dimensions.")
    axis = axis % (x.ndim + 1)
    return reshape(x, [*x.aval.shape[:axis], 1, *x.aval.shape[axis:]])


def squeeze(input: Any, axis: Any = None, name: str | None = None) -> Tensor:
    x = _t(input)
    shp = x.aval.shape
    if axis is None:
        keep = [d for d in shp if d != 1]
    else:
        axes = {int(a) % max(x.ndim, 1) for a in (axis if isinstance(axis, (list, tuple)) else [axis])}
        for a in axes:
            if shp[a] != 1:
                raise InvalidArgumentError(f"Can not squeeze dim[{a}], expected a dimension of 1, got {shp[a]}")
        keep = [d for k, d in enumerate(shp) if k not in axes]
    return reshape(x, keep)


def broadcast_to(input: Any, shape: Any, name: str | None = None) -> Tensor:
    x = _t(input)
    dims = tuple(_shape_list(shape, "BroadcastTo"))
    return x if dims == x.aval.shape else apply_op("broadcast_to", [x], shape=dims)


def fill(dims: Any, value: Any, name: str | None = None) -> Tensor:
    """A tensor of shape ``dims`` filled with ``value``."""
    v = _t(value)
    return broadcast_to(v, _shape_list(dims, "Fill"))


def zeros(shape: Any, dtype: Any = dtypes.float32, name: str | None = None) -> Tensor:
    return fill(shape, _t(0, dtype=dtype))


def ones(shape: Any, dtype: Any = dtypes.float32, name: str | None = None) -> Tensor:
    return fill(shape, _t(1, dtype=dtype))


def zeros_like(input: Any, dtype: Any = None, name: str | None = None) -> Tensor:
    x = _t(input)
    return zeros(list(x.aval.shape), dtype or x.dtype)


def ones_like(input: Any, dtype: Any = None, name: str | None = None) -> Tensor:
    x = _t(input)
    return ones(list(x.aval.shape), dtype or x.dtype)


def stack(values: Sequence[Any], axis: int = 0, name: str | None = "stack") -> Tensor:
    """Join equally shaped tensors along a new ``axis``."""
    ts = [_t(v) for v in values]
    if not ts:
        raise ValueError("stack needs at least one tensor")
    return concat([expand_dims(t, axis) for t in ts], axis)


def unstack(value: Any, num: int | None = None, axis: int = 0, name: str | None = "unstack") -> list[Tensor]:
    """Split along ``axis`` into a list of tensors with that axis removed."""
    x = _t(value)
    axis = axis % x.ndim
    return [squeeze(slice_axis(x, axis, i, i + 1), axis) for i in range(x.aval.shape[axis])]


def slice_axis(x: Tensor, axis: int, start: int, stop: int) -> Tensor:
    begin = [0] * x.ndim
    size = list(x.aval.shape)
    begin[axis], size[axis] = start, stop - start
    return apply_op("slice", [x], begin=tuple(begin), size=tuple(size), step=(1,) * x.ndim)


def concat(values: Sequence[Any], axis: int, name: str | None = "concat") -> Tensor:
    """Join tensors along an existing ``axis``."""
    ts = [_t(v) for v in values]
    if len(ts) == 1:
        return ts[0]
    return apply_op("concat", ts, axis=int(axis))


def _normalize_key(key: Any, ndim: int) -> list[Any]:
    key = list(key) if isinstance(key, tuple) else [key]
    n_real = sum(1 for k in key if k is not None and k is not Ellipsis)
    if Ellipsis in key:
        i = key.index(Ellipsis)
        key = key[:i] + [slice(None)] * (ndim - n_real) + key[i + 1:]
    else:
        key = key + [slice(None)] * (ndim - n_real)
    return key


def getitem(x: Tensor, key: Any) -> Tensor:
    """Python indexing on a tensor: ints, slices (with steps), ``...``, ``None`` and scalar int tensors."""
    key = _normalize_key(key, x.ndim)
    begin, size, step, out_shape = [], [], [], []
    dim = 0
    dynamic: list[tuple[int, Tensor]] = []
    for k in key:
        if k is None:
            out_shape.append(1)
            continue
        if dim >= x.ndim:
            raise IndexError(f"Index out of range: too many indices for a tensor of rank {x.ndim}")
        d = x.aval.shape[dim]
        if isinstance(k, slice):
            start, stop, st = (static_value(v, "slice bound", "StridedSlice").item() if isinstance(v, Tensor) else v
                               for v in (k.start, k.stop, k.step))
            lo, hi, stp = slice(start, stop, st).indices(d)
            n = len(range(lo, hi, stp))
            begin.append(lo if n else 0)
            size.append(n)
            step.append(stp)
            out_shape.append(n)
        else:
            if isinstance(k, Tensor) and k.is_symbolic and current_trace().constant_value(k) is None:
                dynamic.append((len(out_shape), k))
                begin.append(0)
                size.append(d)
                step.append(1)
                out_shape.append(-1)
                dim += 1
                continue
            i = int(static_value(k, "index", "StridedSlice")) if isinstance(k, Tensor) else int(k)
            if not -d <= i < d:
                raise InvalidArgumentError(
                    f"slice index {i} of dimension {dim} out of bounds. [Op:StridedSlice]{where(user_location(3))}"
                )
            begin.append(i % d)
            size.append(1)
            step.append(1)
        dim += 1
    y = x
    if tuple(begin) != (0,) * x.ndim or tuple(size) != x.aval.shape or any(s != 1 for s in step):
        y = apply_op("slice", [x], begin=tuple(begin), size=tuple(size), step=tuple(step))
    for pos, idx in reversed(dynamic):
        y = _dynamic_index(y, idx, _axis_of(out_shape, pos))
        out_shape.pop(pos)
    return reshape(y, out_shape)


def _axis_of(out_shape: list[int], pos: int) -> int:
    return pos


def _dynamic_index(x: Tensor, i: Tensor, axis: int) -> Tensor:
    from popjit.frontend import gather_ops

    return gather_ops.gather(x, i, axis=axis)


def range_(start: Any, limit: Any = None, delta: Any = 1, dtype: Any = None, name: str = "range") -> Tensor:
    """``tf.range``: a 1-D ramp (its bounds must be known while tracing)."""
    if limit is None:
        start, limit = 0, start
    vals = [static_value(_t(v), "range bound", "Range").item() for v in (start, limit, delta)]
    if dtype is None:
        dtype = dtypes.float32 if any(isinstance(v, float) for v in vals) else dtypes.int32
    dtype = dtypes.as_dtype(dtype)
    s, lim, d = vals
    if d == 0:
        raise InvalidArgumentError("Requires delta != 0: 0 [Op:Range]")
    n = max(0, int(np.ceil((lim - s) / d)))
    return apply_op("iota", [], shape=(n,), dtype=dtype, axis=0, start=s, delta=d)
