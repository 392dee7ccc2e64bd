"""``tf.nn``: re-exported from :mod:`popjit.frontend.api.nn`."""

from popjit.errors import missing_attributes as _missing_attributes
from popjit.frontend.api.nn import *  # noqa: F403

__getattr__ = _missing_attributes("tf.nn")
