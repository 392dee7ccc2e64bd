"""``ipu.nn_ops`` (also ``ipu.ops.nn_ops``): Popnn's GELU, swish and hard sigmoid. ``multi_conv``,
the sampled losses and the CTC losses and decoders raise ``UnimplementedError``."""

from popjit.errors import missing_attributes as _missing_attributes
from popjit.frontend.ipu_ops import gelu, hard_sigmoid, swish  # noqa: F401

__getattr__ = _missing_attributes("ipu.nn_ops")
