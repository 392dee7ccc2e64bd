"""``tf.keras.utils``."""

from popjit.errors import missing_attributes
from popjit.keras.utils import Progbar, normalize, set_random_seed, to_categorical  # noqa: F401

__getattr__ = missing_attributes("tf.keras.utils")
