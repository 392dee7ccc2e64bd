"""``ipu.optimizers``: the gradient accumulation optimizer (the cross-replica and sharded optimizers
come with replication)."""

from popjit.errors import missing_attributes as _missing_attributes
from popjit.keras.gradient_accumulation import GradientAccumulationOptimizerV2  # noqa: F401

__getattr__ = _missing_attributes("ipu.optimizers")  # the others need several IPUs (popjit/support.py)
