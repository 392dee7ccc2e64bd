"""``tf.dtypes``."""

from popjit.dtypes import (  # noqa: F401
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
