"""``tf.gather``, ``tf.one_hot`` and ``tf.math.unsorted_segment_sum``: indexing by integer tensors.

Indices may be computed at run time (a loop counter, an argmax); out-of-range indices clamp
into range, as XLA does on the IPU (see :mod:`popjit.ops.gather`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from popjit import dtypes
from popjit.errors import InvalidArgumentError
from popjit.frontend.convert import convert_to_tensor
from popjit.frontend.tensor import Tensor
from popjit.frontend.tracing import apply_op
from popjit.source import user_location, where

__all__ = ["gather", "one_hot", "unsorted_segment_sum"]


def _static_scalar(x: Any, what: str, op: str) -> Any:
    # why: array_ops is built on this module (importing it at the top would be circular)
    from popjit.frontend.array_ops import static_value

    value = np.asarray(static_value(x, what, op))
    if value.size != 1:
        raise InvalidArgumentError(f"{what} must be a scalar, got shape {list(value.shape)} [Op:{op}]"
                                   f"{where(user_location(2))}")
    return value.reshape(()).item()


def _indices(indices: Any) -> Tensor:
    t = convert_to_tensor(indices, dtype_hint=dtypes.int32)
    if t.dtype == dtypes.int64 and not t.is_symbolic:
        t = convert_to_tensor(t.numpy().astype(np.int32))
    return t


def gather(params: Any, indices: Any, validate_indices: Any = None, axis: Any = None, batch_dims: int = 0,
           name: str | None = None) -> Tensor:
    """``tf.gather``: slices of ``params`` along ``axis`` at ``indices`` (default axis: ``batch_dims``).

    Out-of-range indices clamp to the nearest valid one (XLA's behaviour on the IPU) instead of
    raising as TensorFlow's CPU kernel does.
    """
    p = convert_to_tensor(params)
    i = _indices(indices)
    b = int(_static_scalar(batch_dims, "batch_dims", "GatherV2"))
    a = b if axis is None else int(_static_scalar(axis, "axis", "GatherV2"))
    return apply_op("gather", [p, i], axis=a, batch_dims=b)


def one_hot(indices: Any, depth: Any, on_value: Any = None, off_value: Any = None, axis: Any = None,
            dtype: Any = None, name: str | None = None) -> Tensor:
    """``tf.one_hot``: ``on_value`` where an index equals the position along the new ``axis``, else
    ``off_value`` (indices outside ``[0, depth)`` give a row of ``off_value``)."""
    i = _indices(indices)
    n = int(_static_scalar(depth, "depth", "OneHot"))
    given = next((v for v in (on_value, off_value) if v is not None), None)
    if dtype is None:
        dtype = convert_to_tensor(given).dtype if given is not None else dtypes.float32
    dtype = dtypes.as_dtype(dtype)
    on = 1 if on_value is None else _static_scalar(convert_to_tensor(on_value, dtype=dtype), "on_value", "OneHot")
    off = 0 if off_value is None else _static_scalar(convert_to_tensor(off_value, dtype=dtype), "off_value", "OneHot")
    ax = -1 if axis is None else int(_static_scalar(axis, "axis", "OneHot"))
    return apply_op("one_hot", [i], depth=n, on_value=on, off_value=off, axis=ax, dtype=dtype)


def unsorted_segment_sum(data: Any, segment_ids: Any, num_segments: Any, name: str | None = None,
                         batch_dims: int = 0) -> Tensor:
    """``tf.math.unsorted_segment_sum``: ``out[s] = sum of data[i...]`` over the ``i`` with
    ``segment_ids[i...] == s``, shape ``[num_segments] + data.shape[segment_ids.ndim:]``.

    ``num_segments`` must be known while tracing. Ids outside ``[0, num_segments)`` are dropped, as
    XLA does (TensorFlow's CPU kernel raises for ids past the end). ``batch_dims`` (popjit's
    extension, the adjoint of ``tf.gather``'s) treats that many leading axes of ``segment_ids`` as
    batch axes shared with ``data``.
    """
    d = convert_to_tensor(data)
    i = _indices(segment_ids)
    n = int(_static_scalar(num_segments, "num_segments", "UnsortedSegmentSum"))
    return apply_op("unsorted_segment_sum", [d, i], num_segments=n, batch_dims=int(batch_dims))


def dynamic_update_slice(operand: Any, update: Any, begin: Any) -> Tensor:
    """``operand`` with ``update`` written at the run-time position ``begin`` (one index per axis;
    XLA's DynamicUpdateSlice, clamped into range). Not a TensorFlow name: Keras's recurrent layers and
    the gradient rules of loops use it."""
    return apply_op("dynamic_update_slice", [convert_to_tensor(operand), convert_to_tensor(update),
                                             convert_to_tensor(begin)])
