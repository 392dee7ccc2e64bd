"""``tf.math``: re-exported from :mod:`popjit.frontend.api.math`."""

from popjit.errors import missing_attributes as _missing_attributes
from popjit.frontend.api.math import *  # noqa: F403

__getattr__ = _missing_attributes("tf.math")
