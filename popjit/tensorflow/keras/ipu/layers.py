"""``keras.ipu.layers``: ``Dense`` (Keras's; the IPU version differs only for FP8 inputs, which popjit
does not have). The gradient-capturing layers raise ``UnimplementedError``."""

from popjit.errors import missing_attributes as _missing_attributes
from popjit.keras.layers import Dense  # noqa: F401

__getattr__ = _missing_attributes("keras.ipu.layers")
