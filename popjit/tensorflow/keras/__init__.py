"""``tf.keras``."""

from popjit.tensorflow.keras import datasets  # noqa: F401
