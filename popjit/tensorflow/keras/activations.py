"""``tf.keras.activations``."""

from popjit.errors import missing_attributes
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

__getattr__ = missing_attributes("tf.keras.activations")
