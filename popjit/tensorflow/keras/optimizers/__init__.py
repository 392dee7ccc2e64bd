"""``tf.keras.optimizers``."""

from popjit.keras.optimizers import SGD, Adagrad, Adam, Optimizer, RMSprop, deserialize, get, serialize  # noqa: F401
from popjit.tensorflow.keras._missing import missing
from popjit.tensorflow.keras.optimizers import schedules  # noqa: F401

__getattr__ = missing("tf.keras.optimizers")
