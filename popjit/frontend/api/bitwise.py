"""``tf.bitwise``."""

from popjit.errors import missing_attributes as _missing_attributes
from popjit.frontend.math_ops import bitwise_and, bitwise_or, bitwise_xor, invert  # noqa: F401

__getattr__ = _missing_attributes("tf.bitwise")
