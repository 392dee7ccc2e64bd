"""``ipu.rand_ops`` (also ``ipu.ops.rand_ops``): Poprand's dropout."""

from popjit.errors import missing_attributes as _missing_attributes
from popjit.frontend.ipu_ops import dropout  # noqa: F401

__getattr__ = _missing_attributes("ipu.rand_ops")
