"""``tf.linalg``: re-exported from :mod:`popjit.frontend.api.linalg`."""

from popjit.frontend.api.linalg import *  # noqa: F403
