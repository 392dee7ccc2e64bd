"""``tf.keras.utils``."""

from popjit.errors import missing_attributes
from popjit.keras.generic_utils import (  # noqa: F401
    CustomObjectScope,
    custom_object_scope,
    get_custom_objects,
    get_registered_name,
    get_registered_object,
    register_keras_serializable,
)
from popjit.keras.preprocessing.sequence import pad_sequences  # noqa: F401
from popjit.keras.utils import Progbar, Sequence, normalize, set_random_seed, to_categorical  # noqa: F401
from popjit.keras.vis_utils import model_to_dot, plot_model  # noqa: F401

__getattr__ = missing_attributes("tf.keras.utils")
