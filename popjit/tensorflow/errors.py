"""``tf.errors``: re-exported from :mod:`popjit.frontend.api.errors`."""

from popjit.errors import missing_attributes as _missing_attributes
from popjit.frontend.api.errors import *  # noqa: F403

__getattr__ = _missing_attributes("tf.errors")
