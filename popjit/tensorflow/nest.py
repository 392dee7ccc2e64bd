"""``tf.nest``: re-exported from :mod:`popjit.frontend.api.nest`."""

from popjit.frontend.api.nest import *  # noqa: F403
