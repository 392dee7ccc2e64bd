"""``tf.nn``: re-exported from :mod:`popjit.frontend.api.nn`."""

from popjit.frontend.api.nn import *  # noqa: F403
