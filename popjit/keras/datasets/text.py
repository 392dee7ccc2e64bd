"""The word-index datasets (IMDB reviews, Reuters newswires): sequences of word ranks in a ``.npz``
of the Keras cache, turned into model inputs the way Keras does it."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from popjit.keras.datasets.cache import ORIGIN, find

Splits = tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


def load_npz(path: str, name: str, keys: tuple[str, ...], what: str) -> list[np.ndarray]:
    """The arrays ``keys`` of ``$KERAS_HOME/datasets/<path>`` (Keras's ``<name>``)."""
    file = find(path, ORIGIN + name, what)
    with np.load(file, allow_pickle=True) as f:
        missing = [k for k in keys if k not in f.files]
        if missing:
            raise ValueError(f"{file} is not Keras' {name}: it lacks {', '.join(missing)}")
        return [f[k] for k in keys]


def shuffled(rng: np.random.RandomState, *arrays: np.ndarray) -> list[np.ndarray]:
    """The arrays in one random order (Keras's shuffle of a split, with its seeded generator)."""
    order = np.arange(len(arrays[0]))
    rng.shuffle(order)
    return [a[order] for a in arrays]


def mark_and_offset(seqs: Any, start_char: int | None, index_from: int) -> list[list[int]]:
    """Each sequence's ranks shifted by ``index_from``, behind ``start_char`` when it is given."""
    if start_char is not None:
        return [[start_char] + [w + index_from for w in s] for s in seqs]
    return [[w + index_from for w in s] for s in seqs] if index_from else [list(s) for s in seqs]


def drop_long(maxlen: int | None, seqs: list[list[int]], labels: np.ndarray) -> tuple[list[list[int]], np.ndarray]:
    """Only the sequences shorter than ``maxlen`` (all of them when it is None or 0)."""
    if not maxlen:
        return seqs, labels
    keep = [i for i, s in enumerate(seqs) if len(s) < maxlen]
    return [seqs[i] for i in keep], labels[keep]


def limit_vocabulary(seqs: list[list[int]], num_words: int | None, skip_top: int,
                     oov_char: int | None) -> list[list[int]]:
    """Ranks outside ``[skip_top, num_words)`` replaced by ``oov_char`` (or dropped when it is None);
    ``num_words`` defaults to the largest rank seen."""
    if not num_words:
        num_words = max((max(s) for s in seqs if s), default=0)
    if oov_char is not None:
        return [[w if skip_top <= w < num_words else oov_char for w in s] for s in seqs]
    return [[w for w in s if skip_top <= w < num_words] for s in seqs]


def as_object_array(seqs: list[list[int]]) -> np.ndarray:
    """Lists of ranks as a 1-D object array (not stacked, even when all have the same length)."""
    out = np.empty(len(seqs), dtype=object)
    out[:] = seqs
    return out


def word_index(path: str, name: str, what: str) -> dict[str, int]:
    """The ``{word: rank}`` dictionary of a dataset's ``*_word_index.json``."""
    with open(find(path, ORIGIN + name, what)) as f:
        return json.load(f)
