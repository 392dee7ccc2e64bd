"""``tf.math``."""

from popjit.frontend.gather_ops import unsorted_segment_sum  # noqa: F401
from popjit.frontend.math_ops import *  # noqa: F403
