"""``tf.autograph``: re-exported from :mod:`popjit.frontend.api.autograph`."""

from popjit.frontend.api.autograph import *  # noqa: F403
