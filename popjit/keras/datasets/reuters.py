"""``tf.keras.datasets.reuters``: the Reuters newswire topics from the Keras cache (never downloaded)."""

from __future__ import annotations

from typing import Any

import numpy as np

from popjit.keras.datasets import text

__all__ = ["get_word_index", "load_data"]


def load_data(path: str = "reuters.npz", num_words: int | None = None, skip_top: int = 0, maxlen: int | None = None,
              test_split: float = 0.2, seed: int = 113, start_char: int | None = 1, oov_char: int | None = 2,
              index_from: int = 3, **kwargs: Any) -> text.Splits:
    """``((x_train, y_train), (x_test, y_test))``: newswires as lists of word ranks and their topic (46
    topics), shuffled with ``seed`` and split ``test_split``, transformed as :func:`imdb.load_data` does."""
    if kwargs:
        raise TypeError(f"Unrecognized keyword arguments: {kwargs}")
    xs, labels = text.load_npz(path, "reuters.npz", ("x", "y"), "tf.keras.datasets.reuters.load_data()")
    xs, labels = text.shuffled(np.random.RandomState(seed), xs, labels)
    seqs = text.mark_and_offset(xs, start_char, index_from)
    seqs, labels = text.drop_long(maxlen, seqs, labels)
    seqs = text.limit_vocabulary(seqs, num_words, skip_top, oov_char)
    cut = int(len(seqs) * (1 - test_split))
    return (text.as_object_array(seqs[:cut]), labels[:cut]), (text.as_object_array(seqs[cut:]), labels[cut:])


def get_word_index(path: str = "reuters_word_index.json") -> dict[str, int]:
    """``{word: rank}`` of the newswires' vocabulary."""
    return text.word_index(path, "reuters_word_index.json", "tf.keras.datasets.reuters.get_word_index()")
