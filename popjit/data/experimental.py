"""``tf.data.experimental``: the constants and helpers popular programs use (re-exported by the facade)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from popjit.data.core import AUTOTUNE
from popjit.data.core import INFINITE as INFINITE_CARDINALITY
from popjit.data.core import UNKNOWN as UNKNOWN_CARDINALITY
from popjit.data.dataset import Dataset
from popjit.data.options import AutoShardPolicy


def cardinality(dataset: Dataset) -> Any:
    """``dataset.cardinality()``: an int64 scalar tensor (-1 infinite, -2 unknown)."""
    return dataset.cardinality()


def enumerate_dataset(start: int = 0) -> Callable[[Dataset], Dataset]:
    """A transformation for ``Dataset.apply`` that pairs elements with a counter."""
    return lambda ds: ds.enumerate(start)

__all__ = ["AUTOTUNE", "INFINITE_CARDINALITY", "UNKNOWN_CARDINALITY", "AutoShardPolicy", "cardinality",
           "enumerate_dataset"]
