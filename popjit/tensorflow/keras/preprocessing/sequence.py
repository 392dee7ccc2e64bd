"""``tf.keras.preprocessing.sequence``."""

from popjit.errors import missing_attributes
from popjit.keras.preprocessing.sequence import pad_sequences  # noqa: F401

__getattr__ = missing_attributes("tf.keras.preprocessing.sequence")
