"""``ipu.horovod.popdist_strategy``: SDK 2.x's name of ``ipu.distributed.popdist_strategy``."""

from popjit.errors import missing_attributes
from popjit.ipu.distributed.popdist_strategy import PopDistStrategy  # noqa: F401  (re-exported)

__getattr__ = missing_attributes("ipu.horovod.popdist_strategy")
