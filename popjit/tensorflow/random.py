"""``tf.random``: re-exported from :mod:`popjit.frontend.api.random`."""

from popjit.errors import missing_attributes as _missing_attributes
from popjit.frontend.api.random import *  # noqa: F403

__getattr__ = _missing_attributes("tf.random")
