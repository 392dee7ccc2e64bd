"""``tf.errors``: re-exported from :mod:`popjit.frontend.api.errors`."""

from popjit.frontend.api.errors import *  # noqa: F403
