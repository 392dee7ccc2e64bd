"""``tf.math``: re-exported from :mod:`popjit.frontend.api.math`."""

from popjit.frontend.api.math import *  # noqa: F403
