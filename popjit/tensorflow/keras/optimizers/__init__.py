"""``tf.keras.optimizers``."""

from popjit.errors import missing_attributes
from popjit.keras.optimizers import (  # noqa: F401
    SGD,
    Adadelta,
    Adagrad,
    Adam,
    Adamax,
    Ftrl,
    Nadam,
    Optimizer,
    RMSprop,
    deserialize,
    get,
    serialize,
)
from popjit.tensorflow.keras.optimizers import schedules  # noqa: F401

__getattr__ = missing_attributes("tf.keras.optimizers")
