"""``ipu.keras.losses`` (also ``ipu.losses``): Graphcore's CTC loss layer is not implemented; its
name raises ``UnimplementedError``."""

from popjit.errors import missing_attributes as _missing_attributes

__getattr__ = _missing_attributes("ipu.keras.losses")
