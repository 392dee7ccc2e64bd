"""``ipu.math_ops`` (also ``ipu.ops.math_ops``): the serialized matrix product."""

from popjit.errors import missing_attributes as _missing_attributes
from popjit.frontend.ipu_ops import serialized_matmul  # noqa: F401

__getattr__ = _missing_attributes("ipu.math_ops")
