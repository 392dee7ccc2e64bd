"""``tf.math``."""

from popjit.frontend.math_ops import *  # noqa: F403
