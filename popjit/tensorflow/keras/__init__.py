"""``tf.keras``: Keras's namespace over :mod:`popjit.keras`."""

from popjit.errors import missing_attributes
from popjit.keras.keras_tensor import Input  # noqa: F401
from popjit.keras.models import Model, Sequential  # noqa: F401
from popjit.tensorflow.keras import (  # noqa: F401
    activations,
    backend,
    callbacks,
    constraints,
    datasets,
    initializers,
    ipu,
    layers,
    losses,
    metrics,
    mixed_precision,
    models,
    optimizers,
    preprocessing,
    regularizers,
    utils,
)

__version__ = "2.6.0"


__getattr__ = missing_attributes("tf.keras")
