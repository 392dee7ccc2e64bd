"""The user-facing layer: tensors, tracing, tf.function, autograph, eager execution."""
