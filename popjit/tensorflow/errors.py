"""``tf.errors``."""

from popjit.errors import *  # noqa: F403
from popjit.errors import OpError  # noqa: F401
