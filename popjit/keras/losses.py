"""``tf.keras.losses``: loss functions (one loss per example) and loss classes (reduced, weighted).

The functions follow Keras's formulas: cross-entropies on probabilities clip them to
``[epsilon, 1 - epsilon]``; with ``from_logits=True`` they use a log-softmax (or the stable
``max(x, 0) - x * z + log1p(exp(-|x|))`` for sigmoids), exact at any logit size. A probability
computed by the ``softmax`` or ``sigmoid`` activation is traced back to its logits, as Keras does.
"""

from __future__ import annotations

from typing import Any

from popjit.frontend import api as tf
from popjit.keras import activations, backend, generic_utils


class Reduction:
    """How a loss class combines per-example losses."""

    AUTO = "auto"
    NONE = "none"
    SUM = "sum"
    SUM_OVER_BATCH_SIZE = "sum_over_batch_size"

    @classmethod
    def all(cls) -> tuple[str, ...]:
        return (cls.AUTO, cls.NONE, cls.SUM, cls.SUM_OVER_BATCH_SIZE)

    @classmethod
    def validate(cls, key: str) -> None:
        if key not in cls.all():
            raise ValueError(f'Invalid Reduction Key: {key}. Expected keys are "{cls.all()}"')


def _pair(y_true: Any, y_pred: Any) -> tuple[Any, Any]:
    """``y_pred`` as a float tensor and ``y_true`` cast to its dtype."""
    y_pred = tf.convert_to_tensor(y_pred)
    if not y_pred.dtype.is_floating:
        y_pred = tf.cast(y_pred, backend.floatx())
    y_true = tf.cast(tf.convert_to_tensor(y_true), y_pred.dtype)
    return y_true, y_pred


# -- regression ---------------------------------------------------------------------------------
def mean_squared_error(y_true: Any, y_pred: Any) -> Any:
    """Mean over the last axis of ``(y_pred - y_true) ** 2``."""
    y_true, y_pred = _pair(y_true, y_pred)
    return tf.reduce_mean(tf.math.squared_difference(y_pred, y_true), axis=-1)


def mean_absolute_error(y_true: Any, y_pred: Any) -> Any:
    """Mean over the last axis of ``|y_pred - y_true|``."""
    y_true, y_pred = _pair(y_true, y_pred)
    return tf.reduce_mean(tf.abs(y_pred - y_true), axis=-1)


def mean_absolute_percentage_error(y_true: Any, y_pred: Any) -> Any:
    """``100 * mean(|y_true - y_pred| / max(|y_true|, epsilon))`` over the last axis."""
    y_true, y_pred = _pair(y_true, y_pred)
    diff = tf.abs((y_true - y_pred) / tf.maximum(tf.abs(y_true), backend.epsilon()))
    return 100.0 * tf.reduce_mean(diff, axis=-1)


def mean_squared_logarithmic_error(y_true: Any, y_pred: Any) -> Any:
    """Mean over the last axis of ``(log(y_pred + 1) - log(y_true + 1)) ** 2`` (values clipped at epsilon)."""
    y_true, y_pred = _pair(y_true, y_pred)
    first = tf.math.log(tf.maximum(y_pred, backend.epsilon()) + 1.0)
    second = tf.math.log(tf.maximum(y_true, backend.epsilon()) + 1.0)
    return tf.reduce_mean(tf.math.squared_difference(first, second), axis=-1)


def huber(y_true: Any, y_pred: Any, delta: float = 1.0) -> Any:
    """Quadratic for errors up to ``delta``, linear beyond; mean over the last axis."""
    y_true, y_pred = _pair(y_true, y_pred)
    err = tf.abs(y_pred - y_true)
    quadratic = 0.5 * tf.square(err)
    linear = delta * err - 0.5 * delta * delta
    return tf.reduce_mean(tf.where(err <= delta, quadratic, linear), axis=-1)


# -- cross-entropies ----------------------------------------------------------------------------
def _logits_from(output: Any, kind: str, from_logits: bool) -> tuple[Any, bool]:
    logits = activations.cached_logits(output, kind)
    if logits is not None:
        return logits, True
    return output, from_logits


def categorical_crossentropy(y_true: Any, y_pred: Any, from_logits: bool = False, label_smoothing: float = 0.0,
                             axis: int = -1) -> Any:
    """``-sum(y_true * log(p))`` over ``axis`` for one-hot (or soft) targets."""
    y_pred = tf.convert_to_tensor(y_pred)
    y_true = tf.cast(tf.convert_to_tensor(y_true), y_pred.dtype)
    if label_smoothing:
        classes = float(y_true.shape[axis])
        y_true = y_true * (1.0 - label_smoothing) + label_smoothing / classes
    output, from_logits = _logits_from(y_pred, "softmax", from_logits)
    if from_logits:
        return tf.nn.softmax_cross_entropy_with_logits(labels=y_true, logits=output, axis=axis)
    output = output / tf.reduce_sum(output, axis=axis, keepdims=True)
    eps = backend.epsilon()
    output = tf.clip_by_value(output, eps, 1.0 - eps)
    return -tf.reduce_sum(y_true * tf.math.log(output), axis=axis)


def sparse_categorical_crossentropy(y_true: Any, y_pred: Any, from_logits: bool = False, axis: int = -1) -> Any:
    """Cross-entropy of integer class labels ``y_true`` against per-class ``y_pred``.

    Without ``from_logits`` the probabilities are clipped to ``[epsilon, 1 - epsilon]`` and their log
    is used as logits (so they are renormalised, as Keras does).
    """
    y_pred = tf.convert_to_tensor(y_pred)
    if not y_pred.dtype.is_floating:
        y_pred = tf.cast(y_pred, backend.floatx())
    output, from_logits = _logits_from(y_pred, "softmax", from_logits)
    if not from_logits:
        eps = backend.epsilon()
        output = tf.math.log(tf.clip_by_value(output, eps, 1.0 - eps))
    rank = output.shape.rank
    axis = axis % rank
    if axis != rank - 1:
        output = tf.transpose(output, [d for d in range(rank) if d != axis] + [axis])
    labels = tf.convert_to_tensor(y_true)
    if labels.dtype.is_floating:
        labels = tf.cast(labels, tf.int32)
    out_shape = output.shape.as_list()
    flatten = labels.shape.rank != rank - 1
    if flatten:
        labels = tf.reshape(labels, (-1,))
        output = tf.reshape(output, (-1, out_shape[-1]))
    loss = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=output)
    if flatten and rank >= 3:
        return tf.reshape(loss, out_shape[:-1])
    return loss


def binary_crossentropy(y_true: Any, y_pred: Any, from_logits: bool = False, label_smoothing: float = 0.0,
                        axis: int = -1) -> Any:
    """Mean over ``axis`` of the element-wise binary cross-entropy."""
    y_pred = tf.convert_to_tensor(y_pred)
    y_true = tf.cast(tf.convert_to_tensor(y_true), y_pred.dtype)
    if label_smoothing:
        y_true = y_true * (1.0 - label_smoothing) + 0.5 * label_smoothing
    return tf.reduce_mean(_binary_crossentropy(y_true, y_pred, from_logits), axis=axis)


def _binary_crossentropy(target: Any, output: Any, from_logits: bool) -> Any:
    output, from_logits = _logits_from(output, "sigmoid", from_logits)
    if from_logits:
        return tf.nn.sigmoid_cross_entropy_with_logits(labels=target, logits=output)
    eps = backend.epsilon()
    output = tf.clip_by_value(output, eps, 1.0 - eps)
    bce = target * tf.math.log(output + eps) + (1.0 - target) * tf.math.log(1.0 - output + eps)
    return -bce


def kl_divergence(y_true: Any, y_pred: Any) -> Any:
    """``sum(y_true * log(y_true / y_pred))`` over the last axis (both clipped to ``[epsilon, 1]``)."""
    y_true, y_pred = _pair(y_true, y_pred)
    y_true = tf.clip_by_value(y_true, backend.epsilon(), 1.0)
    y_pred = tf.clip_by_value(y_pred, backend.epsilon(), 1.0)
    return tf.reduce_sum(y_true * tf.math.log(y_true / y_pred), axis=-1)


def poisson(y_true: Any, y_pred: Any) -> Any:
    """Mean over the last axis of ``y_pred - y_true * log(y_pred + epsilon)``."""
    y_true, y_pred = _pair(y_true, y_pred)
    return tf.reduce_mean(y_pred - y_true * tf.math.log(y_pred + backend.epsilon()), axis=-1)


# Keras's short names
mse = MSE = mean_squared_error
mae = MAE = mean_absolute_error
mape = MAPE = mean_absolute_percentage_error
msle = MSLE = mean_squared_logarithmic_error
kld = KLD = kullback_leibler_divergence = kl_divergence


# -- reductions ---------------------------------------------------------------------------------
def _squeeze_or_expand(losses: Any, weights: Any) -> Any:
    """Make ``weights`` broadcast against ``losses`` the way Keras does (drop or add a last axis)."""
    lr, wr = losses.shape.rank, weights.shape.rank
    if wr == 0:
        return weights
    if wr - lr == 1 and weights.shape[-1] == 1:
        return tf.squeeze(weights, axis=-1)
    if lr - wr == 1:
        return tf.expand_dims(weights, -1)
    return weights


def remove_squeezable(y_pred: Any, y_true: Any) -> tuple[Any, Any]:
    """Drop a trailing size-1 axis from whichever of ``y_pred`` / ``y_true`` has one axis more."""
    pr, tr = y_pred.shape.rank, y_true.shape.rank
    if pr - tr == 1 and y_pred.shape[-1] == 1:
        y_pred = tf.squeeze(y_pred, axis=-1)
    elif tr - pr == 1 and y_true.shape[-1] == 1:
        y_true = tf.squeeze(y_true, axis=-1)
    return y_pred, y_true


def compute_weighted_loss(losses: Any, sample_weight: Any = None,
                          reduction: str = Reduction.SUM_OVER_BATCH_SIZE) -> Any:
    """Multiply per-example ``losses`` by ``sample_weight`` and reduce them."""
    Reduction.validate(reduction)
    if reduction == Reduction.AUTO:
        reduction = Reduction.SUM_OVER_BATCH_SIZE
    losses = tf.convert_to_tensor(losses)
    input_dtype = losses.dtype
    if losses.dtype != tf.float32 and losses.dtype != tf.float64:
        losses = tf.cast(losses, tf.float32)
    if sample_weight is not None:
        weights = tf.cast(tf.convert_to_tensor(sample_weight), losses.dtype)
        losses = losses * _squeeze_or_expand(losses, weights)
    if reduction == Reduction.NONE:
        return _cast_back(losses, input_dtype)
    total = tf.reduce_sum(losses)
    if reduction == Reduction.SUM_OVER_BATCH_SIZE:
        count = losses.shape.num_elements() or 0
        total = total / float(count) if count else total * 0.0
    return _cast_back(total, input_dtype)


def _cast_back(x: Any, dtype: Any) -> Any:
    return tf.cast(x, dtype) if dtype.is_floating and x.dtype != dtype else x


class Loss:
    """Base class: ``loss(y_true, y_pred, sample_weight=None)`` = reduced weighted ``call(y_true, y_pred)``."""

    def __init__(self, reduction: str = Reduction.AUTO, name: str | None = None) -> None:
        Reduction.validate(reduction)
        self.reduction = reduction
        self.name = name

    def call(self, y_true: Any, y_pred: Any) -> Any:
        """Per-example losses (subclasses implement this)."""
        raise NotImplementedError("Must be implemented in subclasses.")

    def __call__(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> Any:
        losses = self.call(y_true, y_pred)
        return compute_weighted_loss(losses, sample_weight, self.reduction)

    def get_config(self) -> dict[str, Any]:
        return {"reduction": self.reduction, "name": self.name}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Loss:
        return cls(**config)


class LossFunctionWrapper(Loss):
    """A loss class around one of the loss functions and its keyword arguments."""

    def __init__(self, fn: Any, reduction: str = Reduction.AUTO, name: str | None = None, **kwargs: Any) -> None:
        super().__init__(reduction=reduction, name=name)
        self.fn = fn
        self._fn_kwargs = kwargs

    def call(self, y_true: Any, y_pred: Any) -> Any:
        y_pred = tf.convert_to_tensor(y_pred)
        y_true = tf.convert_to_tensor(y_true)
        y_pred, y_true = remove_squeezable(y_pred, y_true)
        return self.fn(y_true, y_pred, **self._fn_kwargs)

    def get_config(self) -> dict[str, Any]:
        return {**self._fn_kwargs, **super().get_config()}


def _wrapper(fn: Any, default_name: str, doc: str, **defaults: Any) -> type[LossFunctionWrapper]:
    params = [*defaults, "reduction", "name"]

    def init(self: LossFunctionWrapper, *args: Any, reduction: str = Reduction.AUTO, name: str = default_name,
                 **kwargs: Any) -> None:
        values: dict[str, Any] = {**defaults, "reduction": reduction, "name": name}
        if len(args) > len(params):
            raise TypeError(f"__init__() takes at most {len(params)} positional arguments ({len(args)} given)")
        values.update(zip(params, args))
        for key, value in kwargs.items():
            if key not in values:
                raise TypeError(f"__init__() got an unexpected keyword argument '{key}'")
            values[key] = value
        reduction, name = values.pop("reduction"), values.pop("name")
        LossFunctionWrapper.__init__(self, fn, reduction=reduction, name=name, **values)

    cls = type(default_name, (LossFunctionWrapper,), {"__init__": init, "__doc__": doc})
    return cls


MeanSquaredError = _wrapper(mean_squared_error, "mean_squared_error", "Mean squared error, reduced over the batch.")
MeanAbsoluteError = _wrapper(mean_absolute_error, "mean_absolute_error", "Mean absolute error, reduced.")
MeanAbsolutePercentageError = _wrapper(mean_absolute_percentage_error, "mean_absolute_percentage_error",
                                       "Mean absolute percentage error, reduced.")
MeanSquaredLogarithmicError = _wrapper(mean_squared_logarithmic_error, "mean_squared_logarithmic_error",
                                       "Mean squared logarithmic error, reduced.")
Huber = _wrapper(huber, "huber_loss", "Huber loss, reduced.", delta=1.0)
KLDivergence = _wrapper(kl_divergence, "kl_divergence", "Kullback-Leibler divergence, reduced.")
Poisson = _wrapper(poisson, "poisson", "Poisson loss, reduced.")
CategoricalCrossentropy = _wrapper(categorical_crossentropy, "categorical_crossentropy",
                                   "Cross-entropy of one-hot targets, reduced.", from_logits=False,
                                   label_smoothing=0.0, axis=-1)
SparseCategoricalCrossentropy = _wrapper(sparse_categorical_crossentropy, "sparse_categorical_crossentropy",
                                         "Cross-entropy of integer class labels, reduced.", from_logits=False, axis=-1)
BinaryCrossentropy = _wrapper(binary_crossentropy, "binary_crossentropy",
                              "Binary cross-entropy, reduced.", from_logits=False, label_smoothing=0.0, axis=-1)
for _cls, _name in ((MeanSquaredError, "MeanSquaredError"), (MeanAbsoluteError, "MeanAbsoluteError"),
                    (MeanAbsolutePercentageError, "MeanAbsolutePercentageError"),
                    (MeanSquaredLogarithmicError, "MeanSquaredLogarithmicError"), (Huber, "Huber"),
                    (KLDivergence, "KLDivergence"), (Poisson, "Poisson"),
                    (CategoricalCrossentropy, "CategoricalCrossentropy"),
                    (SparseCategoricalCrossentropy, "SparseCategoricalCrossentropy"),
                    (BinaryCrossentropy, "BinaryCrossentropy")):
    _cls.__name__ = _cls.__qualname__ = _name
    _cls.__module__ = __name__


_FUNCTIONS = {
    "mean_squared_error": mean_squared_error, "mse": mean_squared_error, "MSE": mean_squared_error,
    "mean_absolute_error": mean_absolute_error, "mae": mean_absolute_error, "MAE": mean_absolute_error,
    "mean_absolute_percentage_error": mean_absolute_percentage_error, "mape": mean_absolute_percentage_error,
    "mean_squared_logarithmic_error": mean_squared_logarithmic_error, "msle": mean_squared_logarithmic_error,
    "categorical_crossentropy": categorical_crossentropy,
    "sparse_categorical_crossentropy": sparse_categorical_crossentropy,
    "binary_crossentropy": binary_crossentropy, "huber": huber, "kl_divergence": kl_divergence,
    "kld": kl_divergence, "poisson": poisson,
}
_CLASSES = {c.__name__: c for c in (MeanSquaredError, MeanAbsoluteError, MeanAbsolutePercentageError,
                                    MeanSquaredLogarithmicError, Huber, KLDivergence, Poisson,
                                    CategoricalCrossentropy, SparseCategoricalCrossentropy, BinaryCrossentropy)}


def serialize(loss: Any) -> Any:
    """A loss class as ``{'class_name', 'config'}``, a loss function as its name."""
    if isinstance(loss, Loss):
        return {"class_name": type(loss).__name__, "config": loss.get_config()}
    return getattr(loss, "__name__", str(loss))


def deserialize(name: Any, custom_objects: dict[str, Any] | None = None) -> Any:
    """The loss function or class instance that :func:`serialize` describes."""
    if isinstance(name, dict):
        cls = generic_utils.get_registered_object(name["class_name"], custom_objects, _CLASSES)
        if cls is None:
            raise ValueError(f"Unknown loss function: {name['class_name']}.")
        return cls.from_config(name.get("config", {}))
    custom = generic_utils.get_registered_object(name, custom_objects)
    if custom is not None:
        return custom
    if name in _FUNCTIONS:
        return _FUNCTIONS[name]
    if name in _CLASSES:
        return _CLASSES[name]()
    raise ValueError(f"Unknown loss function: {name}. Please ensure this object is passed to the `custom_objects` "
                     "argument.")


def get(identifier: Any) -> Any:
    """A loss from a name, a config dict, a callable or None."""
    if identifier is None:
        return None
    if isinstance(identifier, (str, dict)):
        return deserialize(identifier)
    if callable(identifier):
        return identifier
    raise ValueError(f"Could not interpret loss function identifier: {identifier}")
