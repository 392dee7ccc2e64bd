"""``tf.image``."""

from popjit.errors import missing_attributes as _missing_attributes
from popjit.frontend.conv_ops import extract_patches  # noqa: F401

__getattr__ = _missing_attributes("tf.image")
