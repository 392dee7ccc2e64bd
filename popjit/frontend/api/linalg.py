"""``tf.linalg``."""

from popjit.frontend.math_ops import matmul  # noqa: F401
