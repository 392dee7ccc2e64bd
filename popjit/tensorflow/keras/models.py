"""``tf.keras.models``."""

from popjit.keras.models import Model, Sequential, clone_model  # noqa: F401
from popjit.tensorflow.keras._missing import missing

__getattr__ = missing("tf.keras.models")
