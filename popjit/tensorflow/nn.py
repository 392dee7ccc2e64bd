"""``tf.nn``."""

from popjit.frontend.math_ops import (  # noqa: F401
    elu,
    gelu,
    log_softmax,
    relu,
    relu6,
    sigmoid,
    softmax,
    softplus,
    tanh,
)
