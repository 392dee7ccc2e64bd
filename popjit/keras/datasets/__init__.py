"""``tf.keras.datasets``: loaders that read the standard Keras cache files (nothing is downloaded).

Also reachable as ``tensorflow.python.keras.datasets`` under ``popjit run``.
"""

from popjit.keras.datasets import (  # noqa: F401
    boston_housing,
    cifar10,
    cifar100,
    fashion_mnist,
    imdb,
    mnist,
    reuters,
)
