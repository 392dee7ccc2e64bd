"""``ipu.gradient_accumulation``: how accumulated gradients combine."""

from popjit.errors import missing_attributes as _missing_attributes
from popjit.keras.gradient_accumulation import GradientAccumulationReductionMethod  # noqa: F401

__getattr__ = _missing_attributes("ipu.gradient_accumulation")
