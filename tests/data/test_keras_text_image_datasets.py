"""tf.keras.datasets cifar10, cifar100, imdb, reuters and boston_housing read real files from a
temporary Keras cache. The word-index and housing loaders are compared with stock Keras's own code
on the same file (its download function pointed at that file); CIFAR, whose stock loader wants the
full-size archive, against the pixels written."""

from __future__ import annotations

import io
import json
import os
import pickle
import tarfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import popjit.tensorflow as tf
from tests.data.test_keras_datasets import keras_home  # noqa: F401  (the fixture)


def cifar_batch(n: int, seed: int, label_keys: tuple[str, ...]) -> dict[bytes, Any]:
    rng = np.random.default_rng(seed)
    batch: dict[bytes, Any] = {b"data": rng.integers(0, 256, (n, 3072)).astype(np.uint8)}
    for key in label_keys:
        batch[key.encode()] = [int(v) for v in rng.integers(0, 100, n)]
    return batch


def write_cifar(root: Path, dirname: str, batches: dict[str, dict], as_tar: bool) -> None:
    if not as_tar:
        (root / dirname).mkdir(parents=True)
        for name, batch in batches.items():
            (root / dirname / name).write_bytes(pickle.dumps(batch))
        return
    with tarfile.open(root / f"{dirname}.tar.gz", "w:gz") as tar:
        for name, batch in batches.items():
            raw = pickle.dumps(batch)
            info = tarfile.TarInfo(f"{dirname}/{name}")
            info.size = len(raw)
            tar.addfile(info, io.BytesIO(raw))


def expected_cifar(batches: list[dict], key: str) -> tuple[np.ndarray, np.ndarray]:
    """Keras's layout, element by element: x[n, h, w, c] = data[n, c*1024 + h*32 + w]; labels [N, 1]."""
    data = np.concatenate([b[b"data"] for b in batches])
    x = np.empty((len(data), 32, 32, 3), np.uint8)
    for c in range(3):
        x[..., c] = data[:, c * 1024:(c + 1) * 1024].reshape(-1, 32, 32)
    y = np.concatenate([b[key.encode()] for b in batches]).astype(np.uint8).reshape(-1, 1)
    return x, y


@pytest.mark.parametrize("as_tar", [False, True], ids=["extracted", "archive"])
def test_cifar10_reads_the_batches_channels_last(keras_home: Path, as_tar: bool) -> None:  # noqa: F811
    batches = {f"data_batch_{i}": cifar_batch(3, i, ("labels",)) for i in range(1, 6)}
    batches["test_batch"] = cifar_batch(2, 9, ("labels",))
    write_cifar(keras_home / "datasets", "cifar-10-batches-py", batches, as_tar)
    (x_train, y_train), (x_test, y_test) = tf.keras.datasets.cifar10.load_data()
    want_x, want_y = expected_cifar([batches[f"data_batch_{i}"] for i in range(1, 6)], "labels")
    np.testing.assert_array_equal(x_train, want_x)
    np.testing.assert_array_equal(y_train, want_y)
    assert x_train.shape == (15, 32, 32, 3) and x_test.shape == (2, 32, 32, 3) and y_test.shape == (2, 1)
    assert x_train.dtype == y_train.dtype == np.uint8


@pytest.mark.parametrize("mode", ["fine", "coarse"])
def test_cifar100_labels_by_mode_and_bad_mode(keras_home: Path, mode: str) -> None:  # noqa: F811
    batches = {"train": cifar_batch(4, 1, ("fine_labels", "coarse_labels")),
               "test": cifar_batch(2, 2, ("fine_labels", "coarse_labels"))}
    write_cifar(keras_home / "datasets", "cifar-100-python", batches, as_tar=False)
    (x_train, y_train), _ = tf.keras.datasets.cifar100.load_data(label_mode=mode)
    want_x, want_y = expected_cifar([batches["train"]], f"{mode}_labels")
    np.testing.assert_array_equal(x_train, want_x)
    np.testing.assert_array_equal(y_train, want_y)
    with pytest.raises(ValueError, match='`label_mode` must be one of `"fine"`, `"coarse"`'):
        tf.keras.datasets.cifar100.load_data(label_mode="medium")


def test_missing_cifar_says_where_to_put_it(keras_home: Path) -> None:  # noqa: F811
    with pytest.raises(FileNotFoundError, match=r"cifar-10-python\.tar\.gz"):
        tf.keras.datasets.cifar10.load_data()


def word_sequences(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    seqs = [[int(w) for w in rng.integers(1, 40, rng.integers(1, 12))] for _ in range(n)]  # as in Keras's files
    out = np.empty(n, dtype=object)
    out[:] = seqs
    return out


def stock_loader(real_tf: Any, monkeypatch: Any, module: str, path: Path) -> Any:
    """Stock Keras's ``load_data`` of ``module``, its download function pointed at ``path``."""
    import importlib

    mod = importlib.import_module(f"keras.src.datasets.{module}")
    monkeypatch.setattr(mod, "get_file", lambda *args, **kwargs: str(path))
    return mod


IMDB_CASES = [{}, {"num_words": 20, "skip_top": 2}, {"maxlen": 8, "seed": 5}, {"start_char": None, "index_from": 0},
              {"oov_char": None, "num_words": 15}, {"start_char": None, "index_from": 2, "num_words": 30}]


@pytest.mark.parametrize("kwargs", IMDB_CASES, ids=[str(c) for c in IMDB_CASES])
def test_imdb_equals_stock_keras(keras_home: Path, real_tf: Any, monkeypatch: Any, kwargs: dict) -> None:  # noqa: F811
    path = keras_home / "datasets" / "imdb.npz"
    rng = np.random.default_rng(3)
    np.savez(path, x_train=word_sequences(20, 1), y_train=rng.integers(0, 2, 20), x_test=word_sequences(9, 2),
             y_test=rng.integers(0, 2, 9))
    ours = tf.keras.datasets.imdb.load_data(**kwargs)
    theirs = stock_loader(real_tf, monkeypatch, "imdb", path).load_data(**kwargs)
    for (ox, oy), (tx, ty) in zip(ours, theirs):
        assert [list(s) for s in ox] == [list(s) for s in tx]
        np.testing.assert_array_equal(oy, ty)


@pytest.mark.parametrize("kwargs", [{}, {"test_split": 0.5, "num_words": 25}, {"maxlen": 6}])
def test_reuters_equals_stock_keras(keras_home: Path, real_tf: Any, monkeypatch: Any, kwargs: dict) -> None:  # noqa: F811
    path = keras_home / "datasets" / "reuters.npz"
    np.savez(path, x=word_sequences(25, 4), y=np.random.default_rng(5).integers(0, 46, 25))
    ours = tf.keras.datasets.reuters.load_data(**kwargs)
    theirs = stock_loader(real_tf, monkeypatch, "reuters", path).load_data(**kwargs)
    for (ox, oy), (tx, ty) in zip(ours, theirs):
        assert [list(s) for s in ox] == [list(s) for s in tx]
        np.testing.assert_array_equal(oy, ty)


def test_boston_housing_equals_stock_keras(keras_home: Path, real_tf: Any, monkeypatch: Any) -> None:  # noqa: F811
    path = keras_home / "datasets" / "boston_housing.npz"
    rng = np.random.default_rng(6)
    np.savez(path, x=rng.normal(size=(30, 13)), y=rng.normal(size=30))
    ours = tf.keras.datasets.boston_housing.load_data(test_split=0.3, seed=4)
    theirs = stock_loader(real_tf, monkeypatch, "boston_housing", path).load_data(test_split=0.3, seed=4)
    for (ox, oy), (tx, ty) in zip(ours, theirs):
        np.testing.assert_array_equal(ox, tx)
        np.testing.assert_array_equal(oy, ty)


def test_word_index_and_maxlen_errors(keras_home: Path) -> None:  # noqa: F811
    (keras_home / "datasets" / "imdb_word_index.json").write_text(json.dumps({"the": 1, "film": 19}))
    assert tf.keras.datasets.imdb.get_word_index() == {"the": 1, "film": 19}
    np.savez(keras_home / "datasets" / "imdb.npz", x_train=word_sequences(4, 1), y_train=np.zeros(4),
             x_test=word_sequences(2, 2), y_test=np.zeros(2))
    with pytest.raises(ValueError, match=r"no sequence was kept\. Increase maxlen"):
        tf.keras.datasets.imdb.load_data(maxlen=1)
    os.remove(keras_home / "datasets" / "imdb_word_index.json")
    with pytest.raises(FileNotFoundError, match=r"imdb_word_index\.json"):
        tf.keras.datasets.imdb.get_word_index()
