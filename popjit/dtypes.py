"""Tensor element types, shaped like TensorFlow's ``tf.DType``.

popjit computes in float32 (the default), float16, int32 and bool on the virtual IPU. int64 and
float64 exist on the host only: the IPU has no 64-bit arithmetic, so compiled programs refuse
them (see :func:`check_device_dtype`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np


class DType:
    """An element type: ``tf.float32`` and friends."""

    __slots__ = ("as_numpy_dtype", "name", "short", "size")

    def __init__(self, name: str, short: str, np_type: type) -> None:
        self.name = name
        self.short = short
        self.as_numpy_dtype = np_type
        self.size = np.dtype(np_type).itemsize

    @property
    def np(self) -> np.dtype:
        """The NumPy dtype object."""
        return np.dtype(self.as_numpy_dtype)

    @property
    def is_floating(self) -> bool:
        return np.issubdtype(self.np, np.floating)

    @property
    def is_integer(self) -> bool:
        return np.issubdtype(self.np, np.integer)

    @property
    def is_bool(self) -> bool:
        return self.np == np.bool_

    @property
    def is_unsigned(self) -> bool:
        return np.issubdtype(self.np, np.unsignedinteger)

    @property
    def is_numeric(self) -> bool:
        return not self.is_bool

    @property
    def min(self) -> Any:
        return np.finfo(self.np).min if self.is_floating else (False if self.is_bool else np.iinfo(self.np).min)

    @property
    def max(self) -> Any:
        return np.finfo(self.np).max if self.is_floating else (True if self.is_bool else np.iinfo(self.np).max)

    @property
    def base_dtype(self) -> DType:
        return self

    def __repr__(self) -> str:
        return f"tf.{self.name}"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, DType):
            return self is other
        try:
            return as_dtype(other) is self  # type: ignore[arg-type]
        except TypeError:
            return False

    def __hash__(self) -> int:
        return hash(self.name)

    def __reduce__(self) -> tuple:
        return (as_dtype, (self.name,))


float16 = DType("float16", "f16", np.float16)
float32 = DType("float32", "f32", np.float32)
float64 = DType("float64", "f64", np.float64)
int8 = DType("int8", "i8", np.int8)
uint8 = DType("uint8", "u8", np.uint8)
int16 = DType("int16", "i16", np.int16)
int32 = DType("int32", "i32", np.int32)
int64 = DType("int64", "i64", np.int64)
uint16 = DType("uint16", "u16", np.uint16)
uint32 = DType("uint32", "u32", np.uint32)
bool_ = DType("bool", "bool", np.bool_)
half = float16
double = float64

ALL: tuple[DType, ...] = (float16, float32, float64, int8, uint8, int16, uint16, int32, uint32, int64, bool_)
FLOATS: tuple[DType, ...] = (float16, float32)
INTS: tuple[DType, ...] = (int32,)
NUMERIC: tuple[DType, ...] = (float16, float32, int32)
# int64 is accepted in compiled code (the IPU backend lowers it to 32 bits); float64 is not.
DEVICE: tuple[DType, ...] = (float16, float32, int32, int64, bool_, int8, uint8, int16, uint16, uint32)
_BY_NAME = {d.name: d for d in ALL}
_BY_NAME.update({"half": float16, "float": float32, "double": float64, "bool_": bool_})
_BY_NP = {d.np: d for d in ALL}


def as_dtype(x: Any) -> DType:
    """Convert a DType, NumPy dtype, type object or name to a :class:`DType`."""
    if isinstance(x, DType):
        return x
    if isinstance(x, str) and x in _BY_NAME:
        return _BY_NAME[x]
    if x is float:
        return float32
    if x is int:
        return int32
    if x is bool:
        return bool_
    if hasattr(x, "as_numpy_dtype") and not isinstance(x, type):
        return as_dtype(x.as_numpy_dtype)
    try:
        nd = np.dtype(x)
    except TypeError as e:
        raise TypeError(f"Cannot convert {x!r} to a dtype. {e}") from None
    if nd in _BY_NP:
        return _BY_NP[nd]
    raise TypeError(f"Cannot convert {x!r} to a dtype: {nd} is not supported by popjit")


def dtype_of_python_value(x: Any) -> DType:
    """TensorFlow's default dtype for a Python value: float32 for floats, int32 for ints."""
    if isinstance(x, (bool, np.bool_)):
        return bool_
    if isinstance(x, np.generic):
        return as_dtype(x.dtype)
    if isinstance(x, (int, np.integer)):
        return int32
    if isinstance(x, (float, np.floating)):
        return float32
    raise TypeError(f"Cannot infer a dtype from {type(x).__name__}")


class Shaped:
    """Something with a static ``shape`` and a ``dtype`` (an abstract value, a buffer): its sizes."""

    __slots__ = ()
    shape: tuple[int, ...]
    dtype: DType

    @property
    def size(self) -> int:
        """Number of elements."""
        return int(math.prod(self.shape))  # why not np.prod: 30x slower on a tuple, and sizes are asked often

    @property
    def nbytes(self) -> int:
        """Bytes of the elements."""
        return self.size * self.dtype.size

    def type_text(self) -> str:
        """``f32[3,4]``."""
        return f"{self.dtype.short}[{','.join(map(str, self.shape))}]"


def is_device_dtype(dtype: DType) -> bool:
    """Whether compiled (virtual IPU) code may hold this dtype."""
    return dtype in DEVICE
