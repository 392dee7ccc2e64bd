"""``tf.dtypes``."""

from popjit.dtypes import (
    DType,
    as_dtype,
    double,
    float16,
    float32,
    float64,
    half,
    int8,
    int16,
    int32,
    int64,
    uint8,
    uint16,
    uint32,
)
from popjit.dtypes import bool_ as bool
from popjit.errors import missing_attributes as _missing_attributes

__all__ = ["DType", "as_dtype", "bool", "double", "float16", "float32", "float64", "half", "int8", "int16",
           "int32", "int64", "uint8", "uint16", "uint32"]

__getattr__ = _missing_attributes("tf.dtypes")
