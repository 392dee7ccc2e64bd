"""``tf.keras.regularizers``: penalties on weights (``kernel_regularizer=``) or on a layer's outputs
(``activity_regularizer=``), added to the training loss through ``model.losses``."""

from __future__ import annotations

from typing import Any

from popjit.frontend import api as tf
from popjit.keras.generic_utils import ObjectRegistry


class Regularizer:
    """The base class: ``regularizer(weight)`` is a scalar penalty."""

    def __call__(self, x: Any) -> Any:
        return tf.constant(0.0)

    def get_config(self) -> dict[str, Any]:
        raise NotImplementedError(f"{type(self).__name__} does not implement get_config")

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Regularizer:
        return cls(**config)


class L1L2(Regularizer):
    """``l1 * sum(|x|) + l2 * sum(x ** 2)``."""

    def __init__(self, l1: float = 0.0, l2: float = 0.0) -> None:
        self.l1, self.l2 = float(l1), float(l2)

    def __call__(self, x: Any) -> Any:
        penalty = tf.constant(0.0, dtype=x.dtype)
        if self.l1:
            penalty += self.l1 * tf.reduce_sum(tf.abs(x))
        if self.l2:
            penalty += self.l2 * tf.reduce_sum(tf.square(x))
        return penalty

    def get_config(self) -> dict[str, Any]:
        return {"l1": self.l1, "l2": self.l2}


class L1(L1L2):
    """``l1 * sum(|x|)`` (default 0.01)."""

    def __init__(self, l1: float = 0.01, **kwargs: Any) -> None:
        super().__init__(l1=kwargs.pop("l", l1))

    def get_config(self) -> dict[str, Any]:
        return {"l1": self.l1}


class L2(L1L2):
    """``l2 * sum(x ** 2)`` (default 0.01)."""

    def __init__(self, l2: float = 0.01, **kwargs: Any) -> None:
        super().__init__(l2=kwargs.pop("l", l2))

    def get_config(self) -> dict[str, Any]:
        return {"l2": self.l2}


def l1_l2(l1: float = 0.01, l2: float = 0.01) -> L1L2:
    """Keras's ``l1_l2`` (both 0.01 by default)."""
    return L1L2(l1=l1, l2=l2)


l1 = L1
l2 = L2

_BY_NAME = {"l1": L1, "l2": L2, "l1_l2": l1_l2, "L1": L1, "L2": L2, "L1L2": L1L2}


_REGISTRY = ObjectRegistry("regularizer", _BY_NAME)
get, serialize, deserialize = _REGISTRY.get, _REGISTRY.serialize, _REGISTRY.deserialize
