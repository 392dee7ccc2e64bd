"""``tf.nest``: re-exported from :mod:`popjit.frontend.api.nest`."""

from popjit.errors import missing_attributes as _missing_attributes
from popjit.frontend.api.nest import *  # noqa: F403

__getattr__ = _missing_attributes("tf.nest")
