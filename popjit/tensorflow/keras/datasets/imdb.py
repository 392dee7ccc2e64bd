"""``tf.keras.datasets.imdb``: re-exported from :mod:`popjit.keras.datasets.imdb`."""

from popjit.keras.datasets.imdb import *  # noqa: F403
