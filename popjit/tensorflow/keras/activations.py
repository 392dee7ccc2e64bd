"""``tf.keras.activations``."""

from popjit.keras.activations import (  # noqa: F401
    deserialize,
    elu,
    exponential,
    gelu,
    get,
    hard_sigmoid,
    leaky_relu,
    linear,
    mish,
    relu,
    relu6,
    selu,
    serialize,
    sigmoid,
    silu,
    softmax,
    softplus,
    softsign,
    swish,
    tanh,
)
from popjit.tensorflow.keras._missing import missing

__getattr__ = missing("tf.keras.activations")
