"""``tf.keras.optimizers.schedules``."""

from popjit.errors import missing_attributes
from popjit.keras.schedules import (  # noqa: F401
    CosineDecay,
    ExponentialDecay,
    InverseTimeDecay,
    LearningRateSchedule,
    PiecewiseConstantDecay,
    PolynomialDecay,
    deserialize,
    serialize,
)

__getattr__ = missing_attributes("tf.keras.optimizers.schedules")
