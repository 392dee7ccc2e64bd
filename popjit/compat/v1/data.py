"""``tf.compat.v1.data``: TensorFlow 2's ``tf.data`` plus TF1's iterator constructors."""

from __future__ import annotations

import importlib
from typing import Any

from popjit.data.iterator import GraphIterator


def make_one_shot_iterator(dataset: Any) -> GraphIterator:
    """An iterator over ``dataset`` giving one element per session run (TF1 graph mode)."""
    return dataset.make_one_shot_iterator()


def make_initializable_iterator(dataset: Any, shared_name: str | None = None) -> GraphIterator:
    """An iterator over ``dataset`` that starts when a session runs its ``initializer`` (TF1 graph mode)."""
    return dataset.make_initializable_iterator(shared_name)


__all__ = ["make_initializable_iterator", "make_one_shot_iterator"]


def __getattr__(name: str) -> Any:
    """Every other name is ``tf.data``'s."""
    if name.startswith("__"):
        raise AttributeError(name)
    return getattr(importlib.import_module("popjit.tensorflow.data"), name)  # lazily: the facade imports compat
