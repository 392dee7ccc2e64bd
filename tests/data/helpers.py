"""Shared helpers of the tf.data tests."""

from __future__ import annotations

from typing import Any

import popjit.tensorflow as tf


def as_list(ds: Any) -> list:
    """The dataset's elements, as NumPy values."""
    return list(ds.as_numpy_iterator())


def spec(shape: Any, dtype: Any) -> Any:
    return tf.TensorSpec(shape, dtype)
