"""``tf.random``: re-exported from :mod:`popjit.frontend.api.random`."""

from popjit.frontend.api.random import *  # noqa: F403
