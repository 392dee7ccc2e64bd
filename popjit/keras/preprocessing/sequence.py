"""``tf.keras.preprocessing.sequence``: padding variable-length sequences into one array."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["pad_sequences"]


def _sample_shape(sequences: list[Any]) -> tuple[int, ...]:
    """The shape of one step (``()`` for sequences of numbers), from the first non-empty sequence."""
    for s in sequences:
        if len(s):
            return np.asarray(s).shape[1:]
    return ()


def pad_sequences(sequences: Sequence[Any], maxlen: int | None = None, dtype: Any = "int32", padding: str = "pre",
                  truncating: str = "pre", value: Any = 0.0) -> np.ndarray:
    """Stack ``sequences`` into ``[len(sequences), maxlen, ...]``: longer ones cut and shorter ones filled
    with ``value``, at the front (``"pre"``, the default) or the back (``"post"``).

    ``maxlen`` defaults to the longest sequence. Keras's behaviour and errors.
    """
    if not hasattr(sequences, "__len__"):
        raise ValueError("`sequences` must be iterable.")
    lengths = []
    for s in sequences:
        if not hasattr(s, "__len__"):
            raise ValueError(f"`sequences` must be a list of iterables. Found non-iterable: {s}")
        lengths.append(len(s))
    maxlen = int(np.max(lengths)) if maxlen is None and lengths else int(maxlen or 0)
    is_text = np.issubdtype(np.dtype(dtype), np.str_) or np.issubdtype(np.dtype(dtype), np.object_)
    if isinstance(value, str) and not is_text:
        raise ValueError(f"`dtype` {dtype} is not compatible with `value`'s type: {type(value)}\nYou should set "
                         "`dtype=object` for variable length strings.")
    shape = _sample_shape(list(sequences))
    out = np.full((len(sequences), maxlen, *shape), value, dtype=dtype)
    for i, s in enumerate(sequences):
        if not len(s):
            continue
        if truncating == "pre":
            kept = s[-maxlen:] if maxlen else s[:0]
        elif truncating == "post":
            kept = s[:maxlen]
        else:
            raise ValueError(f'Truncating type "{truncating}" not understood')
        kept = np.asarray(kept, dtype=dtype)
        if kept.shape[1:] != shape:
            raise ValueError(f"Shape of sample {kept.shape[1:]} of sequence at position {i} is different from "
                             f"expected shape {shape}")
        if not len(kept):
            continue
        if padding == "post":
            out[i, :len(kept)] = kept
        elif padding == "pre":
            out[i, -len(kept):] = kept
        else:
            raise ValueError(f'Padding type "{padding}" not understood')
    return out
