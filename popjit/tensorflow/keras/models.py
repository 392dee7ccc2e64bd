"""``tf.keras.models``."""

from popjit.errors import missing_attributes
from popjit.keras.models import Model, Sequential, clone_model, load_model, save_model  # noqa: F401

__getattr__ = missing_attributes("tf.keras.models")
