"""``tf.nn``."""

from popjit.errors import missing_attributes as _missing_attributes
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
from popjit.frontend.nn_ops import (  # noqa: F401
    sigmoid_cross_entropy_with_logits,
    softmax_cross_entropy_with_logits,
    sparse_softmax_cross_entropy_with_logits,
)

__getattr__ = _missing_attributes("tf.nn")
