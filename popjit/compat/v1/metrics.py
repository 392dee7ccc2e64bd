"""``tf.compat.v1.metrics``: streaming metrics of a TF1 graph.

Each returns ``(value, update_op)``: running ``update_op`` adds a batch to the metric's local
variables (``total``, ``count``, in the ``local_variables`` collection, set to zero by
``local_variables_initializer``) and gives the updated value; ``value`` is the metric so far.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from popjit.compat.v1 import graph_ops
from popjit.compat.v1.variable_scope import variable_scope
from popjit.errors import missing_attributes
from popjit.frontend import api
from popjit.frontend.convert import convert_to_tensor
from popjit.frontend.variables import Variable


def _local(name: str) -> Variable:
    """A float32 scalar local variable (starts at zero; not saved, not trained)."""
    var = Variable(np.float32(0), trainable=False, name=name)
    global_variables = graph_ops.get_collection_ref(graph_ops.GraphKeys.GLOBAL_VARIABLES)
    global_variables[:] = [v for v in global_variables if v is not var]  # by identity: == compares values
    graph_ops.add_to_collection(graph_ops.GraphKeys.LOCAL_VARIABLES, var)
    graph_ops.add_to_collection("metric_variables", var)
    return var


def _ratio(total: Any, count: Any) -> Any:
    return api.where(api.greater(count, 0.0), total / api.maximum(count, 1e-30), api.zeros_like(total))


def mean(values: Any, weights: Any = None, metrics_collections: Any = None, updates_collections: Any = None,
         name: str | None = None) -> tuple[Any, Any]:
    """The (weighted) mean of every value seen so far."""
    values = api.cast(convert_to_tensor(values), "float32")
    w = api.ones_like(values) if weights is None else api.cast(convert_to_tensor(weights), "float32") * \
        api.ones_like(values)
    with variable_scope(None, default_name=name or "mean") as scope:
        total, count = _local(f"{scope.name}/total"), _local(f"{scope.name}/count")
    new_total = total.assign_add(api.reduce_sum(values * w))
    new_count = count.assign_add(api.reduce_sum(w))
    value = _ratio(total.read_value(), count.read_value())
    update = _ratio(new_total, new_count)
    for key in metrics_collections or ():
        graph_ops.add_to_collection(key, value)
    for key in updates_collections or ():
        graph_ops.add_to_collection(key, update)
    return value, update


def accuracy(labels: Any, predictions: Any, weights: Any = None, metrics_collections: Any = None,
             updates_collections: Any = None, name: str | None = None) -> tuple[Any, Any]:
    """The fraction of ``predictions`` equal to ``labels`` so far."""
    p = convert_to_tensor(predictions)
    hits = api.cast(api.equal(p, api.cast(convert_to_tensor(labels), p.dtype)), "float32")
    return mean(hits, weights, metrics_collections, updates_collections, name or "accuracy")


def mean_squared_error(labels: Any, predictions: Any, weights: Any = None, metrics_collections: Any = None,
                       updates_collections: Any = None, name: str | None = None) -> tuple[Any, Any]:
    """The mean of ``(predictions - labels)^2`` so far."""
    p = convert_to_tensor(predictions)
    error = api.square(p - api.cast(convert_to_tensor(labels), p.dtype))
    return mean(error, weights, metrics_collections, updates_collections, name or "mean_squared_error")


def mean_absolute_error(labels: Any, predictions: Any, weights: Any = None, metrics_collections: Any = None,
                        updates_collections: Any = None, name: str | None = None) -> tuple[Any, Any]:
    """The mean of ``|predictions - labels|`` so far."""
    p = convert_to_tensor(predictions)
    error = api.abs(p - api.cast(convert_to_tensor(labels), p.dtype))
    return mean(error, weights, metrics_collections, updates_collections, name or "mean_absolute_error")


def root_mean_squared_error(labels: Any, predictions: Any, weights: Any = None, metrics_collections: Any = None,
                            updates_collections: Any = None, name: str | None = None) -> tuple[Any, Any]:
    """The square root of the mean squared error so far."""
    value, update = mean_squared_error(labels, predictions, weights, None, None, name or "root_mean_squared_error")
    return api.sqrt(value), api.sqrt(update)


__all__ = ["accuracy", "mean", "mean_absolute_error", "mean_squared_error", "root_mean_squared_error"]

__getattr__ = missing_attributes("tf.compat.v1.metrics")
