"""``ipu.keras.optimizers`` (SDK 2.x): ``GradientAccumulationOptimizer`` (popjit's
``ipu.optimizers.GradientAccumulationOptimizerV2``, which it wraps in the SDK); the cross-replica
optimizer needs several IPUs and raises ``UnimplementedError``."""

from popjit.errors import missing_attributes as _missing_attributes
from popjit.keras.gradient_accumulation import GradientAccumulationOptimizerV2 as GradientAccumulationOptimizer  # noqa: F401

__getattr__ = _missing_attributes("ipu.keras.optimizers")
