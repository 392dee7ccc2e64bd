"""``tf.bitwise``: re-exported from :mod:`popjit.frontend.api.bitwise`."""

from popjit.errors import missing_attributes as _missing_attributes
from popjit.frontend.api.bitwise import *  # noqa: F403

__getattr__ = _missing_attributes("tf.bitwise")
