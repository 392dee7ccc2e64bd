"""``tf.keras.datasets.mnist``: re-exported from :mod:`popjit.keras.datasets.mnist`."""

from popjit.keras.datasets.mnist import *  # noqa: F403
