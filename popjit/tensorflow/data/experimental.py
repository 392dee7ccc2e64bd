"""``tf.data.experimental``: re-exported from :mod:`popjit.data.experimental`."""

from popjit.data.experimental import *  # noqa: F403
from popjit.errors import missing_attributes

__getattr__ = missing_attributes("tf.data.experimental")
