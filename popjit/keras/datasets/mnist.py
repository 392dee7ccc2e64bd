"""``tf.keras.datasets.mnist``: the MNIST digits from the Keras cache (never downloaded)."""

from __future__ import annotations

import numpy as np

from popjit.keras.datasets.cache import ORIGIN, find

_KEYS = ("x_train", "y_train", "x_test", "y_test")

__all__ = ["load_data"]


def load_data(path: str = "mnist.npz") -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """``((x_train, y_train), (x_test, y_test))`` as uint8 arrays from ``$KERAS_HOME/datasets/<path>``.

    ``path`` is relative to the Keras dataset cache, or absolute. The file is Keras' ``mnist.npz``
    (arrays ``x_train`` [60000, 28, 28], ``y_train`` [60000], ``x_test``, ``y_test``).
    """
    file = find(path, ORIGIN + "mnist.npz", "tf.keras.datasets.mnist.load_data()")
    with np.load(file, allow_pickle=False) as f:
        missing = [k for k in _KEYS if k not in f.files]
        if missing:
            raise ValueError(f"{file} is not Keras' mnist.npz: it lacks {', '.join(missing)} (it has "
                             f"{', '.join(f.files)})")
        x_train, y_train, x_test, y_test = (np.asarray(f[k]) for k in _KEYS)
    return (x_train, y_train), (x_test, y_test)
