"""``tf.keras.datasets``: loaders that read the standard Keras cache files (nothing is downloaded).

Also reachable as ``tensorflow.python.keras.datasets`` under ``popjit run``.
"""

from popjit.keras.datasets import fashion_mnist, mnist  # noqa: F401
