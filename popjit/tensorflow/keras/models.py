"""``tf.keras.models``."""

from popjit.errors import missing_attributes
from popjit.keras.models import (  # noqa: F401
    Model,
    Sequential,
    clone_model,
    load_model,
    model_from_config,
    model_from_json,
    save_model,
)

__getattr__ = missing_attributes("tf.keras.models")
