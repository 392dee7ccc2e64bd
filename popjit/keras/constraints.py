"""``tf.keras.constraints``: projections applied to a weight after every optimizer update
(``kernel_constraint=``)."""

from __future__ import annotations

from typing import Any

from popjit.frontend import api as tf
from popjit.keras.generic_utils import ObjectRegistry


class Constraint:
    """The base class: ``constraint(weight)`` is the projected weight."""

    def __call__(self, w: Any) -> Any:
        return w

    def get_config(self) -> dict[str, Any]:
        return {}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Constraint:
        return cls(**config)


def _norms(w: Any, axis: Any) -> Any:
    return tf.sqrt(tf.reduce_sum(tf.square(w), axis=axis, keepdims=True))


class MaxNorm(Constraint):
    """Scale each slice along ``axis`` down to a norm of at most ``max_value``."""

    def __init__(self, max_value: float = 2, axis: Any = 0) -> None:
        self.max_value, self.axis = max_value, axis

    def __call__(self, w: Any) -> Any:
        norms = _norms(w, self.axis)
        desired = tf.clip_by_value(norms, 0, self.max_value)
        return w * (desired / (1e-7 + norms))

    def get_config(self) -> dict[str, Any]:
        return {"max_value": self.max_value, "axis": self.axis}


class NonNeg(Constraint):
    """Zero the negative entries."""

    def __call__(self, w: Any) -> Any:
        return w * tf.cast(tf.greater_equal(w, 0.0), w.dtype)


class UnitNorm(Constraint):
    """Scale each slice along ``axis`` to norm 1."""

    def __init__(self, axis: Any = 0) -> None:
        self.axis = axis

    def __call__(self, w: Any) -> Any:
        return w / (1e-7 + _norms(w, self.axis))

    def get_config(self) -> dict[str, Any]:
        return {"axis": self.axis}


class MinMaxNorm(Constraint):
    """Move each slice's norm into ``[min_value, max_value]`` at speed ``rate``."""

    def __init__(self, min_value: float = 0.0, max_value: float = 1.0, rate: float = 1.0, axis: Any = 0) -> None:
        self.min_value, self.max_value, self.rate, self.axis = min_value, max_value, rate, axis

    def __call__(self, w: Any) -> Any:
        norms = _norms(w, self.axis)
        desired = self.rate * tf.clip_by_value(norms, self.min_value, self.max_value) + (1 - self.rate) * norms
        return w * (desired / (1e-7 + norms))

    def get_config(self) -> dict[str, Any]:
        return {"min_value": self.min_value, "max_value": self.max_value, "rate": self.rate, "axis": self.axis}


max_norm, non_neg, unit_norm, min_max_norm = MaxNorm, NonNeg, UnitNorm, MinMaxNorm
_BY_NAME = {"max_norm": MaxNorm, "non_neg": NonNeg, "unit_norm": UnitNorm, "min_max_norm": MinMaxNorm,
            "MaxNorm": MaxNorm, "NonNeg": NonNeg, "UnitNorm": UnitNorm, "MinMaxNorm": MinMaxNorm}


_REGISTRY = ObjectRegistry("constraint", _BY_NAME)
get, serialize, deserialize = _REGISTRY.get, _REGISTRY.serialize, _REGISTRY.deserialize
