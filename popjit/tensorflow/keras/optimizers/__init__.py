"""``tf.keras.optimizers``."""

from popjit.errors import missing_attributes
from popjit.keras.optimizers import SGD, Adagrad, Adam, Optimizer, RMSprop, deserialize, get, serialize  # noqa: F401
from popjit.tensorflow.keras.optimizers import schedules  # noqa: F401

__getattr__ = missing_attributes("tf.keras.optimizers")
