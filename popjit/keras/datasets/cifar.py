"""Reading the CIFAR archives Keras keeps in its cache (``cifar-10-batches-py``, ``cifar-100-python``):
Python pickles of ``[N, 3072]`` uint8 rows and their labels, in an extracted directory or still in
the downloaded ``.tar.gz``."""

from __future__ import annotations

import os
import pickle
import tarfile
from typing import Any

import numpy as np

from popjit.keras.datasets.cache import _candidates, find

CIFAR_ORIGIN = "https://www.cs.toronto.edu/~kriz/"

Split = tuple[np.ndarray, np.ndarray]


def _decode_keys(batch: dict[Any, Any]) -> dict[str, Any]:
    return {(k.decode("utf8") if isinstance(k, bytes) else k): v for k, v in batch.items()}


def _read_batch(raw: bytes, label_key: str) -> Split:
    """Images ``[N, 3, 32, 32]`` and labels ``[N]`` from one pickled batch."""
    batch = _decode_keys(pickle.loads(raw, encoding="bytes"))
    data = np.asarray(batch["data"], dtype=np.uint8)
    return data.reshape(data.shape[0], 3, 32, 32), np.asarray(batch[label_key], dtype=np.uint8)


def read_batches(dirname: str, archive: str, names: list[str], label_key: str, what: str) -> list[Split]:
    """The batches ``names`` from ``$KERAS_HOME/datasets/<dirname>/`` or from ``<dirname>.tar.gz``."""
    # Keras 2 extracts to <dirname>/, Keras 3 to <dirname>-target/<dirname>/
    for directory in _candidates(dirname) + _candidates(os.path.join(f"{dirname}-target", dirname)):
        if os.path.isdir(directory):
            out = []
            for name in names:
                with open(os.path.join(directory, name), "rb") as f:
                    out.append(_read_batch(f.read(), label_key))
            return out
    tar_path = find(f"{dirname}.tar.gz", CIFAR_ORIGIN + archive, what)
    with tarfile.open(tar_path, "r:gz") as tar:
        members = {os.path.basename(m.name): m for m in tar.getmembers() if m.isfile()}
        return [_read_batch(tar.extractfile(members[name]).read(), label_key) for name in names]


def channels_last(batches: list[Split]) -> Split:
    """The batches joined, images as ``[N, 32, 32, 3]`` and labels as ``[N, 1]``, as Keras returns them."""
    images = np.concatenate([b[0] for b in batches]).transpose(0, 2, 3, 1)
    labels = np.concatenate([b[1] for b in batches]).reshape(-1, 1)
    return images, labels
