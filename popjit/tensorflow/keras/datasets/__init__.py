"""``tf.keras.datasets``."""
