"""Source datasets: ``from_tensor_slices``, ``from_tensors``, ``range`` and ``from_generator``.

The first three offer random access, so slices of them are NumPy views (read-only, so a user
cannot change the dataset through an element) and shuffling gathers rows directly. The source
arrays are referenced, not copied: NumPy arrays given to ``from_tensor_slices`` should not be
modified while the dataset is in use (TensorFlow copies them into a tensor; popjit saves the
memory, which matters for MNIST-sized arrays).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from popjit import dtypes
from popjit.data.core import INFINITE, UNKNOWN, ChunkIter, RandomAccess
from popjit.data.dataset import Dataset
from popjit.data.structure import Chunk, Structure, flatten_value, readonly, spec_of
from popjit.errors import InvalidArgumentError
from popjit.frontend import nest
from popjit.frontend.function import TensorSpec


class ArrayRA(RandomAccess):
    """Rows of arrays that share their first dimension."""

    def __init__(self, leaves: list[np.ndarray]) -> None:
        self.leaves = leaves
        self.length = int(leaves[0].shape[0]) if leaves else 0

    def gather(self, idx: np.ndarray) -> Chunk:
        return [np.take(a, idx, axis=0) for a in self.leaves]

    def slice(self, start: int, stop: int) -> Chunk:
        return readonly([a[start:stop] for a in self.leaves])


class TensorSlicesDataset(Dataset):
    """``Dataset.from_tensor_slices``: element ``i`` is row ``i`` of every leaf."""

    def __init__(self, tensors: Any) -> None:
        leaves, tree = flatten_value(tensors)
        if not leaves:
            raise ValueError("from_tensor_slices needs at least one tensor")
        for a in leaves:
            if a.ndim == 0:
                raise InvalidArgumentError("Unbatching a tensor is only supported for rank >= 1")
        n = leaves[0].shape[0]
        for a in leaves[1:]:
            if a.shape[0] != n:
                raise InvalidArgumentError(f"Dimensions {n} and {a.shape[0]} are not compatible")
        self._leaves = leaves
        self._structure = Structure(tree, tuple(spec_of(a, 1) for a in leaves), tuple(a.shape[1:] for a in leaves))

    def _random_access(self) -> RandomAccess:
        return ArrayRA(self._leaves)

    def _cardinality(self) -> int:
        return int(self._leaves[0].shape[0])


class _RepeatedRA(RandomAccess):
    """The single element of ``from_tensors``."""

    def __init__(self, leaves: list[np.ndarray]) -> None:
        self.leaves = leaves
        self.length = 1

    def gather(self, idx: np.ndarray) -> Chunk:
        return [np.repeat(a[None], len(idx), axis=0) for a in self.leaves]

    def slice(self, start: int, stop: int) -> Chunk:
        return readonly([np.broadcast_to(a[None], (stop - start, *a.shape)) for a in self.leaves])


class TensorsDataset(Dataset):
    """``Dataset.from_tensors``: one element, the whole value."""

    def __init__(self, tensors: Any) -> None:
        leaves, tree = flatten_value(tensors)
        self._leaves = leaves
        self._structure = Structure(tree, tuple(spec_of(a) for a in leaves), tuple(a.shape for a in leaves))

    def _random_access(self) -> RandomAccess:
        return _RepeatedRA(self._leaves)

    def _cardinality(self) -> int:
        return 1


class _RangeRA(RandomAccess):
    def __init__(self, start: int, step: int, length: int | None, dtype: np.dtype) -> None:
        self.start, self.step, self.length, self.dtype = start, step, length, dtype

    def gather(self, idx: np.ndarray) -> Chunk:
        return [(self.start + idx * self.step).astype(self.dtype)]

    def slice(self, start: int, stop: int) -> Chunk:
        first = self.start + start * self.step
        return [np.arange(first, first + (stop - start) * self.step, self.step, dtype=np.int64).astype(self.dtype)]


class RangeDataset(Dataset):
    """``Dataset.range``: like Python's ``range``, as int64 scalars by default."""

    def __init__(self, *args: int, output_type: Any = None) -> None:
        if not 1 <= len(args) <= 3:
            raise TypeError(f"Dataset.range() takes 1 to 3 positional arguments, got {len(args)}")
        start, stop, step = (0, args[0], 1) if len(args) == 1 else (args[0], args[1], args[2] if len(args) == 3 else 1)
        if step == 0:
            raise InvalidArgumentError("step must be a non-zero integer.")
        self._range = range(start, stop, step)
        self._dtype = dtypes.as_dtype(output_type if output_type is not None else dtypes.int64)
        self._structure = Structure(None, (TensorSpec((), self._dtype),), ((),))

    def _random_access(self) -> RandomAccess:
        r = self._range
        return _RangeRA(r.start, r.step, len(r), self._dtype.np)

    def _cardinality(self) -> int:
        return len(self._range)


class CounterDataset(Dataset):
    """``start, start + 1, ...`` forever as int64 (the counter of ``enumerate``)."""

    def __init__(self, start: int) -> None:
        self._start = start
        self._structure = Structure(None, (TensorSpec((), dtypes.int64),), ((),))

    def _random_access(self) -> RandomAccess:
        return _RangeRA(self._start, 1, None, np.dtype(np.int64))

    def _cardinality(self) -> int:
        return INFINITE


# ------------------------------------------------------------------------------------------------
# from_generator


def _generator_structure(output_types: Any, output_shapes: Any, output_signature: Any) -> Structure:
    if output_signature is not None:
        specs, tree = nest.flatten_with_tree(output_signature)
    elif output_types is not None:
        types, tree = nest.flatten_with_tree(output_types)
        shapes = nest.flatten(output_shapes) if output_shapes is not None else [None] * len(types)
        if output_shapes is not None and isinstance(output_shapes, (list, tuple)) and len(types) == 1:
            shapes = [output_shapes]  # one component whose shape is given as a list of dims
        specs = [TensorSpec(s, t) for t, s in zip(types, shapes)]
    else:
        raise TypeError("from_generator needs output_signature (or output_types)")
    for s in specs:
        if not isinstance(s, TensorSpec):
            raise TypeError(f"output_signature must contain tf.TensorSpec objects, not {s!r}")
        if s.shape is None:
            raise InvalidArgumentError("popjit's from_generator needs the rank of every component: give a shape "
                                       "(dimensions may be None)")
    typical = tuple(tuple(1 if d is None else d for d in s.shape) for s in specs)
    return Structure(tree, tuple(specs), typical)


class _GeneratorIter(ChunkIter):
    def __init__(self, ds: GeneratorDataset) -> None:
        self.ds = ds
        self.it = iter(ds._generator(*ds._args))
        self.held: list[np.ndarray] | None = None

    def _next_element(self) -> list[np.ndarray] | None:
        if self.held is not None:
            out, self.held = self.held, None
            return out
        try:
            value = next(self.it)
        except StopIteration:
            return None
        return self.ds._check(value)

    def next_chunk(self, n: int) -> Chunk | None:
        rows: list[list[np.ndarray]] = []
        while len(rows) < n:
            row = self._next_element()
            if row is None:
                break
            if rows and any(a.shape != b.shape for a, b in zip(row, rows[0])):
                self.held = row
                break
            rows.append(row)
        if not rows:
            return None
        return [np.stack([r[k] for r in rows]) for k in range(len(rows[0]))]


class GeneratorDataset(Dataset):
    """``Dataset.from_generator``: each pass calls ``generator(*args)`` and converts what it yields."""

    def __init__(self, generator: Callable, output_types: Any, output_shapes: Any, args: Any,
                 output_signature: Any) -> None:
        if not callable(generator):
            raise TypeError("`generator` must be a Python callable.")
        self._generator = generator
        self._args = tuple(args) if args is not None else ()
        self._structure = _generator_structure(output_types, output_shapes, output_signature)

    def _check(self, value: Any) -> list[np.ndarray]:
        st = self._structure
        leaves = nest.flatten(value) if st.tree is not None else [value]
        if len(leaves) != st.n_leaves:
            raise TypeError(f"`generator` yielded an element that did not match the expected structure "
                            f"{st.element_spec()}: {value!r}")
        out = []
        for v, spec in zip(leaves, st.specs):
            a = np.asarray(v.numpy() if hasattr(v, "numpy") else v, dtype=spec.dtype.np)
            if len(a.shape) != len(spec.shape) or any(d is not None and d != e for d, e in zip(spec.shape, a.shape)):
                raise InvalidArgumentError(f"`generator` yielded an element of shape {a.shape} where an element of "
                                           f"shape {tuple(spec.shape)} was expected.")
            out.append(a)
        return out

    def _chunks(self) -> ChunkIter:
        return _GeneratorIter(self)

    def _cardinality(self) -> int:
        return UNKNOWN

