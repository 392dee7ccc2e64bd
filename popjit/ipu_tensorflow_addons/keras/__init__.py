"""``ipu_tensorflow_addons.keras``: ``layers`` and ``optimizers``."""

from popjit.errors import missing_attributes as _missing_attributes
from popjit.ipu_tensorflow_addons.keras import layers, optimizers  # noqa: F401

__getattr__ = _missing_attributes("ipu_tensorflow_addons.keras")
