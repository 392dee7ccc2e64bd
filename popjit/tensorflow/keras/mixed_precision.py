"""``tf.keras.mixed_precision``."""

from popjit.errors import missing_attributes
from popjit.keras.mixed_precision import (  # noqa: F401
    LossScaleOptimizer,
    Policy,
    global_policy,
    set_global_policy,
)

__getattr__ = missing_attributes("tf.keras.mixed_precision")
