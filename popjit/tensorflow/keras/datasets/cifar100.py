"""``tf.keras.datasets.cifar100``: re-exported from :mod:`popjit.keras.datasets.cifar100`."""

from popjit.keras.datasets.cifar100 import *  # noqa: F403
