"""``tf.keras.datasets.imdb``: the IMDB movie reviews from the Keras cache (never downloaded)."""

from __future__ import annotations

from typing import Any

import numpy as np

from popjit.keras.datasets import text

__all__ = ["get_word_index", "load_data"]


def load_data(path: str = "imdb.npz", num_words: int | None = None, skip_top: int = 0, maxlen: int | None = None,
              seed: int = 113, start_char: int | None = 1, oov_char: int | None = 2, index_from: int = 3,
              **kwargs: Any) -> text.Splits:
    """``((x_train, y_train), (x_test, y_test))``: reviews as lists of word ranks (an object array)
    and 0/1 sentiment labels, shuffled with ``seed``, as Keras's ``imdb.load_data`` returns them:
    ranks offset by ``index_from`` behind ``start_char``, reviews of ``maxlen`` words or more
    dropped, ranks outside ``[skip_top, num_words)`` turned into ``oov_char``."""
    if kwargs:
        raise TypeError(f"Unrecognized keyword arguments: {kwargs}")
    x_train, y_train, x_test, y_test = text.load_npz(path, "imdb.npz", ("x_train", "y_train", "x_test", "y_test"),
                                                     "tf.keras.datasets.imdb.load_data()")
    rng = np.random.RandomState(seed)
    x_train, y_train = text.shuffled(rng, x_train, y_train)
    x_test, y_test = text.shuffled(rng, x_test, y_test)
    train = text.mark_and_offset(x_train, start_char, index_from)
    test = text.mark_and_offset(x_test, start_char, index_from)
    train, y_train = text.drop_long(maxlen, train, y_train)
    test, y_test = text.drop_long(maxlen, test, y_test)
    if maxlen and (not train or not test):
        raise ValueError(f"After filtering for sequences shorter than maxlen={maxlen}, no sequence was kept. "
                         "Increase maxlen.")
    seqs = text.limit_vocabulary(train + test, num_words, skip_top, oov_char)
    return (text.as_object_array(seqs[:len(train)]), y_train), (text.as_object_array(seqs[len(train):]), y_test)


def get_word_index(path: str = "imdb_word_index.json") -> dict[str, int]:
    """``{word: rank}`` (rank 1 is the most frequent word; ``load_data`` offsets ranks by ``index_from``)."""
    return text.word_index(path, "imdb_word_index.json", "tf.keras.datasets.imdb.get_word_index()")
