"""``tf.autograph``: re-exported from :mod:`popjit.frontend.api.autograph`."""

from popjit.errors import missing_attributes as _missing_attributes
from popjit.frontend.api.autograph import *  # noqa: F403

__getattr__ = _missing_attributes("tf.autograph")
