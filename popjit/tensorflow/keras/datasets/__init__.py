"""``tf.keras.datasets``: re-exported from :mod:`popjit.keras.datasets` (also ``tensorflow.python.keras.datasets``)."""

from popjit.tensorflow.keras.datasets import fashion_mnist, mnist  # noqa: F401
