"""``keras.ipu.optimizers``: Graphcore's automatic loss scaling optimizer (``ALSOptimizer``) is not
implemented; its name raises ``UnimplementedError``."""

from popjit.errors import missing_attributes as _missing_attributes

__getattr__ = _missing_attributes("keras.ipu.optimizers")
