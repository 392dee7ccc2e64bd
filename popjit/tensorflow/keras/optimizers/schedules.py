"""``tf.keras.optimizers.schedules``."""

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
from popjit.tensorflow.keras._missing import missing

__getattr__ = missing("tf.keras.optimizers.schedules")
