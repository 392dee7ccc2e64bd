"""``tf.bitwise``: re-exported from :mod:`popjit.frontend.api.bitwise`."""

from popjit.frontend.api.bitwise import *  # noqa: F403
