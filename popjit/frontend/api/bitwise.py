"""``tf.bitwise``."""

from popjit.frontend.math_ops import bitwise_and, bitwise_or, bitwise_xor, invert  # noqa: F401
