"""``tf.keras.activations``: element-wise non-linearities, by name or as functions.

Each is written with the frontend's TensorFlow functions (``popjit.frontend.api``), so it runs
eagerly and inside a traced step (and differentiates through the ops' gradient rules). ``softmax``
and ``sigmoid`` remember the logits they were applied to, so the cross-entropy losses can use them
directly (as Keras does) and stay exact where probabilities would round to 0 or 1.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from popjit.frontend import api as tf
from popjit.frontend import ipu_ops
from popjit.keras import backend, generic_utils

_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946

# id(output tensor) -> (weak reference to the output, its logits)
_LOGITS: dict[int, tuple[Any, Any]] = {}


def _remember_logits(output: Any, logits: Any, kind: str) -> Any:
    key = id(output)
    try:
        ref = weakref.ref(output, lambda _r, k=key: _LOGITS.pop(k, None))
    except TypeError:
        return output
    _LOGITS[key] = (ref, (kind, logits))
    return output


def cached_logits(output: Any, kind: str) -> Any:
    """The logits ``output`` was computed from by :func:`softmax` (kind 'softmax') or :func:`sigmoid`."""
    entry = _LOGITS.get(id(output))
    if entry is None or entry[0]() is not output or entry[1][0] != kind:
        return None
    return entry[1][1]


def _x(x: Any) -> Any:
    return tf.convert_to_tensor(x)


def linear(x: Any) -> Any:
    """The identity."""
    return _x(x)


def relu(x: Any, alpha: float = 0.0, max_value: float | None = None, threshold: float = 0.0) -> Any:
    """``max(x, 0)``; with ``alpha`` a leaky slope below ``threshold``, with ``max_value`` a cap."""
    x = _x(x)
    if alpha != 0 and max_value is None and threshold == 0:
        return leaky_relu(x, alpha)
    negative = None
    if alpha != 0:
        negative = tf.nn.relu(-x + threshold) if threshold != 0 else tf.nn.relu(-x)
    clip = max_value is not None
    if threshold != 0:
        y = x * tf.cast(tf.greater(x, threshold), x.dtype)
    elif max_value == 6:
        y, clip = tf.nn.relu6(x), False
    else:
        y = tf.nn.relu(x)
    if clip:
        y = tf.clip_by_value(y, 0.0, float(max_value))  # type: ignore[arg-type]
    if negative is not None:
        y = y - alpha * negative
    return y


def relu6(x: Any) -> Any:
    """``min(max(x, 0), 6)``."""
    return tf.nn.relu6(_x(x))


def leaky_relu(x: Any, alpha: float = 0.2) -> Any:
    """``x`` for positive values, ``alpha * x`` otherwise."""
    return tf.nn.leaky_relu(_x(x), alpha)


def elu(x: Any, alpha: float = 1.0) -> Any:
    """``x`` for positive values, ``alpha * (exp(x) - 1)`` otherwise."""
    x = _x(x)
    y = tf.nn.elu(x)
    if alpha == 1:
        return y
    return tf.where(tf.greater(x, 0.0), y, y * alpha)


def selu(x: Any) -> Any:
    """Scaled ELU with the self-normalising constants."""
    x = _x(x)
    return _SELU_SCALE * tf.where(tf.greater(x, 0.0), x, _SELU_ALPHA * tf.math.expm1(tf.minimum(x, 0.0)))


def softplus(x: Any) -> Any:
    """``log(1 + exp(x))``."""
    return tf.nn.softplus(_x(x))


def softsign(x: Any) -> Any:
    """``x / (1 + |x|)``."""
    x = _x(x)
    return x / (tf.abs(x) + 1.0)


def sigmoid(x: Any) -> Any:
    """``1 / (1 + exp(-x))``."""
    x = _x(x)
    return _remember_logits(tf.nn.sigmoid(x), x, "sigmoid")


def hard_sigmoid(x: Any) -> Any:
    """The piecewise-linear sigmoid ``clip(0.2 * x + 0.5, 0, 1)`` (Graphcore's ``ipu.nn_ops.hard_sigmoid``)."""
    return ipu_ops.hard_sigmoid(_x(x))


def tanh(x: Any) -> Any:
    """Hyperbolic tangent."""
    return tf.nn.tanh(_x(x))


def exponential(x: Any) -> Any:
    """``exp(x)``."""
    return tf.exp(_x(x))


def swish(x: Any) -> Any:
    """``x * sigmoid(x)`` (also called SiLU)."""
    return tf.nn.silu(_x(x))


silu = swish


def gelu(x: Any, approximate: bool = False) -> Any:
    """Gaussian error linear unit: exact (erf) or the tanh approximation."""
    return tf.nn.gelu(_x(x), approximate=approximate)


def mish(x: Any) -> Any:
    """``x * tanh(softplus(x))``."""
    x = _x(x)
    return x * tf.nn.tanh(tf.nn.softplus(x))


def softmax(x: Any, axis: int = -1) -> Any:
    """Normalised exponentials along ``axis`` (inputs of rank 2 or more)."""
    x = _x(x)
    if x.shape.rank is not None and x.shape.rank <= 1:
        raise ValueError(f"Cannot apply softmax to a tensor that is 1D. Received input: {x}")
    return _remember_logits(tf.nn.softmax(x, axis=axis), x, "softmax")


_BY_NAME: dict[str, Callable[..., Any]] = {
    "linear": linear, "relu": relu, "relu6": relu6, "leaky_relu": leaky_relu, "elu": elu, "selu": selu,
    "softplus": softplus, "softsign": softsign, "sigmoid": sigmoid, "hard_sigmoid": hard_sigmoid,
    "tanh": tanh, "exponential": exponential, "swish": swish, "silu": swish, "gelu": gelu, "mish": mish,
    "softmax": softmax,
}


def get(identifier: Any) -> Callable[..., Any]:
    """An activation function from a name, a config dict, a callable, or None (linear)."""
    if identifier is None:
        return linear
    if isinstance(identifier, str):
        fn = _BY_NAME.get(identifier) or generic_utils.get_registered_object(identifier)
        if fn is None:
            raise backend.unknown_object("activation function", identifier)
        return fn
    if isinstance(identifier, dict):
        return deserialize(identifier)
    if callable(identifier):
        return identifier
    raise TypeError(f"Could not interpret activation function identifier: {identifier}")


def serialize(activation: Callable[..., Any]) -> Any:
    """The name of a built-in activation (or of a function, its registered name if it has one), or a layer's
    config."""
    if hasattr(activation, "get_config") and not isinstance(activation, type):
        return {"class_name": type(activation).__name__, "config": activation.get_config()}
    return generic_utils.get_registered_name(activation)


def deserialize(config: Any, custom_objects: dict[str, Any] | None = None) -> Callable[..., Any]:
    """The activation named by ``config`` (a name, or a layer config dict)."""
    if custom_objects and isinstance(config, str) and config in custom_objects:
        return custom_objects[config]
    if isinstance(config, dict):
        # why: layers is built on this module (importing it at the top would be circular)
        from popjit.keras import layers

        cls = getattr(layers, config["class_name"], None) or (custom_objects or {}).get(config["class_name"])
        if cls is None:
            raise ValueError(f"Unknown activation layer: {config['class_name']}")
        return cls.from_config(config.get("config", {}))
    return get(config)

