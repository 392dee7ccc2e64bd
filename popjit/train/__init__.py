"""``tf.train``'s checkpoints: TensorFlow's tensor-bundle files, the object graph of what is saved, and
``Checkpoint`` / ``CheckpointManager`` over them (re-exported as ``popjit.tensorflow.train``)."""
