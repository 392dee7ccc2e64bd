"""``tf.keras.datasets.cifar10``: re-exported from :mod:`popjit.keras.datasets.cifar10`."""

from popjit.keras.datasets.cifar10 import *  # noqa: F403
