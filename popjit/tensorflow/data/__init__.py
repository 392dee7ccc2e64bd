"""``tf.data``."""
