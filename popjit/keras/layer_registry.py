"""Every Keras layer class by name: what ``tf.keras.layers`` exports and what
``tf.keras.layers.deserialize`` (and model loading) looks names up in."""

from __future__ import annotations

from popjit.keras import (
    layers,
    layers_attention,
    layers_conv,
    layers_embedding,
    layers_norm,
    layers_recurrent,
    layers_reshaping,
)
from popjit.keras.base_layer import Layer

MODULES = (layers, layers_conv, layers_norm, layers_reshaping, layers_embedding, layers_recurrent, layers_attention)

#: Public layer classes (and Keras's aliases such as ``MaxPool2D``) by the name users write.
LAYERS: dict[str, type[Layer]] = {name: getattr(module, name) for module in MODULES for name in module.__all__
                                  if isinstance(getattr(module, name), type)
                                  and issubclass(getattr(module, name), Layer)}
