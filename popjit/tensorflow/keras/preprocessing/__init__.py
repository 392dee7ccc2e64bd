"""``tf.keras.preprocessing``."""

from popjit.errors import missing_attributes
from popjit.tensorflow.keras.preprocessing import sequence  # noqa: F401

__getattr__ = missing_attributes("tf.keras.preprocessing")
