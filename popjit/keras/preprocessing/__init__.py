"""``tf.keras.preprocessing``: the sequence utilities (``sequence.pad_sequences``)."""

from popjit.keras.preprocessing import sequence  # noqa: F401
