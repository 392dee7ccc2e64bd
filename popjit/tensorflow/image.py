"""``tf.image``: re-exported from :mod:`popjit.frontend.api.image`."""

from popjit.errors import missing_attributes as _missing_attributes
from popjit.frontend.api.image import *  # noqa: F403
from popjit.frontend.api.image import extract_patches  # noqa: F401

__getattr__ = _missing_attributes("tf.image")
