"""``tf.keras.datasets.reuters``: re-exported from :mod:`popjit.keras.datasets.reuters`."""

from popjit.keras.datasets.reuters import *  # noqa: F403
