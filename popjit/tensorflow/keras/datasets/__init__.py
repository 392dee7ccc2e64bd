"""``tf.keras.datasets``: re-exported from :mod:`popjit.keras.datasets` (also ``tensorflow.python.keras.datasets``)."""

from popjit.tensorflow.keras.datasets import (  # noqa: F401
    boston_housing,
    cifar10,
    cifar100,
    fashion_mnist,
    imdb,
    mnist,
    reuters,
)
