"""``ipu_tensorflow_addons.keras.optimizers``: :mod:`popjit.keras.ipu_optimizers`."""

from popjit.errors import missing_attributes as _missing_attributes
from popjit.keras.ipu_optimizers import (  # noqa: F401
    AdamIpuOptimizer,
    IpuOptimizerBase,
    LAMBIpuOptimizer,
    SGDIpuOptimizer,
)

__getattr__ = _missing_attributes("ipu_tensorflow_addons.keras.optimizers")
