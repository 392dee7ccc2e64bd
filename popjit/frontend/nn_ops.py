"""``tf.nn`` losses on logits: softmax and sigmoid cross-entropies.

They are compositions of registered ops (``log_softmax``, ``one_hot``, element-wise ops), so the
autodiff and the fusion of the pieces apply to them unchanged: the backward pass of
``sparse_softmax_cross_entropy_with_logits`` is ``softmax(logits) - one_hot(labels)``.
"""

from __future__ import annotations

from typing import Any

from popjit.errors import InvalidArgumentError
from popjit.frontend import gather_ops, math_ops
from popjit.frontend.convert import convert_to_tensor
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
