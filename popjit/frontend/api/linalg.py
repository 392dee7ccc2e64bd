"""``tf.linalg``."""

from popjit.errors import missing_attributes as _missing_attributes
from popjit.frontend.math_ops import matmul  # noqa: F401

__getattr__ = _missing_attributes("tf.linalg")
