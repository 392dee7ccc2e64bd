"""``tf.keras.layers``."""

from popjit.keras.layers import *  # noqa: F403
from popjit.keras.layers import deserialize, serialize  # noqa: F401
from popjit.tensorflow.keras._missing import missing

__getattr__ = missing("tf.keras.layers")
