"""``tf.keras.backend``."""

from popjit.errors import missing_attributes
from popjit.keras.backend import (  # noqa: F401
    batch_get_value,
    batch_set_value,
    clear_session,
    epsilon,
    floatx,
    get_value,
    image_data_format,
    int_shape,
    is_keras_tensor,
    learning_phase,
    reset_uids,
    set_epsilon,
    set_floatx,
    set_image_data_format,
    set_value,
)

__getattr__ = missing_attributes("tf.keras.backend")
