"""Keras backend state: float type, epsilon, object names, the training flag of the current call,
variable name scopes, and placing new weights (values computed on the host, the variable on the
device of the strategy the layer or optimizer was created under).

Everything here builds on the frontend's TensorFlow namespace (``popjit.frontend.api``). The one extra helper is
:func:`init_scope`, TensorFlow's ``tf.init_scope``: it leaves any trace that is in progress so that
initial values are computed eagerly on the host, as Keras lifts variable creation out of
``tf.function`` graphs.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import Any

import numpy as np

from popjit import context
from popjit.frontend import api as tf
from popjit.frontend.tracing import tracing

_FLOATX = "float32"
_EPSILON = 1e-7
_IMAGE_DATA_FORMAT = "channels_last"
_scopes = context.ScopeStacks()
_NAME_UIDS: dict[str, int] = {}


# -- configuration --------------------------------------------------------------------------------
def floatx() -> str:
    """The default float type of layers and weights, as a string (``'float32'``)."""
    return _FLOATX


def set_floatx(value: str) -> None:
    """Set the default float type: ``'float16'``, ``'float32'`` or ``'float64'``."""
    global _FLOATX
    if value not in ("float16", "float32", "float64"):
        raise ValueError(f"Unknown floatx type: {value}")
    _FLOATX = str(value)


def epsilon() -> float:
    """The fuzz factor losses and optimizers use to avoid log(0) and division by zero (1e-7)."""
    return _EPSILON


def set_epsilon(value: float) -> None:
    """Set the fuzz factor returned by :func:`epsilon`."""
    global _EPSILON
    _EPSILON = float(value)


def image_data_format() -> str:
    """``'channels_last'`` (the default) or ``'channels_first'``."""
    return _IMAGE_DATA_FORMAT


def normalize_data_format(data_format: str | None) -> str:
    """A layer's ``data_format`` (None: :func:`image_data_format`), checked."""
    value = image_data_format() if data_format is None else str(data_format).lower()
    if value not in ("channels_last", "channels_first"):
        raise ValueError(f'The `data_format` argument must be one of "channels_first", "channels_last". '
                         f"Received: {data_format}")
    return value


def set_image_data_format(data_format: str) -> None:
    """Set the default image data format."""
    global _IMAGE_DATA_FORMAT
    if data_format not in ("channels_last", "channels_first"):
        raise ValueError(f"Unknown data_format: {data_format}")
    _IMAGE_DATA_FORMAT = data_format


# -- object names ---------------------------------------------------------------------------------
def unknown_object(kind: str, identifier: Any) -> ValueError:
    """Keras's error for a name it cannot resolve (``kind``: "activation function", "initializer"...)."""
    return ValueError(f"Unknown {kind}: {identifier}. Please ensure this object is passed to the "
                      "`custom_objects` argument.")


def to_snake_case(name: str) -> str:
    """``'Dense'`` → ``'dense'``, ``'InputLayer'`` → ``'input_layer'``, ``'ReLU'`` → ``'re_lu'``."""
    step = re.sub(r"(.)([A-Z][a-z0-9]+)", r"\1_\2", name)
    snake = re.sub(r"([a-z])([A-Z])", r"\1_\2", step).lower()
    return snake if not snake.startswith("_") else "private" + snake


def unique_object_name(base: str, zero_based: bool = True) -> str:
    """``base``, then ``base_1``, ``base_2``... (or ``base_1`` first when not ``zero_based``)."""
    n = _NAME_UIDS.get(base, 0)
    _NAME_UIDS[base] = n + 1
    if zero_based:
        return base if n == 0 else f"{base}_{n}"
    return f"{base}_{n + 1}"


def clear_session() -> None:
    """Forget generated layer and model names, so the next ``Dense`` is called ``dense`` again."""
    _NAME_UIDS.clear()


def reset_uids() -> None:
    """Same as :func:`clear_session` for names (Keras's ``backend.reset_uids``)."""
    _NAME_UIDS.clear()


# -- values ---------------------------------------------------------------------------------------
def get_value(x: Any) -> Any:
    """The value of a variable or eager tensor as a NumPy array (a Python value is returned as is)."""
    if hasattr(x, "numpy"):
        return x.numpy()
    return x


def batch_get_value(tensors: list[Any]) -> list[Any]:
    """:func:`get_value` of each item."""
    return [get_value(x) for x in tensors]


def set_value(x: Any, value: Any) -> None:
    """Assign ``value`` (converted to the variable's dtype) to the variable ``x``."""
    x.assign(np.asarray(value, dtype=x.dtype.as_numpy_dtype))


def batch_set_value(tuples: list[tuple[Any, Any]]) -> None:
    """:func:`set_value` for each ``(variable, value)`` pair."""
    for x, value in tuples:
        set_value(x, value)


def int_shape(x: Any) -> tuple[int | None, ...] | None:
    """The static shape of a tensor, variable or KerasTensor as a tuple."""
    shape = getattr(x, "shape", None)
    if shape is None:
        return None
    return tuple(shape)


def learning_phase() -> int:
    """The training flag used when nothing else sets it: 0 (inference)."""
    flag = current_training()
    return int(bool(flag)) if flag is not None else 0


def in_training(training: Any, when_training: Any, otherwise: Any) -> Any:
    """``when_training()`` or ``otherwise()`` by the ``training`` flag (None: :func:`learning_phase`); a
    flag known only at run time becomes a ``tf.cond`` (Keras's ``smart_cond``)."""
    if training is None:
        training = learning_phase()
    if isinstance(training, (tf.Tensor, tf.Variable)):
        value = tf.get_static_value(training)
        if value is None:
            return tf.cond(tf.cast(training, tf.bool), when_training, otherwise)
        training = bool(value)
    return when_training() if training else otherwise()


# -- leaving a trace ------------------------------------------------------------------------------
@contextlib.contextmanager
def init_scope() -> Iterator[None]:
    """Run the body eagerly on the host CPU even inside a ``tf.function`` trace (``tf.init_scope``)."""
    with tracing(None), tf.device("/device:CPU:0"):
        yield


def host_value(fn: Any, *args: Any, **kwargs: Any) -> np.ndarray:
    """``fn(*args, **kwargs)`` computed eagerly on the host, as a NumPy array."""
    with init_scope():
        value = fn(*args, **kwargs)
        return np.array(value.numpy() if hasattr(value, "numpy") else value, copy=True)


def current_strategy() -> Any:
    """The IPU strategy whose ``scope()`` is active, or None."""
    return context.current_strategy()


@contextlib.contextmanager
def strategy_scope(strategy: Any) -> Iterator[None]:
    """Re-enter ``strategy.scope()`` unless a strategy scope is active already (or there is none)."""
    if strategy is None or current_strategy() is not None:
        yield
        return
    with strategy.scope():
        yield


def make_variable(value: np.ndarray, name: str, trainable: bool, strategy: Any = None,
                  constraint: Any = None, cls: Any = None) -> tf.Variable:
    """A ``tf.Variable`` (or a subclass ``cls``) holding ``value``, on the device of ``strategy`` (or the
    current one)."""
    with strategy_scope(strategy):
        return (cls or tf.Variable)(value, trainable=trainable, name=name, constraint=constraint)


# -- the training flag and name scopes of nested calls ----------------------------------------------
def current_training() -> Any:
    """The ``training`` value of the innermost layer call that set one (None outside any)."""
    for value in reversed(_scopes.items("training")):
        if value is not None:
            return value
    return None


def call_depth() -> int:
    """How many layer calls enclose this point (0 outside any)."""
    return len(_scopes.items("training"))


def call_context(training: Any) -> contextlib.AbstractContextManager[None]:
    """Layers called inside see ``training`` unless they are given their own."""
    return _scopes.pushed("training", training)


def autocast_dtype() -> Any:
    """The compute dtype of the innermost layer call: reads of a mixed-precision layer's weights inside
    it are cast to it (None outside any layer call)."""
    return _scopes.top("autocast")


def autocast_scope(dtype: Any) -> contextlib.AbstractContextManager[None]:
    """Weights read inside (autocast variables) are cast to ``dtype`` (a layer's compute dtype)."""
    return _scopes.pushed("autocast", dtype)


def name_scope_prefix() -> str:
    """The enclosing layers' names joined by '/', with a trailing '/' ('' at top level)."""
    return "".join(p + "/" for p in _scopes.items("names"))


def name_scope(name: str | None) -> contextlib.AbstractContextManager[None]:
    """Weights created inside are named ``<name>/<layer>/<weight>``."""
    return _scopes.pushed("names", name) if name else contextlib.nullcontext()


# -- Keras-style helpers other modules use ------------------------------------------------------------
def dtype_name(dtype: Any) -> str:
    """A dtype (string, ``tf.DType`` or NumPy dtype) as its name."""
    if dtype is None:
        return floatx()
    return tf.as_dtype(dtype).name


def is_keras_tensor(x: Any) -> bool:
    """True for the symbolic tensors of the functional API (``tf.keras.Input`` and layers on it)."""
    # why: keras_tensor is built on this module (importing it at the top would be circular)
    from popjit.keras.keras_tensor import KerasTensor

    return isinstance(x, KerasTensor)
