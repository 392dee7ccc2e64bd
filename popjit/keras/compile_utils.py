"""What ``Model.compile`` keeps: the losses and metrics of each output, as Keras 2 combines them.

``LossesContainer`` adds each output's loss (times its ``loss_weights`` entry) into the training
loss and tracks it in the ``loss`` metric, a mean weighted by the batch size; with several outputs
each output's loss is tracked too (``<output>_loss``). ``MetricsContainer`` turns the ``metrics``
argument into metric objects, resolving ``"accuracy"`` by the shapes of labels and predictions.
"""

from __future__ import annotations

from typing import Any

from popjit.frontend import api as tf
from popjit.keras import losses as losses_mod
from popjit.keras import metrics as metrics_mod


def _per_output(value: Any, names: list[str], what: str) -> list[Any]:
    """``value`` given once for all outputs, as a list (one per output), or as a dict by output name."""
    if isinstance(value, dict):
        unknown = set(value) - set(names)
        if unknown:
            raise ValueError(f"Unknown entries in {what} dictionary: {sorted(unknown)}. Only expected following "
                             f"keys: {names}")
        return [value.get(n) for n in names]
    if isinstance(value, (list, tuple)) and len(names) > 1:
        if len(value) != len(names):
            raise ValueError(f"When passing a list as {what}, it should have one entry per model output. The model "
                             f"has {len(names)} outputs, but you passed {what}={value}")
        return list(value)
    return [value] * len(names)


def _loss_object(loss: Any) -> Any:
    obj = losses_mod.get(loss)
    if isinstance(obj, losses_mod.Loss):
        return obj
    return losses_mod.LossFunctionWrapper(obj, name=getattr(obj, "__name__", None))


class LossesContainer:
    """The compiled loss: ``container(y_true, y_pred, sample_weight)`` is the training loss."""

    def __init__(self, loss: Any, loss_weights: Any, output_names: list[str]) -> None:
        self.output_names = output_names
        losses = _per_output(loss, output_names, "loss")
        weights = _per_output(loss_weights, output_names, "loss_weights") if loss_weights is not None else \
            [None] * len(output_names)
        self._losses = [_loss_object(x) if x is not None else None for x in losses]
        self._weights = weights
        self.loss_metric = metrics_mod.Mean(name="loss")
        several = len(output_names) > 1
        self.output_metrics = [metrics_mod.Mean(name=f"{n}_loss") if several and lo is not None else None
                               for n, lo in zip(output_names, self._losses)]

    @property
    def metrics(self) -> list[Any]:
        return [self.loss_metric] + [m for m in self.output_metrics if m is not None]

    def __call__(self, y_true: Any, y_pred: Any, sample_weight: Any = None, regularization_losses: Any = None) -> Any:
        ys_true, ys_pred = tf.nest.flatten(y_true), tf.nest.flatten(y_pred)
        weights = tf.nest.flatten(sample_weight) if sample_weight is not None else [None] * len(ys_pred)
        if len(weights) == 1 and len(ys_pred) > 1:
            weights = weights * len(ys_pred)
        values, batch = [], None
        for k, (loss, weight) in enumerate(zip(self._losses, self._weights)):
            if loss is None:
                continue
            value = loss(ys_true[k], ys_pred[k], sample_weight=weights[k])
            if batch is None:
                batch = ys_true[k].shape[0] if ys_true[k].shape.rank else 1
            if self.output_metrics[k] is not None:
                self.output_metrics[k].update_state(value, sample_weight=batch)
            values.append(value * weight if weight is not None else value)
        for reg in regularization_losses or ():
            values.append(tf.cast(reg, values[0].dtype))
        total = tf.add_n(values) if len(values) > 1 else values[0]
        self.loss_metric.update_state(total, sample_weight=batch)
        return total


def _accuracy_for(y_true: Any, y_pred: Any) -> Any:
    """Keras's choice for ``"accuracy"``: binary for one output column, sparse categorical for integer
    labels (one axis fewer, or a single label column), else categorical."""
    pred_last = y_pred.shape[-1] if y_pred.shape.rank else 1
    true_last = y_true.shape[-1] if y_true.shape.rank else 1
    if pred_last == 1:
        return metrics_mod.binary_accuracy
    if y_true.shape.rank < y_pred.shape.rank or (true_last == 1 and pred_last > 1):
        return metrics_mod.sparse_categorical_accuracy
    return metrics_mod.categorical_accuracy


def _accuracy_kind(name: str) -> Any:
    """``"acc"``/``"accuracy"`` with a prefix Keras also resolves: ``"binary_accuracy"`` names itself."""
    return name in ("accuracy", "acc")


class MetricsContainer:
    """The compiled metrics of every output, created (and their variables placed) on first use.

    ``metrics`` are updated without ``sample_weight`` and ``weighted_metrics`` with it, as in Keras 2;
    with several outputs each name gets its output's prefix, and a weighted metric whose name is taken
    by an unweighted one gets ``weighted_``.
    """

    def __init__(self, metrics: Any, weighted_metrics: Any, output_names: list[str]) -> None:
        self.output_names = output_names
        self.user_metrics = metrics  # as given to compile (a whole-model file records them)
        self._given = [_per_output(m, output_names, what) if m is not None else [None] * len(output_names)
                       for m, what in ((metrics, "metrics"), (weighted_metrics, "weighted_metrics"))]
        self._objects: list[list[tuple[Any, bool]]] | None = None

    @property
    def built(self) -> bool:
        return self._objects is not None

    def build(self, y_true: Any, y_pred: Any) -> None:
        """Create the metric objects for labels and predictions like ``y_true`` and ``y_pred``."""
        ys_true, ys_pred = tf.nest.flatten(y_true), tf.nest.flatten(y_pred)
        prefix = len(self.output_names) > 1
        taken: set[str] = set()
        self._objects = []
        for k, output in enumerate(self.output_names):
            objs: list[tuple[Any, bool]] = []
            for weighted, given in enumerate(g[k] for g in self._given):
                entries = [] if given is None else (list(given) if isinstance(given, (list, tuple)) else [given])
                for entry in entries:
                    obj = self._metric_object(entry, ys_true[k], ys_pred[k])
                    name = f"{output}_{obj.name}" if prefix else obj.name
                    if weighted and name in taken:
                        name = f"{output}_weighted_{obj.name}" if prefix else f"weighted_{obj.name}"
                    if name in taken:
                        raise ValueError(f"Found two metrics with the same name: {name}")
                    taken.add(name)
                    obj._name = name
                    objs.append((obj, bool(weighted)))
            self._objects.append(objs)

    @staticmethod
    def _metric_object(entry: Any, y_true: Any, y_pred: Any) -> Any:
        if isinstance(entry, metrics_mod.Metric):
            return entry
        if isinstance(entry, str):
            fn = _accuracy_for(y_true, y_pred) if _accuracy_kind(entry) else metrics_mod.get(entry)
            if isinstance(fn, metrics_mod.Metric):
                return fn
            return metrics_mod.MeanMetricWrapper(fn, name=entry)
        if isinstance(entry, type) and issubclass(entry, metrics_mod.Metric):
            return entry()
        if callable(entry):
            return metrics_mod.MeanMetricWrapper(entry, name=getattr(entry, "__name__", "metric"))
        raise ValueError(f"Could not interpret metric identifier: {entry}")

    @property
    def metrics(self) -> list[Any]:
        return [m for objs in self._objects or () for m, _ in objs]

    def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
        if not self.built:
            self.build(y_true, y_pred)
        ys_true, ys_pred = tf.nest.flatten(y_true), tf.nest.flatten(y_pred)
        weights = tf.nest.flatten(sample_weight) if sample_weight is not None else [None] * len(ys_pred)
        if len(weights) == 1 and len(ys_pred) > 1:
            weights = weights * len(ys_pred)
        for k, objs in enumerate(self._objects or ()):
            for m, weighted in objs:
                m.update_state(ys_true[k], ys_pred[k], sample_weight=weights[k] if weighted else None)
