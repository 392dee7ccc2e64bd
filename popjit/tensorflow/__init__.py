"""A TensorFlow-compatible namespace: ``import popjit.tensorflow as tf``.

Thin re-exports of popjit's frontend under TensorFlow's names. Under ``popjit run`` the module
``tensorflow`` resolves here.
"""

import builtins

from popjit import dtypes as _dtypes
from popjit.dtypes import (
    DType,
    as_dtype,
    bool_ as bool,  # noqa: A004
    double,
    float16,
    float32,
    float64,
    half,
    int8,
    int16,
    int32,
    int64,
    uint8,
    uint16,
    uint32,
)
from popjit.frontend.array_ops import (
    broadcast_to,
    concat,
    expand_dims,
    fill,
    ones,
    ones_like,
    rank,
    reshape,
    shape,
    size,
    squeeze,
    stack,
    transpose,
    unstack,
    zeros,
    zeros_like,
)
from popjit.frontend.array_ops import range_ as range  # noqa: A004
from popjit.frontend.control_flow import cond, while_loop
from popjit.frontend.convert import constant, convert_to_tensor
from popjit.frontend.device import device
from popjit.frontend.function import TensorSpec, function
from popjit.frontend.math_ops import (
    abs,  # noqa: A004
    add,
    add_n,
    argmax,
    argmin,
    cast,
    clip_by_value,
    cos,
    cumsum,
    divide,
    equal,
    exp,
    greater,
    greater_equal,
    less,
    less_equal,
    logical_and,
    logical_not,
    logical_or,
    matmul,
    maximum,
    minimum,
    multiply,
    negative,
    not_equal,
    pow,  # noqa: A004
    reduce_all,
    reduce_any,
    reduce_max,
    reduce_mean,
    reduce_min,
    reduce_prod,
    reduce_sum,
    round,  # noqa: A004
    rsqrt,
    sigmoid,
    sign,
    sin,
    sqrt,
    square,
    subtract,
    tanh,
    truediv,
    where,
)
from popjit.frontend.tensor import Tensor, TensorShape, is_tensor
from popjit.frontend.variables import Variable
from popjit.tensorflow import dtypes, errors, linalg, math, nest, nn  # noqa: F401

__version__ = "2.6.3"  # the TensorFlow version whose API popjit follows (Graphcore SDK 3.x)
newaxis = None


def executing_eagerly() -> builtins.bool:
    """True outside a tf.function trace."""
    from popjit.frontend.tracing import current_trace

    return current_trace() is None


def get_static_value(tensor, partial=False):  # noqa: ANN001, ANN201
    """The value of ``tensor`` if it is known without running anything, else None."""
    from popjit.frontend.tracing import current_trace

    if isinstance(tensor, Tensor):
        if not tensor.is_symbolic:
            return tensor.numpy()
        trace = current_trace()
        return trace.constant_value(tensor) if trace else None
    return tensor


del _dtypes
