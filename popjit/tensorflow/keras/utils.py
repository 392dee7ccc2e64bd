"""``tf.keras.utils``."""

from popjit.errors import missing_attributes
from popjit.keras.preprocessing.sequence import pad_sequences  # noqa: F401
from popjit.keras.utils import Progbar, Sequence, normalize, set_random_seed, to_categorical  # noqa: F401

__getattr__ = missing_attributes("tf.keras.utils")
