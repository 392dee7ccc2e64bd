"""``tf.compat.v1.losses``: TF1's losses, each weighted and reduced as TF1 does
(default ``Reduction.SUM_BY_NONZERO_WEIGHTS``: the weighted sum over the number of non-zero weights)
and, in graph mode, added to the ``losses`` collection (``get_losses``, ``get_total_loss``)."""

from __future__ import annotations

from typing import Any

from popjit.compat.v1 import graph_ops
from popjit.errors import missing_attributes
from popjit.frontend import api, graph_mode
from popjit.frontend.convert import convert_to_tensor


class Reduction:
    """How a weighted loss is reduced to what the loss function returns."""

    NONE = "none"
    SUM = "weighted_sum"
    SUM_OVER_BATCH_SIZE = "weighted_sum_over_batch_size"
    MEAN = "weighted_mean"
    SUM_BY_NONZERO_WEIGHTS = "weighted_sum_by_nonzero_weights"
    SUM_OVER_NONZERO_WEIGHTS = SUM_BY_NONZERO_WEIGHTS

    @classmethod
    def all(cls) -> tuple[str, ...]:
        return (cls.NONE, cls.SUM, cls.MEAN, cls.SUM_OVER_BATCH_SIZE, cls.SUM_OVER_NONZERO_WEIGHTS)

    @classmethod
    def validate(cls, key: str) -> None:
        if key not in cls.all():
            raise ValueError(f"Invalid Reduction Key {key}.")


def _safe_div(numerator: Any, denominator: Any) -> Any:
    """``numerator / denominator``, 0 where the denominator is 0."""
    zero = api.zeros_like(denominator)
    safe = api.where(api.equal(denominator, zero), api.ones_like(denominator), denominator)
    return api.where(api.equal(denominator, zero), zero, numerator / safe)


def compute_weighted_loss(losses: Any, weights: Any = 1.0, scope: Any = None, loss_collection: str = "losses",
                          reduction: str = Reduction.SUM_BY_NONZERO_WEIGHTS) -> Any:
    """``losses * weights`` reduced by ``reduction``."""
    Reduction.validate(reduction)
    losses = convert_to_tensor(losses)
    weights = api.cast(convert_to_tensor(weights), losses.dtype)
    weighted = losses * weights
    if reduction == Reduction.NONE:
        loss = weighted
    else:
        total = api.reduce_sum(weighted)
        full_weights = weights * api.ones_like(losses)
        if reduction == Reduction.MEAN:
            loss = _safe_div(total, api.reduce_sum(full_weights))
        elif reduction == Reduction.SUM_OVER_BATCH_SIZE:
            loss = total / float(max(1, losses.shape.num_elements() or 0))
        elif reduction == Reduction.SUM_OVER_NONZERO_WEIGHTS:
            nonzero = api.reduce_sum(api.cast(api.not_equal(full_weights, 0.0), losses.dtype))
            loss = _safe_div(total, nonzero)
        else:
            loss = total
    if loss_collection and graph_mode.current_graph_trace() is not None:
        graph_ops.add_to_collection(loss_collection, loss)
    return loss


def _reduced(per_element: Any, weights: Any, loss_collection: str, reduction: str) -> Any:
    return compute_weighted_loss(per_element, weights, None, loss_collection, reduction)


def absolute_difference(labels: Any, predictions: Any, weights: Any = 1.0, scope: Any = None,
                        loss_collection: str = "losses", reduction: str = Reduction.SUM_BY_NONZERO_WEIGHTS) -> Any:
    """``|predictions - labels|``, weighted and reduced."""
    p, y = convert_to_tensor(predictions), convert_to_tensor(labels)
    return _reduced(api.abs(p - api.cast(y, p.dtype)), weights, loss_collection, reduction)


def mean_squared_error(labels: Any, predictions: Any, weights: Any = 1.0, scope: Any = None,
                       loss_collection: str = "losses", reduction: str = Reduction.SUM_BY_NONZERO_WEIGHTS) -> Any:
    """``(predictions - labels)^2``, weighted and reduced."""
    p, y = convert_to_tensor(predictions), convert_to_tensor(labels)
    return _reduced(api.square(p - api.cast(y, p.dtype)), weights, loss_collection, reduction)


def huber_loss(labels: Any, predictions: Any, weights: Any = 1.0, delta: float = 1.0, scope: Any = None,
               loss_collection: str = "losses", reduction: str = Reduction.SUM_BY_NONZERO_WEIGHTS) -> Any:
    """Quadratic within ``delta`` of the label, linear beyond."""
    p, y = convert_to_tensor(predictions), convert_to_tensor(labels)
    error = api.abs(p - api.cast(y, p.dtype))
    quadratic = api.minimum(error, delta)
    return _reduced(0.5 * quadratic * quadratic + delta * (error - quadratic), weights, loss_collection, reduction)


def log_loss(labels: Any, predictions: Any, weights: Any = 1.0, epsilon: float = 1e-7, scope: Any = None,
             loss_collection: str = "losses", reduction: str = Reduction.SUM_BY_NONZERO_WEIGHTS) -> Any:
    """The binary cross-entropy of probabilities ``predictions``."""
    p = convert_to_tensor(predictions)
    y = api.cast(convert_to_tensor(labels), p.dtype)
    per = -y * api.math.log(p + epsilon) - (1.0 - y) * api.math.log(1.0 - p + epsilon)
    return _reduced(per, weights, loss_collection, reduction)


def hinge_loss(labels: Any, logits: Any, weights: Any = 1.0, scope: Any = None, loss_collection: str = "losses",
               reduction: str = Reduction.SUM_BY_NONZERO_WEIGHTS) -> Any:
    """``max(0, 1 - (2 labels - 1) logits)`` for 0/1 labels."""
    x = convert_to_tensor(logits)
    signs = 2.0 * api.cast(convert_to_tensor(labels), x.dtype) - 1.0
    return _reduced(api.nn.relu(1.0 - signs * x), weights, loss_collection, reduction)


def _smoothed(labels: Any, logits: Any, smoothing: float, uniform: float) -> tuple[Any, Any]:
    """``(labels, logits)`` as tensors, the labels moved ``smoothing`` of the way towards ``uniform``."""
    x = convert_to_tensor(logits)
    y = api.cast(convert_to_tensor(labels), x.dtype)
    return (y * (1.0 - smoothing) + smoothing * uniform if smoothing else y), x


def sigmoid_cross_entropy(multi_class_labels: Any, logits: Any, weights: Any = 1.0, label_smoothing: float = 0,
                          scope: Any = None, loss_collection: str = "losses",
                          reduction: str = Reduction.SUM_BY_NONZERO_WEIGHTS) -> Any:
    """Element-wise sigmoid cross-entropy (labels smoothed towards 1/2)."""
    y, x = _smoothed(multi_class_labels, logits, label_smoothing, 0.5)
    return _reduced(api.nn.sigmoid_cross_entropy_with_logits(labels=y, logits=x), weights, loss_collection, reduction)


def softmax_cross_entropy(onehot_labels: Any, logits: Any, weights: Any = 1.0, label_smoothing: float = 0,
                          scope: Any = None, loss_collection: str = "losses",
                          reduction: str = Reduction.SUM_BY_NONZERO_WEIGHTS) -> Any:
    """Cross-entropy of ``softmax(logits)`` against one-hot labels (smoothed towards uniform), per example."""
    classes = convert_to_tensor(logits).shape.as_list()[-1]
    y, x = _smoothed(onehot_labels, logits, label_smoothing, 1.0 / classes)
    return _reduced(api.nn.softmax_cross_entropy_with_logits(labels=y, logits=x), weights, loss_collection, reduction)


def sparse_softmax_cross_entropy(labels: Any, logits: Any, weights: Any = 1.0, scope: Any = None,
                                 loss_collection: str = "losses",
                                 reduction: str = Reduction.SUM_BY_NONZERO_WEIGHTS) -> Any:
    """Cross-entropy of ``softmax(logits)`` against class indices, per example."""
    per = api.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
    return _reduced(per, weights, loss_collection, reduction)


def add_loss(loss: Any, loss_collection: str = "losses") -> None:
    """Add ``loss`` to the graph's loss collection."""
    if loss_collection and graph_mode.current_graph_trace() is not None:
        graph_ops.add_to_collection(loss_collection, loss)


def get_losses(scope: str | None = None, loss_collection: str = "losses") -> list[Any]:
    """The losses added to ``loss_collection``."""
    return graph_ops.get_collection(loss_collection, scope)


def get_regularization_losses(scope: str | None = None) -> list[Any]:
    return graph_ops.get_collection("regularization_losses", scope)


def get_regularization_loss(scope: str | None = None, name: str = "total_regularization_loss") -> Any:
    losses = get_regularization_losses(scope)
    return api.add_n(losses) if losses else api.constant(0.0)


def get_total_loss(add_regularization_losses: bool = True, name: str = "total_loss", scope: str | None = None) -> Any:
    """The sum of the collected losses (and regularization losses)."""
    losses = get_losses(scope) + (get_regularization_losses(scope) if add_regularization_losses else [])
    if not losses:
        raise ValueError("No losses found in collection")
    return api.add_n(losses)


__all__ = ["Reduction", "absolute_difference", "add_loss", "compute_weighted_loss", "get_losses",
           "get_regularization_loss", "get_regularization_losses", "get_total_loss", "hinge_loss", "huber_loss",
           "log_loss", "mean_squared_error", "sigmoid_cross_entropy", "softmax_cross_entropy",
           "sparse_softmax_cross_entropy"]

__getattr__ = missing_attributes("tf.compat.v1.losses")
