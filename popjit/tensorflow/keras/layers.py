"""``tf.keras.layers``."""

from popjit.errors import missing_attributes
from popjit.keras.layers import *  # noqa: F403
from popjit.keras.layers import deserialize, serialize  # noqa: F401

__getattr__ = missing_attributes("tf.keras.layers")
