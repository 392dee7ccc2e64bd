"""``tf.dtypes``."""

from popjit.dtypes import *  # noqa: F403
from popjit.dtypes import DType, as_dtype, bool_, float16, float32, float64, int32, int64  # noqa: F401
