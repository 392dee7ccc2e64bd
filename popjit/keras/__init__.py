"""Keras on popjit: models, layers, losses, optimizers — built only on the public frontend.

``popjit.tensorflow.keras`` (``tf.keras``) re-exports these modules under Keras's names.
"""

from popjit.keras import activations, backend, initializers, layers, losses, models, optimizers, schedules
from popjit.keras.base_layer import Layer
from popjit.keras.keras_tensor import Input, InputLayer, KerasTensor
from popjit.keras.models import Model, Sequential
from popjit.keras.optimizer_v2 import OptimizerV2

__all__ = [
    "Input", "InputLayer", "KerasTensor", "Layer", "Model", "OptimizerV2", "Sequential", "activations", "backend",
    "initializers", "layers", "losses", "models", "optimizers", "schedules",
]
