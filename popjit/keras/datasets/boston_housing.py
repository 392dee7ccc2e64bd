"""``tf.keras.datasets.boston_housing``: the Boston house prices from the Keras cache (never downloaded)."""

from __future__ import annotations

import numpy as np

from popjit.keras.datasets import text

__all__ = ["load_data"]


def load_data(path: str = "boston_housing.npz", test_split: float = 0.2, seed: int = 113
              ) -> text.Splits:
    """``((x_train, y_train), (x_test, y_test))``: 13 features per house and its price, shuffled with
    ``seed`` and split ``test_split`` (the first ``1 - test_split`` for training)."""
    if not 0 <= test_split < 1:
        raise ValueError(f"test_split must be in [0, 1), got {test_split}")
    x, y = text.load_npz(path, "boston_housing.npz", ("x", "y"), "tf.keras.datasets.boston_housing.load_data()")
    x, y = text.shuffled(np.random.RandomState(seed), x, y)
    cut = int(len(x) * (1 - test_split))
    return (np.array(x[:cut]), np.array(y[:cut])), (np.array(x[cut:]), np.array(y[cut:]))
