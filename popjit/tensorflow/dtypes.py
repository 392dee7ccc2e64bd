"""``tf.dtypes``: re-exported from :mod:`popjit.frontend.api.dtypes`."""

from popjit.frontend.api.dtypes import *  # noqa: F403
