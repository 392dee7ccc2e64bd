"""Tests of popjit.keras (tf.keras): layers, models, losses, optimizers, initializers."""
