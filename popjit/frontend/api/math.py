"""``tf.math``."""

from popjit.errors import missing_attributes as _missing_attributes
from popjit.frontend.gather_ops import unsorted_segment_sum  # noqa: F401
from popjit.frontend.math_ops import *  # noqa: F403

__getattr__ = _missing_attributes("tf.math")
