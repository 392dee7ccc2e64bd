"""Element structures, specs and *chunks*: the values a dataset pipeline passes around.

A dataset's element is a nest (tuples, dicts, namedtuples) of tensors. Inside the pipeline an
element structure is kept flat: a :class:`Structure` holds the nest's tree (as
:mod:`popjit.frontend.nest` builds it), one :class:`~popjit.frontend.function.TensorSpec` per
leaf (a dimension may be None), and one *typical* concrete shape per leaf (the shape of a full
element; used to trace functions when a spec dimension is None).

A *chunk* is a list of NumPy arrays, one per leaf, each with the same leading dimension ``k >= 1``:
``k`` consecutive elements of one shape. Stages exchange chunks, so work is done on whole arrays.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from popjit import dtypes
from popjit.errors import InvalidArgumentError
from popjit.frontend import nest
from popjit.frontend.convert import array_dtype, convert_to_tensor
from popjit.frontend.function import TensorSpec
from popjit.frontend.tensor import Tensor
from popjit.frontend.variables import Variable

Chunk = list[np.ndarray]


@dataclass(frozen=True)
class Structure:
    """The flat description of a dataset element."""

    tree: Any
    specs: tuple[TensorSpec, ...]
    typical: tuple[tuple[int, ...], ...]

    @property
    def n_leaves(self) -> int:
        return len(self.specs)

    def element_spec(self) -> Any:
        """The nest of TensorSpecs that ``Dataset.element_spec`` returns."""
        return nest.unflatten(self.tree, list(self.specs))

    def pack(self, leaves: Sequence[Any]) -> Any:
        """Rebuild the user's nest from flat leaves."""
        return nest.unflatten(self.tree, list(leaves))

    def is_tuple(self) -> bool:
        """Whether the element is a (non-named) tuple, which ``map`` unpacks into positional arguments."""
        return isinstance(self.tree, tuple) and self.tree[0] == "tuple"


def spec_of(array: np.ndarray, leading: int = 0) -> TensorSpec:
    """The TensorSpec of ``array`` with its first ``leading`` dimensions dropped."""
    return TensorSpec(array.shape[leading:], dtypes.as_dtype(array.dtype))


def structure_of_chunk(tree: Any, chunk: Chunk) -> Structure:
    """The structure of the elements of a chunk (every dimension known)."""
    specs = tuple(spec_of(a, 1) for a in chunk)
    return Structure(tree, specs, tuple(a.shape[1:] for a in chunk))


def merge_shapes(a: tuple[int | None, ...], b: tuple[int | None, ...]) -> tuple[int | None, ...] | None:
    """The most specific shape compatible with both, or None when the ranks differ."""
    if len(a) != len(b):
        return None
    return tuple(x if x == y else None for x, y in zip(a, b))


# ------------------------------------------------------------------------------------------------
# Turning user values into leaves


def _leaf_array(value: Any) -> np.ndarray:
    """A leaf value as an array with TensorFlow's dtype rules (Python floats float32, ints int32)."""
    if isinstance(value, Variable):
        value = value.read_value()
    if isinstance(value, Tensor):
        return value.numpy()
    try:
        if isinstance(value, np.ndarray):
            array_dtype(value)  # refuse unsupported dtypes with popjit's message
            return value
        return convert_to_tensor(value).numpy()
    except TypeError as e:
        raise TypeError(f"tf.data cannot make a tensor from {type(value).__name__} {value!r}: {e}") from None


def _is_structure(value: Any) -> bool:
    """Tuples, namedtuples and dicts are structure; lists are tensors (as in ``tf.data``)."""
    return isinstance(value, (tuple, dict))


def _lists_to_arrays(value: Any) -> Any:
    """The nest with every non-structure value (lists included) converted to an array."""
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*[_lists_to_arrays(v) for v in value])
    if isinstance(value, tuple):
        return tuple(_lists_to_arrays(v) for v in value)
    if isinstance(value, dict):
        return type(value)((k, _lists_to_arrays(v)) for k, v in value.items())
    return _leaf_array(value)


def flatten_value(value: Any) -> tuple[list[np.ndarray], Any]:
    """The leaves (as arrays) and tree of a user's nested value."""
    if not _is_structure(value):
        return [_leaf_array(value)], None
    return nest.flatten_with_tree(_lists_to_arrays(value))


# ------------------------------------------------------------------------------------------------
# Chunks


def chunk_len(chunk: Chunk) -> int:
    return int(chunk[0].shape[0]) if chunk else 0


def chunk_slice(chunk: Chunk, start: int, stop: int) -> Chunk:
    return [a[start:stop] for a in chunk]


def concat_chunks(chunks: Sequence[Chunk]) -> Chunk:
    """One chunk from several of the same element shapes (no copy for a single chunk)."""
    if len(chunks) == 1:
        return chunks[0]
    n = len(chunks[0])
    for c in chunks[1:]:
        for k in range(n):
            if c[k].shape[1:] != chunks[0][k].shape[1:]:
                raise InvalidArgumentError(
                    f"Cannot batch tensors with different shapes in component {k}. First element had shape "
                    f"{list(chunks[0][k].shape[1:])} and element {len(chunks[0][k])} had shape "
                    f"{list(c[k].shape[1:])}."
                )
    return [np.concatenate([c[k] for c in chunks]) for k in range(n)]


def same_shapes(a: Chunk, b: Chunk) -> bool:
    return all(x.shape[1:] == y.shape[1:] for x, y in zip(a, b))


def rows_to_chunk(rows: Sequence[Sequence[Any]], n_leaves: int) -> Chunk:
    """Stack elements given as per-element leaf lists into a chunk."""
    return [np.stack([np.asarray(r[k]) for r in rows]) for k in range(n_leaves)]


def readonly(chunk: Chunk) -> Chunk:
    """Views that cannot be written, so users cannot change a dataset's source arrays through them."""
    out = []
    for a in chunk:
        v = a.view()
        v.flags.writeable = False
        out.append(v)
    return out
