"""``tf.keras.regularizers``."""

from popjit.errors import missing_attributes
from popjit.keras.regularizers import L1, L1L2, L2, Regularizer, deserialize, get, l1, l1_l2, l2, serialize  # noqa: F401

__getattr__ = missing_attributes("tf.keras.regularizers")
