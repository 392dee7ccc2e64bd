"""``tf.keras.constraints``."""

from popjit.errors import missing_attributes
from popjit.keras.constraints import (  # noqa: F401
    Constraint,
    MaxNorm,
    MinMaxNorm,
    NonNeg,
    UnitNorm,
    deserialize,
    get,
    max_norm,
    min_max_norm,
    non_neg,
    serialize,
    unit_norm,
)

__getattr__ = missing_attributes("tf.keras.constraints")
