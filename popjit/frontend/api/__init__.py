"""TensorFlow's op namespace, as the layers above the frontend use it (``from popjit.frontend import api as tf``).

Everything here is the frontend's: tensors, ops, ``tf.function``, gradients, variables, devices and
the ``tf.nn``/``tf.math``/``tf.random``/... sub-namespaces. Keras and ``tf.data`` build on it; the
``popjit.tensorflow`` facade re-exports it with ``tf.data``, ``tf.keras`` and ``tf.compat`` added.
"""

import builtins as _builtins

from popjit.frontend.api import autograph, bitwise, dtypes, errors, image, linalg, math, nest, nn, random  # noqa: F401
from popjit.frontend.api.dtypes import *  # noqa: F403
from popjit.frontend.array_ops import *  # noqa: F403
from popjit.frontend.array_ops import range_ as range  # noqa: F401
from popjit.frontend.control_flow import cond, while_loop  # noqa: F401
from popjit.frontend.convert import constant, convert_to_tensor  # noqa: F401
from popjit.frontend.device import device  # noqa: F401
from popjit.frontend.function import TensorSpec, function  # noqa: F401
from popjit.frontend.gather_ops import *  # noqa: F403
from popjit.frontend.gradient_tape import (  # noqa: F401
    GradientTape,
    UnconnectedGradients,
    custom_gradient,
    stop_gradient,
)
from popjit.frontend.math_ops import *  # noqa: F403
from popjit.frontend.name_scope import name_scope  # noqa: F401
from popjit.frontend.tensor import Tensor, TensorShape, is_tensor  # noqa: F401
from popjit.frontend.tracing import current_trace as _current_trace
from popjit.frontend.variables import Variable  # noqa: F401

newaxis = None


def executing_eagerly() -> _builtins.bool:
    """True outside a tf.function trace."""
    return _current_trace() is None


def get_static_value(tensor, partial=False):
    """The value of ``tensor`` if it is known without running anything, else None."""
    if isinstance(tensor, Tensor):
        if not tensor.is_symbolic:
            return tensor.numpy()
        trace = _current_trace()
        return trace.constant_value(tensor) if trace else None
    return tensor
