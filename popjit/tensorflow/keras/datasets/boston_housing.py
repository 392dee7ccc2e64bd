"""``tf.keras.datasets.boston_housing``: re-exported from :mod:`popjit.keras.datasets.boston_housing`."""

from popjit.keras.datasets.boston_housing import *  # noqa: F403
