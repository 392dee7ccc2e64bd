"""``tf.keras.datasets.fashion_mnist``: re-exported from :mod:`popjit.keras.datasets.fashion_mnist`."""

from popjit.keras.datasets.fashion_mnist import *  # noqa: F403
