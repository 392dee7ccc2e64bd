"""``ipu.optimizers``: the gradient accumulation optimizer (the cross-replica and sharded optimizers
come with replication)."""

from popjit.errors import missing_attributes
from popjit.keras.gradient_accumulation import GradientAccumulationOptimizerV2  # noqa: F401

__getattr__ = missing_attributes("ipu.optimizers")
