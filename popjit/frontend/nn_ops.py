"""``tf.nn`` losses on logits: softmax and sigmoid cross-entropies.

They are compositions of registered ops (``log_softmax``, ``one_hot``, element-wise ops), so the
autodiff and the fusion of the pieces apply to them unchanged: the backward pass of
``sparse_softmax_cross_entropy_with_logits`` is ``softmax(logits) - one_hot(labels)``.
"""

from __future__ import annotations

from typing import Any

from popjit.errors import InvalidArgumentError
from popjit.frontend import array_ops, gather_ops, math_ops, random_ops
from popjit.frontend.convert import convert_to_tensor
from popjit.frontend.gradient_tape import stop_gradient
from popjit.frontend.tensor import Tensor
from popjit.source import user_location, where


def sparse_softmax_cross_entropy_with_logits(labels: Any = None, logits: Any = None, name: str | None = None
                                             ) -> Tensor:
    """``-log(softmax(logits)[label])`` per example; ``labels`` are class indices of shape ``logits.shape[:-1]``."""
    logits, labels = convert_to_tensor(logits), convert_to_tensor(labels)
    _check_float(logits, "SparseSoftmaxCrossEntropyWithLogits")
    if labels.ndim != logits.ndim - 1:
        raise InvalidArgumentError(
            f"Rank mismatch: Rank of labels (received {labels.ndim}) should equal rank of logits minus 1 "
            f"(received {logits.ndim}){where(user_location(2))}."
        )
    if labels.shape.as_list() != logits.shape.as_list()[:-1]:
        raise InvalidArgumentError(
            f"logits and labels must have the same first dimension, got logits shape {logits.shape} and labels "
            f"shape {labels.shape}{where(user_location(2))}"
        )
    if not labels.dtype.is_integer:
        raise InvalidArgumentError(f"labels must be int32 or int64 class indices, not {labels.dtype.name}"
                                   f"{where(user_location(2))}")
    onehot = gather_ops.one_hot(labels, logits.shape.as_list()[-1], dtype=logits.dtype)
    return math_ops.negative(math_ops.reduce_sum(onehot * math_ops.log_softmax(logits), axis=-1))


def softmax_cross_entropy_with_logits(labels: Any = None, logits: Any = None, axis: int = -1,
                                      name: str | None = None) -> Tensor:
    """``-sum(labels * log_softmax(logits))`` along ``axis``; ``labels`` a distribution per example."""
    logits = convert_to_tensor(logits)
    _check_float(logits, "SoftmaxCrossEntropyWithLogits")
    labels = convert_to_tensor(labels, dtype=logits.dtype)
    if labels.shape.as_list() != logits.shape.as_list():
        raise InvalidArgumentError(
            f"logits and labels must be broadcastable: logits_size={logits.shape.as_list()} "
            f"labels_size={labels.shape.as_list()}{where(user_location(2))}"
        )
    return math_ops.negative(math_ops.reduce_sum(labels * math_ops.log_softmax(logits, axis=axis), axis=axis))


def sigmoid_cross_entropy_with_logits(labels: Any = None, logits: Any = None, name: str | None = None) -> Tensor:
    """Element-wise ``max(x, 0) - x * z + log(1 + exp(-|x|))`` (stable for large ``|x|``)."""
    logits = convert_to_tensor(logits)
    _check_float(logits, "SigmoidCrossEntropyWithLogits")
    labels = convert_to_tensor(labels, dtype=logits.dtype)
    if labels.shape.as_list() != logits.shape.as_list():
        raise ValueError(f"logits and labels must have the same shape ({logits.shape} vs {labels.shape})")
    return (math_ops.relu(logits) - logits * labels) + math_ops.log1p(math_ops.exp(-math_ops.abs(logits)))


def _check_float(logits: Tensor, op: str) -> None:
    if not logits.dtype.is_floating:
        raise InvalidArgumentError(f"{op} needs floating-point logits, not {logits.dtype.name}"
                                   f"{where(user_location(3))}")


def moments(x: Any, axes: Any, shift: Any = None, keepdims: bool = False, name: str | None = None
            ) -> tuple[Tensor, Tensor]:
    """``tf.nn.moments``: the mean and the (biased) variance of ``x`` over ``axes``."""
    x = convert_to_tensor(x)
    mean = math_ops.reduce_mean(x, axis=axes, keepdims=True)
    variance = math_ops.reduce_mean(math_ops.squared_difference(x, stop_gradient(mean)), axis=axes,
                                    keepdims=True)
    if not keepdims:
        mean = array_ops.squeeze(mean, axis=axes)
        variance = array_ops.squeeze(variance, axis=axes)
    return mean, variance


def batch_normalization(x: Any, mean: Any, variance: Any, offset: Any, scale: Any, variance_epsilon: float,
                        name: str | None = None) -> Tensor:
    """``tf.nn.batch_normalization``: ``(x - mean) * scale / sqrt(variance + epsilon) + offset``
    (``offset`` and ``scale`` may be None)."""
    x = convert_to_tensor(x)
    inv = math_ops.rsqrt(convert_to_tensor(variance, dtype=x.dtype) + variance_epsilon)
    if scale is not None:
        inv = inv * convert_to_tensor(scale, dtype=x.dtype)
    shift = convert_to_tensor(offset, dtype=x.dtype) - convert_to_tensor(mean, dtype=x.dtype) * inv \
        if offset is not None else -convert_to_tensor(mean, dtype=x.dtype) * inv
    return x * inv + shift


def silu(features: Any, beta: float = 1.0, name: str | None = None) -> Tensor:
    """``tf.nn.silu`` (also ``tf.nn.swish``): ``x * sigmoid(beta * x)``."""
    x = convert_to_tensor(features)
    return x * math_ops.sigmoid(x * beta if beta != 1.0 else x)


swish = silu


def leaky_relu(features: Any, alpha: float = 0.2, name: str | None = None) -> Tensor:
    """``tf.nn.leaky_relu``: ``x`` where positive, ``alpha * x`` elsewhere."""
    x = convert_to_tensor(features)
    if alpha <= 1:
        return math_ops.maximum(x, x * alpha)
    return math_ops.minimum(x, x * alpha)


def bias_add(value: Any, bias: Any, data_format: str | None = None, name: str | None = None) -> Tensor:
    """``tf.nn.bias_add``: add a 1-D ``bias`` along the channel axis (last, or 1 for ``NC...``)."""
    value = convert_to_tensor(value)
    bias = convert_to_tensor(bias, dtype=value.dtype)
    if bias.shape.rank != 1:
        raise ValueError(f"bias must be 1-D, got shape {bias.shape}")
    if data_format is not None and data_format.startswith("NC"):
        channels_shape = [bias.shape[0]] + [1] * (value.shape.rank - 2)
        return value + array_ops.reshape(bias, channels_shape)
    return value + bias


def l2_normalize(x: Any, axis: Any = None, epsilon: float = 1e-12, name: str | None = None,
                 dim: Any = None) -> Tensor:
    """``tf.nn.l2_normalize``: ``x / sqrt(max(sum(x**2, axis), epsilon))``."""
    x = convert_to_tensor(x)
    axis = dim if axis is None else axis
    squares = math_ops.reduce_sum(math_ops.square(x), axis=axis, keepdims=True)
    return x * math_ops.rsqrt(math_ops.maximum(squares, epsilon))


def dropout(x: Any, rate: Any, noise_shape: Any = None, seed: Any = None, name: str | None = None) -> Tensor:
    """``tf.nn.dropout``: zero each element with probability ``rate`` and scale the rest by
    ``1 / (1 - rate)``; ``noise_shape`` broadcasts one decision over the axes where it is 1."""
    x = convert_to_tensor(x)
    rate = float(rate)
    if not 0 <= rate < 1:
        raise ValueError(f"rate must be a scalar tensor or a float in the range [0, 1), got {rate}")
    if rate == 0:
        return x
    shape = x.shape.as_list() if noise_shape is None else [int(n) for n in noise_shape]
    keep = random_ops.uniform(shape, seed=seed, dtype=x.dtype) >= rate
    return x * (1.0 / (1.0 - rate)) * math_ops.cast(keep, x.dtype)


def embedding_lookup(params: Any, ids: Any, max_norm: Any = None, name: str | None = None) -> Tensor:
    """``tf.nn.embedding_lookup``: the rows of ``params`` at ``ids`` (one table; ``max_norm`` is
    not supported)."""
    if max_norm is not None:
        raise InvalidArgumentError(f"tf.nn.embedding_lookup(max_norm=...) is not supported by popjit"
                                   f"{where(user_location(2))}; clip the rows yourself")
    if isinstance(params, (list, tuple)):
        if len(params) != 1:
            raise InvalidArgumentError("tf.nn.embedding_lookup over a list of several sharded tables is "
                                       f"not supported by popjit{where(user_location(2))}; concatenate them")
        params = params[0]
    return gather_ops.gather(params, ids)
