"""``tf.constant`` and ``tf.convert_to_tensor``: Python and NumPy values to tensors."""

from __future__ import annotations

from typing import Any

import numpy as np

from popjit import dtypes
from popjit.dtypes import DType
from popjit.frontend.tensor import Tensor, is_tensor
from popjit.frontend.tracing import current_trace
from popjit.frontend.variables import Variable


def as_array(value: Any) -> np.ndarray:
    """``np.asarray(value)``, with TensorFlow's error for a nested list whose rows differ in length."""
    try:
        return np.asarray(value)
    except ValueError:
        raise ValueError("Can't convert non-rectangular Python sequence to Tensor.") from None


def array_dtype(arr: np.ndarray | np.generic) -> DType:
    """The dtype of a NumPy value, or a ``TypeError`` saying that popjit has no tensors of its kind."""
    if arr.dtype.kind in "USO":
        what = {"U": "strings", "S": "bytes", "O": "Python objects"}[arr.dtype.kind]
        extra = " (no tf.string)" if arr.dtype.kind in "US" else ""
        raise TypeError(f"a NumPy array of {what} (dtype {arr.dtype}) cannot become a tensor: popjit's tensors "
                        f"hold numbers and bools{extra}")
    return dtypes.as_dtype(arr.dtype)


def _default_dtype(value: Any) -> DType:
    """TensorFlow's dtype for a Python value: float32 for floats, int32 for ints, arrays keep theirs."""
    if isinstance(value, (np.ndarray, np.generic)):
        return array_dtype(value)
    if isinstance(value, (str, bytes)):
        raise TypeError(f"Cannot convert {value!r} to a tensor: popjit's tensors hold numbers and bools (no tf.string)")
    arr = as_array(value)
    if arr.dtype == np.bool_:
        return dtypes.bool_
    if np.issubdtype(arr.dtype, np.integer):
        return dtypes.int32 if arr.size == 0 or (arr.min() >= -(2**31) and arr.max() < 2**31) else dtypes.int64
    if np.issubdtype(arr.dtype, np.floating):
        return dtypes.float32
    if arr.dtype == object:
        flat = [x for x in np.ravel(arr)]
        if any(isinstance(x, Tensor) for x in flat):
            raise TypeError("nested tensors in a list: use tf.stack")
    if arr.dtype.kind in "US":
        raise TypeError(f"Cannot convert {value!r} to a tensor: popjit's tensors hold numbers and bools (no tf.string)")
    raise TypeError(f"Cannot convert {value!r} to a tensor: unsupported type {type(value).__name__}")


def _to_array(value: Any, dtype: DType) -> np.ndarray:
    arr = as_array(value)
    if arr.dtype == dtype.np:
        return arr
    if dtype.is_integer and np.issubdtype(arr.dtype, np.floating) and (
        not np.all(np.isfinite(arr)) or np.any(arr != np.trunc(arr))
    ):
        raise TypeError(f"Cannot convert {value!r} to EagerTensor of dtype {dtype.name}")
    if dtype.is_bool and not arr.dtype == np.bool_:
        raise TypeError(f"Cannot convert {value!r} to EagerTensor of dtype bool")
    if dtype.is_integer and np.issubdtype(arr.dtype, np.integer) and arr.size:
        info = np.iinfo(dtype.np)
        if arr.min() < info.min or arr.max() > info.max:
            raise TypeError(f"Cannot convert {value!r} to EagerTensor of dtype {dtype.name}: out of range")
    with np.errstate(over="ignore"):  # a float too large for float16 becomes inf, as in TensorFlow
        return arr.astype(dtype.np)


def _contains_tensor(value: Any) -> bool:
    if isinstance(value, (list, tuple)):
        return any(_contains_tensor(v) for v in value)

    return is_tensor(value)


def convert_to_tensor(value: Any, dtype: Any = None, dtype_hint: Any = None, name: str | None = None) -> Tensor:
    """Convert tensors, variables, NumPy arrays, Python scalars and nested lists to a Tensor.

    A Python scalar takes ``dtype`` if given, else ``dtype_hint`` when compatible, else TensorFlow's
    default (float32 / int32). A mismatching explicit ``dtype`` on a tensor raises ``ValueError``.
    """
    want = dtypes.as_dtype(dtype) if dtype is not None else None
    if isinstance(value, Variable):
        value = value.read_value()
    if isinstance(value, Tensor):
        if want is not None and value.dtype != want:
            raise ValueError(
                f"Tensor conversion requested dtype {want.name} for Tensor with dtype {value.dtype.name}: {value!r}"
            )
        return value
    if hasattr(value, "_as_graph_element") or hasattr(value, "__tf_tensor__"):
        return convert_to_tensor(value.__tf_tensor__(), dtype)  # type: ignore[union-attr]
    if isinstance(value, (list, tuple)) and _contains_tensor(value):
        # why: array_ops is built on this module (importing it at the top would be circular)
        from popjit.frontend import array_ops

        return array_ops.stack([convert_to_tensor(v, dtype, dtype_hint) for v in value])
    if want is None:
        if dtype_hint is not None and not isinstance(value, (np.ndarray, np.generic)):
            hint = dtypes.as_dtype(dtype_hint)
            try:
                arr = _to_array(value, hint)
            except TypeError:
                pass
            else:
                return Tensor.eager(arr) if current_trace() is None else _traced(arr)
        want = _default_dtype(value)
    arr = _to_array(value, want)
    return Tensor.eager(arr) if current_trace() is None else _traced(arr)


def _traced(arr: np.ndarray) -> Tensor:
    trace = current_trace()
    assert trace is not None
    return Tensor.symbolic(trace.constant(arr), trace)


def constant(value: Any, dtype: Any = None, shape: Any = None, name: str | None = None) -> Tensor:
    """``tf.constant``: a tensor with a fixed value; ``shape`` broadcasts a scalar or reshapes."""
    if isinstance(value, Tensor):
        t = value
        if dtype is not None and t.dtype != dtypes.as_dtype(dtype):
            # why: math_ops is built on this module (importing it at the top would be circular)
            from popjit.frontend import math_ops

            t = math_ops.cast(t, dtype)
    else:
        if dtype is None:
            dtype = _default_dtype(value)
        arr = _to_array(value, dtypes.as_dtype(dtype))
        if shape is not None:
            shape = tuple(int(s) for s in shape)
            if arr.size == 1:
                arr = np.broadcast_to(arr.reshape(()), shape).copy()
            elif arr.size == int(np.prod(shape)):
                arr = arr.reshape(shape)
            else:
                raise TypeError(f"Eager execution of tf.constant with unsupported shape. Tried to convert "
                                f"{arr.size} elements to shape {list(shape)}")
        return Tensor.eager(np.array(arr)) if current_trace() is None else _traced(np.array(arr))
    if shape is not None:
        # why: array_ops is built on this module (importing it at the top would be circular)
        from popjit.frontend import array_ops

        t = array_ops.reshape(t, shape)
    return t
