"""Keras on popjit: models, layers, losses, optimizers — built only on the public frontend."""
