"""tf.keras.datasets loaders reading real files from a temporary Keras cache (nothing is downloaded)."""

from __future__ import annotations

import gzip
import os
import struct

import numpy as np
import pytest

import popjit.tensorflow as tf
from popjit.keras.datasets import fashion_mnist, mnist


@pytest.fixture
def keras_home(tmp_path, monkeypatch):
    monkeypatch.setenv("KERAS_HOME", str(tmp_path))
    (tmp_path / "datasets").mkdir()
    return tmp_path


def small_mnist(n_train: int = 12, n_test: int = 5) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "x_train": rng.integers(0, 256, (n_train, 28, 28)).astype(np.uint8),
        "y_train": rng.integers(0, 10, n_train).astype(np.uint8),
        "x_test": rng.integers(0, 256, (n_test, 28, 28)).astype(np.uint8),
        "y_test": rng.integers(0, 10, n_test).astype(np.uint8),
    }


def write_idx(path, array: np.ndarray) -> None:
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(struct.pack(">i", d) for d in array.shape)
    with gzip.open(path, "wb") as f:
        f.write(header + array.astype(np.uint8).tobytes())


def test_mnist_reads_the_keras_cache(keras_home):
    arrays = small_mnist()
    np.savez(keras_home / "datasets" / "mnist.npz", **arrays)
    (x_train, y_train), (x_test, y_test) = tf.keras.datasets.mnist.load_data()
    for got, key in zip((x_train, y_train, x_test, y_test), ("x_train", "y_train", "x_test", "y_test")):
        assert got.dtype == np.uint8
        np.testing.assert_array_equal(got, arrays[key])


def test_mnist_path_argument_relative_and_absolute(keras_home, tmp_path):
    arrays = small_mnist(3, 2)
    np.savez(keras_home / "datasets" / "digits.npz", **arrays)
    assert mnist.load_data("digits.npz")[0][0].shape == (3, 28, 28)
    elsewhere = tmp_path / "other.npz"
    np.savez(elsewhere, **arrays)
    assert mnist.load_data(str(elsewhere))[1][1].shape == (2,)


def test_missing_mnist_says_where_to_put_it(keras_home):
    expected = os.path.join(str(keras_home), "datasets", "mnist.npz")
    with pytest.raises(FileNotFoundError) as info:
        mnist.load_data()
    text = str(info.value)
    assert expected in text
    assert "https://storage.googleapis.com/tensorflow/tf-keras-datasets/mnist.npz" in text
    assert "does not download" in text


def test_an_npz_without_the_keras_arrays_is_refused(keras_home):
    np.savez(keras_home / "datasets" / "mnist.npz", images=np.zeros(3))
    with pytest.raises(ValueError, match="x_train"):
        mnist.load_data()


def test_fashion_mnist_reads_the_four_idx_files(keras_home):
    arrays = small_mnist(7, 4)
    folder = keras_home / "datasets" / "fashion-mnist"
    folder.mkdir()
    write_idx(folder / "train-images-idx3-ubyte.gz", arrays["x_train"])
    write_idx(folder / "train-labels-idx1-ubyte.gz", arrays["y_train"])
    write_idx(folder / "t10k-images-idx3-ubyte.gz", arrays["x_test"])
    write_idx(folder / "t10k-labels-idx1-ubyte.gz", arrays["y_test"])
    (x_train, y_train), (x_test, y_test) = tf.keras.datasets.fashion_mnist.load_data()
    assert x_train.shape == (7, 28, 28) and y_test.shape == (4,) and x_train.dtype == np.uint8
    np.testing.assert_array_equal(x_test, arrays["x_test"])
    np.testing.assert_array_equal(y_train, arrays["y_train"])


def test_missing_fashion_mnist_file_is_named(keras_home):
    with pytest.raises(FileNotFoundError) as info:
        fashion_mnist.load_data()
    assert os.path.join(str(keras_home), "datasets", "fashion-mnist", "train-labels-idx1-ubyte.gz") in str(info.value)


def test_a_file_that_is_not_idx_is_refused(keras_home):
    folder = keras_home / "datasets" / "fashion-mnist"
    folder.mkdir()
    for name in fashion_mnist.FILES.values():
        with gzip.open(folder / name, "wb") as f:
            f.write(b"not an idx file")
    with pytest.raises(ValueError, match="IDX"):
        fashion_mnist.load_data()


def test_the_seed_loads_mnist_into_a_dataset(keras_home):
    np.savez(keras_home / "datasets" / "mnist.npz", **small_mnist(64, 1))
    (x_train, y_train), _ = mnist.load_data()
    ds = tf.data.Dataset.from_tensor_slices((x_train / 255.0, y_train)).batch(32, drop_remainder=True)
    assert ds.element_spec[0] == tf.TensorSpec((32, 28, 28), tf.float64) and len(ds) == 2
