"""A TensorFlow-compatible namespace: ``import popjit.tensorflow as tf``.

Thin re-exports of popjit's frontend under TensorFlow's names (each frontend module lists its
public functions in ``__all__``). Under ``popjit run`` the module ``tensorflow`` resolves here.
"""

import builtins

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
from popjit.frontend.tensor import Tensor, TensorShape, is_tensor  # noqa: F401
from popjit.frontend.variables import Variable  # noqa: F401
from popjit.tensorflow import (  # noqa: F401
    autograph,
    bitwise,
    compat,
    data,
    dtypes,
    errors,
    keras,
    linalg,
    math,
    nest,
    nn,
    random,
)
from popjit.tensorflow.dtypes import *  # noqa: F403

__version__ = "2.6.3"  # the TensorFlow version whose API popjit follows (Graphcore SDK 3.x)
newaxis = None


def executing_eagerly() -> builtins.bool:
    """True outside a tf.function trace."""
    from popjit.frontend.tracing import current_trace

    return current_trace() is None


def get_static_value(tensor, partial=False):
    """The value of ``tensor`` if it is known without running anything, else None."""
    from popjit.frontend.tracing import current_trace

    if isinstance(tensor, Tensor):
        if not tensor.is_symbolic:
            return tensor.numpy()
        trace = current_trace()
        return trace.constant_value(tensor) if trace else None
    return tensor


def __getattr__(name: str) -> None:
    if name.startswith("__"):
        raise AttributeError(name)
    from popjit.errors import missing_api

    raise missing_api("tf", name)
