"""``tf.linalg``: re-exported from :mod:`popjit.frontend.api.linalg`."""

from popjit.errors import missing_attributes as _missing_attributes
from popjit.frontend.api.linalg import *  # noqa: F403

__getattr__ = _missing_attributes("tf.linalg")
