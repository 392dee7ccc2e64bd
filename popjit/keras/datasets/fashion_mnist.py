"""``tf.keras.datasets.fashion_mnist``: Fashion-MNIST from the Keras cache (never downloaded)."""

from __future__ import annotations

import os

import numpy as np

from popjit.keras.datasets.cache import ORIGIN, find, read_idx

SUBDIR = "fashion-mnist"
FILES = {
    "y_train": "train-labels-idx1-ubyte.gz",
    "x_train": "train-images-idx3-ubyte.gz",
    "y_test": "t10k-labels-idx1-ubyte.gz",
    "x_test": "t10k-images-idx3-ubyte.gz",
}

__all__ = ["load_data"]


def load_data() -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """``((x_train, y_train), (x_test, y_test))`` as uint8 arrays (images [n, 28, 28], labels [n]).

    Reads the four gzipped IDX files Keras keeps in ``$KERAS_HOME/datasets/fashion-mnist/``.
    """
    arrays = {}
    for key, name in FILES.items():
        path = find(os.path.join(SUBDIR, name), ORIGIN + name, "tf.keras.datasets.fashion_mnist.load_data()")
        arrays[key] = read_idx(path)
    for split in ("train", "test"):
        if len(arrays[f"x_{split}"]) != len(arrays[f"y_{split}"]):
            raise ValueError(f"fashion-mnist {split} images and labels differ in count: "
                             f"{len(arrays[f'x_{split}'])} vs {len(arrays[f'y_{split}'])}")
    return (arrays["x_train"], arrays["y_train"]), (arrays["x_test"], arrays["y_test"])
