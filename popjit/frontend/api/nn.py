"""``tf.nn``."""

from popjit.errors import missing_attributes as _missing_attributes
from popjit.frontend.conv_ops import (  # noqa: F401
    avg_pool,
    avg_pool1d,
    avg_pool2d,
    conv1d,
    conv1d_transpose,
    conv2d,
    conv2d_transpose,
    conv3d,
    conv_transpose,
    convolution,
    depthwise_conv2d,
    max_pool,
    max_pool1d,
    max_pool2d,
    separable_conv2d,
)
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
    batch_normalization,
    bias_add,
    dropout,
    embedding_lookup,
    l2_normalize,
    leaky_relu,
    moments,
    sigmoid_cross_entropy_with_logits,
    silu,
    softmax_cross_entropy_with_logits,
    sparse_softmax_cross_entropy_with_logits,
    swish,
)

__getattr__ = _missing_attributes("tf.nn")
