"""``tf.keras.metrics``: stateful metrics (``update_state``, ``result``, ``reset_state``) and their
functions.

A metric keeps its state in non-trainable variables (on the IPU when it is created inside an IPU
strategy's scope), so a compiled training loop updates it on the device and the host reads the
result once per execution, as Keras on the IPU does. The formulas follow Keras's: means are
weighted by ``sample_weight``, accuracies compare after Keras's squeeze/expand of ``y_true``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from popjit.frontend import api as tf
from popjit.keras import backend, losses
from popjit.keras.base_layer import Layer

# -- functions ----------------------------------------------------------------------------------------


def _squeeze_like(y_true: Any, y_pred: Any) -> tuple[Any, Any]:
    """Drop a trailing size-1 axis of ``y_true`` when it has one axis more than ``y_pred`` (Keras's rule)."""
    y_true, y_pred = tf.convert_to_tensor(y_true), tf.convert_to_tensor(y_pred)
    if y_true.shape.rank == y_pred.shape.rank + 1 and y_true.shape[-1] == 1:
        y_true = tf.squeeze(y_true, axis=-1)
    return y_true, y_pred


def accuracy(y_true: Any, y_pred: Any) -> Any:
    """1.0 where ``y_pred`` equals ``y_true``, else 0.0."""
    y_true, y_pred = _squeeze_like(y_true, y_pred)
    if y_true.dtype != y_pred.dtype:
        y_pred = tf.cast(y_pred, y_true.dtype)
    return tf.cast(tf.equal(y_true, y_pred), backend.floatx())


def binary_accuracy(y_true: Any, y_pred: Any, threshold: float = 0.5) -> Any:
    """Mean over the last axis of ``y_true == (y_pred > threshold)``."""
    y_pred = tf.convert_to_tensor(y_pred)
    y_true = tf.cast(tf.convert_to_tensor(y_true), y_pred.dtype)
    predicted = tf.cast(tf.greater(y_pred, tf.cast(threshold, y_pred.dtype)), y_pred.dtype)
    return tf.reduce_mean(tf.cast(tf.equal(y_true, predicted), backend.floatx()), axis=-1)


def categorical_accuracy(y_true: Any, y_pred: Any) -> Any:
    """1.0 where the largest prediction is at the one-hot label's position."""
    y_true, y_pred = tf.convert_to_tensor(y_true), tf.convert_to_tensor(y_pred)
    return tf.cast(tf.equal(tf.argmax(y_true, axis=-1), tf.argmax(y_pred, axis=-1)), backend.floatx())


def sparse_categorical_accuracy(y_true: Any, y_pred: Any) -> Any:
    """1.0 where the largest prediction is at the integer label."""
    y_true, y_pred = _squeeze_like(y_true, y_pred)
    predicted = tf.argmax(y_pred, axis=-1)
    return tf.cast(tf.equal(tf.cast(y_true, predicted.dtype), predicted), backend.floatx())


def _in_top_k(targets: Any, predictions: Any, k: int) -> Any:
    """Whether the prediction for each target class is among the ``k`` largest of its row (ties count in)."""
    target_score = tf.reduce_sum(tf.one_hot(targets, predictions.shape[-1], dtype=predictions.dtype) * predictions,
                                 axis=-1, keepdims=True)
    higher = tf.reduce_sum(tf.cast(tf.greater(predictions, target_score), tf.int32), axis=-1)
    return tf.less(higher, k)


def top_k_categorical_accuracy(y_true: Any, y_pred: Any, k: int = 5) -> Any:
    """1.0 where the one-hot label's class is among the ``k`` largest predictions."""
    y_true, y_pred = tf.convert_to_tensor(y_true), tf.convert_to_tensor(y_pred)
    return tf.cast(_in_top_k(tf.argmax(y_true, axis=-1), y_pred, k), backend.floatx())


def sparse_top_k_categorical_accuracy(y_true: Any, y_pred: Any, k: int = 5) -> Any:
    """1.0 where the integer label's class is among the ``k`` largest predictions."""
    y_true, y_pred = _squeeze_like(y_true, y_pred)
    return tf.cast(_in_top_k(tf.cast(y_true, tf.int32), y_pred, k), backend.floatx())


# -- metric classes -------------------------------------------------------------------------------------


class Metric(Layer):
    """The base class: state in non-trainable weights; ``metric(*args)`` updates and returns the result."""

    def __init__(self, name: str | None = None, dtype: Any = None, **kwargs: Any) -> None:
        super().__init__(name=name, dtype=dtype or backend.floatx(), **kwargs)
        self.stateful = True
        self.built = True

    def add_weight(self, name: str | None = None, shape: Any = (), initializer: Any = "zeros", dtype: Any = None,
                   **kwargs: Any) -> tf.Variable:
        return super().add_weight(name=name, shape=shape, dtype=dtype or self.dtype, initializer=initializer,
                                  trainable=False)

    def update_state(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(f"{type(self).__name__} must define update_state")

    def result(self) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must define result")

    def reset_state(self) -> None:
        """Every state variable back to zero."""
        for v in self.variables:
            v.assign(np.zeros(v.shape.as_list(), dtype=v.dtype.as_numpy_dtype))

    def reset_states(self) -> None:
        """Old name of :meth:`reset_state`."""
        self.reset_state()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.update_state(*args, **kwargs)
        return self.result()

    def get_config(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype}


class Reduce(Metric):
    """A running sum (``Sum``) or weighted mean (``Mean``) of values."""

    def __init__(self, reduction: str, name: str | None = None, dtype: Any = None) -> None:
        super().__init__(name=name, dtype=dtype)
        self.reduction = reduction
        self.total = self.add_weight("total")
        if reduction != "sum":
            self.count = self.add_weight("count")

    def update_state(self, values: Any, sample_weight: Any = None) -> None:
        values = tf.cast(tf.convert_to_tensor(values), self.dtype)
        if sample_weight is None:
            self.total.assign_add(tf.reduce_sum(values))
            if self.reduction != "sum":
                self.count.assign_add(tf.cast(tf.size(values), self.dtype))
            return
        weights = tf.cast(tf.convert_to_tensor(sample_weight), self.dtype)
        values, weights = _broadcast_weights(values, weights)
        self.total.assign_add(tf.reduce_sum(values * weights))
        if self.reduction != "sum":
            self.count.assign_add(tf.reduce_sum(weights))

    def result(self) -> Any:
        if self.reduction == "sum":
            return tf.identity(self.total)
        return tf.math.divide_no_nan(self.total, self.count)


def _broadcast_weights(values: Any, weights: Any) -> tuple[Any, Any]:
    """Keras's squeeze/expand of weights against values, then both to one shape (values mean-reduced
    over the axes the weights lack)."""
    if weights.shape.rank == values.shape.rank + 1 and weights.shape[-1] == 1:
        weights = tf.squeeze(weights, axis=-1)
    elif values.shape.rank == weights.shape.rank + 1 and values.shape[-1] == 1:
        values = tf.squeeze(values, axis=-1)
    if weights.shape.rank and values.shape.rank > weights.shape.rank:
        values = tf.reduce_mean(values, axis=list(range(weights.shape.rank, values.shape.rank)))
    return values, tf.broadcast_to(weights, values.shape) if weights.shape.rank < values.shape.rank else weights


class Sum(Reduce):
    """The running sum of the values (weighted)."""

    def __init__(self, name: str = "sum", dtype: Any = None) -> None:
        super().__init__("sum", name=name, dtype=dtype)


class Mean(Reduce):
    """The running weighted mean of the values."""

    def __init__(self, name: str = "mean", dtype: Any = None) -> None:
        super().__init__("mean", name=name, dtype=dtype)


class MeanMetricWrapper(Mean):
    """The running mean of ``fn(y_true, y_pred, **kwargs)`` per example."""

    def __init__(self, fn: Any, name: str | None = None, dtype: Any = None, **kwargs: Any) -> None:
        super().__init__(name=name or fn.__name__, dtype=dtype)
        self._fn = fn
        self._fn_kwargs = kwargs

    def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
        # why: labels [B] against sigmoid outputs [B, 1] are compared element by element, as in Keras
        y_pred, y_true = losses.remove_squeezable(tf.convert_to_tensor(y_pred), tf.convert_to_tensor(y_true))
        super().update_state(self._fn(y_true, y_pred, **self._fn_kwargs), sample_weight)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), **self._fn_kwargs}


def _wrapper(fn: Any, default: str, doc: str) -> type[MeanMetricWrapper]:
    def init(self: MeanMetricWrapper, name: str = default, dtype: Any = None, **kwargs: Any) -> None:
        MeanMetricWrapper.__init__(self, fn, name=name, dtype=dtype, **kwargs)

    cls_name = "".join(part.title() for part in default.split("_"))
    return type(cls_name, (MeanMetricWrapper,), {"__init__": init, "__doc__": doc, "__module__": __name__})


Accuracy = _wrapper(accuracy, "accuracy", "How often predictions equal labels.")
BinaryAccuracy = _wrapper(binary_accuracy, "binary_accuracy", "How often ``y_pred > threshold`` equals the label.")
CategoricalAccuracy = _wrapper(categorical_accuracy, "categorical_accuracy", "How often argmax matches one-hot labels.")
SparseCategoricalAccuracy = _wrapper(sparse_categorical_accuracy, "sparse_categorical_accuracy",
                                     "How often argmax matches integer labels.")
TopKCategoricalAccuracy = _wrapper(top_k_categorical_accuracy, "top_k_categorical_accuracy",
                                   "How often the one-hot label is in the top ``k`` predictions.")
SparseTopKCategoricalAccuracy = _wrapper(sparse_top_k_categorical_accuracy, "sparse_top_k_categorical_accuracy",
                                         "How often the integer label is in the top ``k`` predictions.")
MeanSquaredError = _wrapper(losses.mean_squared_error, "mean_squared_error", "The running mean squared error.")
MeanAbsoluteError = _wrapper(losses.mean_absolute_error, "mean_absolute_error", "The running mean absolute error.")
MeanAbsolutePercentageError = _wrapper(losses.mean_absolute_percentage_error, "mean_absolute_percentage_error",
                                       "The running mean absolute percentage error.")
MeanSquaredLogarithmicError = _wrapper(losses.mean_squared_logarithmic_error, "mean_squared_logarithmic_error",
                                       "The running mean squared logarithmic error.")
BinaryCrossentropy = _wrapper(losses.binary_crossentropy, "binary_crossentropy", "The running binary cross-entropy.")
CategoricalCrossentropy = _wrapper(losses.categorical_crossentropy, "categorical_crossentropy",
                                   "The running categorical cross-entropy.")
SparseCategoricalCrossentropy = _wrapper(losses.sparse_categorical_crossentropy, "sparse_categorical_crossentropy",
                                         "The running sparse categorical cross-entropy.")
KLDivergence = _wrapper(losses.kl_divergence, "kullback_leibler_divergence", "The running KL divergence.")
Poisson = _wrapper(losses.poisson, "poisson", "The running Poisson loss.")


class RootMeanSquaredError(Mean):
    """The square root of the running mean squared error."""

    def __init__(self, name: str = "root_mean_squared_error", dtype: Any = None) -> None:
        super().__init__(name=name, dtype=dtype)

    def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
        y_true, y_pred = losses._pair(y_true, y_pred)
        super().update_state(tf.math.squared_difference(y_pred, y_true), sample_weight)

    def result(self) -> Any:
        return tf.sqrt(tf.math.divide_no_nan(self.total, self.count))


class _ConfusionAtThreshold(Metric):
    """True/false positives (and negatives) counted at one ``thresholds`` value per slot."""

    def __init__(self, thresholds: Any, top_k: Any, class_id: Any, name: str | None, dtype: Any,
                 counts: tuple[str, ...]) -> None:
        super().__init__(name=name, dtype=dtype)
        if top_k is not None or class_id is not None:
            raise tf.errors.UnimplementedError(f"{type(self).__name__}(top_k=..., class_id=...) is not supported "
                                               "by popjit; compute it on one class's column instead.")
        self.init_thresholds = thresholds
        self._scalar = thresholds is None or np.ndim(thresholds) == 0
        self.thresholds = [0.5 if thresholds is None else float(thresholds)] if self._scalar else \
            [float(t) for t in thresholds]
        n = len(self.thresholds)
        self._counts = {c: self.add_weight(c, shape=(n,)) for c in counts}

    def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
        y_pred = tf.cast(tf.convert_to_tensor(y_pred), tf.float32)
        y_true = tf.cast(tf.convert_to_tensor(y_true), tf.bool)
        flat_pred, flat_true = tf.reshape(y_pred, [1, -1]), tf.reshape(y_true, [1, -1])
        thresholds = tf.reshape(tf.constant(self.thresholds, tf.float32), [-1, 1])
        predicted = tf.greater(flat_pred, thresholds)  # [thresholds, elements]
        if sample_weight is None:
            weights = tf.ones_like(flat_pred)
        else:
            weights = tf.cast(tf.convert_to_tensor(sample_weight), tf.float32)
            if weights.shape.rank == y_pred.shape.rank - 1:  # Keras expands [n] weights against [n, 1]
                weights = tf.expand_dims(weights, -1)
            weights = tf.reshape(tf.broadcast_to(weights, y_pred.shape), [1, -1])
        cases = {
            "true_positives": tf.logical_and(flat_true, predicted),
            "false_positives": tf.logical_and(tf.logical_not(flat_true), predicted),
            "true_negatives": tf.logical_and(tf.logical_not(flat_true), tf.logical_not(predicted)),
            "false_negatives": tf.logical_and(flat_true, tf.logical_not(predicted)),
        }
        for key, var in self._counts.items():
            var.assign_add(tf.cast(tf.reduce_sum(tf.cast(cases[key], tf.float32) * weights, axis=1), self.dtype))

    def _ratio(self, a: str, b: str) -> Any:
        hits = self._counts[a]
        value = tf.math.divide_no_nan(hits, hits + self._counts[b])
        return value[0] if self._scalar else value


class Precision(_ConfusionAtThreshold):
    """``tp / (tp + fp)`` with predictions above ``thresholds`` (default 0.5) counted as positive."""

    def __init__(self, thresholds: Any = None, top_k: Any = None, class_id: Any = None, name: str = "precision",
                 dtype: Any = None) -> None:
        super().__init__(thresholds, top_k, class_id, name, dtype, ("true_positives", "false_positives"))

    def result(self) -> Any:
        return self._ratio("true_positives", "false_positives")


class Recall(_ConfusionAtThreshold):
    """``tp / (tp + fn)`` with predictions above ``thresholds`` (default 0.5) counted as positive."""

    def __init__(self, thresholds: Any = None, top_k: Any = None, class_id: Any = None, name: str = "recall",
                 dtype: Any = None) -> None:
        super().__init__(thresholds, top_k, class_id, name, dtype, ("true_positives", "false_negatives"))

    def result(self) -> Any:
        return self._ratio("true_positives", "false_negatives")


class AUC(_ConfusionAtThreshold):
    """Area under the ROC (or precision-recall) curve, from counts at ``num_thresholds`` evenly spaced
    thresholds and Keras's interpolation."""

    def __init__(self, num_thresholds: int = 200, curve: str = "ROC", summation_method: str = "interpolation",
                 name: str = "auc", dtype: Any = None, thresholds: Any = None, multi_label: bool = False,
                 num_labels: Any = None, label_weights: Any = None, from_logits: bool = False) -> None:
        if multi_label or label_weights is not None or curve.upper() not in ("ROC", "PR") or \
                summation_method != "interpolation":
            raise tf.errors.UnimplementedError("AUC is supported for curve='ROC' or 'PR' with summation_method="
                                               "'interpolation' and a single label by popjit.")
        eps = 1e-7
        inner = [(i + 1) * 1.0 / (num_thresholds - 1) for i in range(num_thresholds - 2)] if thresholds is None \
            else sorted(float(t) for t in thresholds)
        self.curve, self.num_thresholds, self._from_logits = curve.upper(), len(inner) + 2, from_logits
        super().__init__([0.0 - eps, *inner, 1.0 + eps], None, None, name, dtype,
                         ("true_positives", "true_negatives", "false_positives", "false_negatives"))

    def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
        if self._from_logits:
            y_pred = tf.sigmoid(y_pred)
        super().update_state(y_true, y_pred, sample_weight)

    def result(self) -> Any:
        tp, fp = self._counts["true_positives"], self._counts["false_positives"]
        tn, fn = self._counts["true_negatives"], self._counts["false_negatives"]
        if self.curve == "PR":
            return _pr_auc(tp, fp, fn, self.num_thresholds)
        recall = tf.math.divide_no_nan(tp, tp + fn)
        fp_rate = tf.math.divide_no_nan(fp, fp + tn)
        x, y = fp_rate, recall
        return tf.reduce_sum((x[:-1] - x[1:]) * (y[:-1] + y[1:]) / 2.0)


def _pr_auc(tp: Any, fp: Any, fn: Any, n: int) -> Any:
    """Davis & Goadrich's interpolation of the precision-recall curve between thresholds (Keras's)."""
    dtp = tp[: n - 1] - tp[1:]
    p = tp + fp
    dp = p[: n - 1] - p[1:]
    prec_slope = tf.math.divide_no_nan(dtp, tf.maximum(dp, 0.0))
    intercept = tp[1:] - prec_slope * p[1:]
    safe_p_ratio = tf.where(tf.logical_and(p[: n - 1] > 0, p[1:] > 0),
                            tf.math.divide_no_nan(p[: n - 1], tf.maximum(p[1:], 0.0)), tf.ones_like(p[1:]))
    pr_auc_increment = tf.math.divide_no_nan(prec_slope * (dtp + intercept * tf.math.log(safe_p_ratio)),
                                             tf.maximum(tp[1:] + fn[1:], 0.0))
    return tf.reduce_sum(pr_auc_increment)


# -- by name --------------------------------------------------------------------------------------------

_FUNCTIONS = {
    "accuracy": accuracy, "acc": accuracy, "binary_accuracy": binary_accuracy,
    "categorical_accuracy": categorical_accuracy, "sparse_categorical_accuracy": sparse_categorical_accuracy,
    "top_k_categorical_accuracy": top_k_categorical_accuracy,
    "sparse_top_k_categorical_accuracy": sparse_top_k_categorical_accuracy,
    "mse": losses.mean_squared_error, "mean_squared_error": losses.mean_squared_error,
    "mae": losses.mean_absolute_error, "mean_absolute_error": losses.mean_absolute_error,
    "mape": losses.mean_absolute_percentage_error, "mean_absolute_percentage_error":
        losses.mean_absolute_percentage_error,
    "msle": losses.mean_squared_logarithmic_error, "mean_squared_logarithmic_error":
        losses.mean_squared_logarithmic_error,
    "binary_crossentropy": losses.binary_crossentropy, "categorical_crossentropy": losses.categorical_crossentropy,
    "sparse_categorical_crossentropy": losses.sparse_categorical_crossentropy,
    "kld": losses.kl_divergence, "kl_divergence": losses.kl_divergence, "poisson": losses.poisson,
}
_CLASSES = {cls.__name__: cls for cls in [
    Mean, Sum, MeanMetricWrapper, Accuracy, BinaryAccuracy, CategoricalAccuracy, SparseCategoricalAccuracy,
    TopKCategoricalAccuracy, SparseTopKCategoricalAccuracy, MeanSquaredError, MeanAbsoluteError,
    MeanAbsolutePercentageError, MeanSquaredLogarithmicError, RootMeanSquaredError, BinaryCrossentropy,
    CategoricalCrossentropy, SparseCategoricalCrossentropy, KLDivergence, Poisson, Precision, Recall, AUC]}


def get(identifier: Any) -> Any:
    """A metric function or object from a name (``"mse"``, ``"AUC"``), a config dict or a callable."""
    if callable(identifier) and not isinstance(identifier, type):
        return identifier
    if isinstance(identifier, str):
        if identifier in _FUNCTIONS:
            return _FUNCTIONS[identifier]
        if identifier in _CLASSES:
            return _CLASSES[identifier]()
        raise ValueError(f"Unknown metric function: {identifier}. Please ensure this object is passed to the "
                         "`custom_objects` argument.")
    if isinstance(identifier, dict) and identifier.get("class_name") in _CLASSES:
        return _CLASSES[identifier["class_name"]](**identifier.get("config", {}))
    raise ValueError(f"Could not interpret metric identifier: {identifier}")


def serialize(metric: Any) -> Any:
    """A metric's name (functions) or ``{"class_name", "config"}`` (objects)."""
    if isinstance(metric, Metric):
        return {"class_name": type(metric).__name__, "config": metric.get_config()}
    return getattr(metric, "__name__", metric)


def deserialize(config: Any, custom_objects: dict[str, Any] | None = None) -> Any:
    """The inverse of :func:`serialize`."""
    if isinstance(config, str) and custom_objects and config in custom_objects:
        return custom_objects[config]
    return get(config)
