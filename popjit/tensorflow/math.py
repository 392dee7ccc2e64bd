"""``tf.math``."""

from popjit.frontend.math_ops import *  # noqa: F403
from popjit.frontend.math_ops import (  # noqa: F401
    abs,  # noqa: A004
    floordiv,
    floormod,
    pow,  # noqa: A004
    reciprocal,
    round,  # noqa: A004
)
