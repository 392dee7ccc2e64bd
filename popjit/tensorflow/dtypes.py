"""``tf.dtypes``: re-exported from :mod:`popjit.frontend.api.dtypes`."""

from popjit.errors import missing_attributes as _missing_attributes
from popjit.frontend.api.dtypes import *  # noqa: F403

__getattr__ = _missing_attributes("tf.dtypes")
