"""``tf.data.experimental``: the constants and helpers popular programs use."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from popjit.data import AUTOTUNE, INFINITE_CARDINALITY, UNKNOWN_CARDINALITY, Dataset  # noqa: F401
from popjit.data.options import AutoShardPolicy  # noqa: F401
from popjit.errors import missing_api


def cardinality(dataset: Dataset) -> Any:
    """``dataset.cardinality()``: an int64 scalar tensor (-1 infinite, -2 unknown)."""
    return dataset.cardinality()


def enumerate_dataset(start: int = 0) -> Callable[[Dataset], Dataset]:
    """A transformation for ``Dataset.apply`` that pairs elements with a counter."""
    return lambda ds: ds.enumerate(start)


def __getattr__(name: str) -> None:
    if name.startswith("__"):
        raise AttributeError(name)

    raise missing_api("tf.data.experimental", name)
