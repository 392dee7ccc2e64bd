"""Structural transformations: zip, batch, unbatch, repeat, take, skip, concatenate, cache, pass-through.

Each stage keeps random access when its input has it (see :mod:`popjit.data.core`), so
``from_tensor_slices(...).batch(32, drop_remainder=True).repeat()`` slices views out of the source
arrays and only ``shuffle`` or an epoch boundary makes a copy.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np

from popjit.data.core import INFINITE, UNKNOWN, ChunkIter, EmptyIter, RAIter, RandomAccess, Reader, join
from popjit.data.dataset import Dataset
from popjit.data.sources import ArrayRA
from popjit.data.structure import Chunk, Structure, chunk_len, chunk_slice, concat_chunks, merge_shapes
from popjit.errors import InvalidArgumentError
from popjit.frontend import nest
from popjit.frontend.function import TensorSpec

# ------------------------------------------------------------------------------------------------
# zip


class _ZipRA(RandomAccess):
    def __init__(self, parts: list[RandomAccess]) -> None:
        self.parts = parts
        finite = [p.length for p in parts if p.length is not None]
        self.length = min(finite) if finite else None

    def gather(self, idx: np.ndarray) -> Chunk:
        return [a for p in self.parts for a in p.gather(idx)]

    def slice(self, start: int, stop: int) -> Chunk:
        return [a for p in self.parts for a in p.slice(start, stop)]


class _ZipIter(ChunkIter):
    def __init__(self, children: list[Dataset]) -> None:
        self.readers = [Reader(c._chunks()) for c in children]

    def next_chunk(self, n: int) -> Chunk | None:
        parts = []
        for r in self.readers:
            c = r.read(n)
            if c is None:
                for r2, c2 in zip(self.readers, parts):
                    r2.unread([c2])
                return None
            parts.append(c)
        k = min(chunk_len(c) for c in parts)
        for r, c in zip(self.readers, parts):
            r.unread([chunk_slice(c, k, chunk_len(c))])
        return [a[:k] for c in parts for a in c]


class ZipDataset(Dataset):
    """``Dataset.zip``: element ``i`` is the structure of every input's element ``i``."""

    def __init__(self, datasets: Any) -> None:
        children, outer = nest.flatten_with_tree(datasets)
        if not children or not all(isinstance(c, Dataset) for c in children):
            raise TypeError("The argument to `Dataset.zip()` must be a (nested) structure of `Dataset` objects.")
        self._children = children
        slots = [c._structure.pack([object() for _ in c._structure.specs]) for c in children]
        _, tree = nest.flatten_with_tree(nest.unflatten(outer, slots))
        self._structure = Structure(tree, tuple(s for c in children for s in c._structure.specs),
                                    tuple(t for c in children for t in c._structure.typical))

    def _random_access(self) -> RandomAccess | None:
        parts = [c._random_access() for c in self._children]
        return _ZipRA(parts) if all(p is not None for p in parts) else None  # type: ignore[arg-type]

    def _chunks(self) -> ChunkIter:
        ra = self._random_access()
        return RAIter(ra) if ra is not None else _ZipIter(self._children)

    def _cardinality(self) -> int:
        out = INFINITE
        for c in self._children:
            n = c._cardinality()
            if n == UNKNOWN:
                return UNKNOWN
            if n != INFINITE:
                out = n if out == INFINITE else min(out, n)
        return out


# ------------------------------------------------------------------------------------------------
# batch / unbatch


class _BatchRA(RandomAccess):
    def __init__(self, inner: RandomAccess, size: int) -> None:
        self.inner, self.size = inner, size
        self.length = None if inner.length is None else inner.length // size

    def _shape(self, chunk: Chunk, k: int) -> Chunk:
        return [a.reshape((k, self.size, *a.shape[1:])) for a in chunk]

    def gather(self, idx: np.ndarray) -> Chunk:
        rows = (idx[:, None] * self.size + np.arange(self.size)).reshape(-1)
        return self._shape(self.inner.gather(rows), len(idx))

    def slice(self, start: int, stop: int) -> Chunk:
        return self._shape(self.inner.slice(start * self.size, stop * self.size), stop - start)


class _BatchIter(ChunkIter):
    def __init__(self, source: ChunkIter, size: int, drop: bool) -> None:
        self.reader = Reader(source)
        self.size, self.drop = size, drop

    def next_chunk(self, n: int) -> Chunk | None:
        chunk, rest = join(self.reader.read_many(n * self.size))
        if chunk is None:
            return None
        got = chunk_len(chunk)
        full = got // self.size
        if full == 0:
            ended = got + sum(chunk_len(r) for r in rest) < self.size
            if self.drop and ended:  # the input ended with a partial batch, whatever its shapes
                return None
            if rest:  # the next element has another shape but belongs to the same batch
                concat_chunks([chunk, rest[0]])  # raises TensorFlow's "Cannot batch tensors..." error
            return [a[None] for a in chunk]
        self.reader.unread([chunk_slice(chunk, full * self.size, got), *rest])
        return [a[: full * self.size].reshape((full, self.size, *a.shape[1:])) for a in chunk]


class BatchDataset(Dataset):
    """``Dataset.batch``: stacks consecutive elements along a new first dimension."""

    def __init__(self, input: Dataset, size: int, drop: bool) -> None:
        self._input, self._size, self._drop = input, size, drop
        st = input._structure
        lead = size if drop else None
        self._structure = Structure(st.tree, tuple(TensorSpec((lead, *s.shape), s.dtype) for s in st.specs),
                                    tuple((size, *t) for t in st.typical))

    def _random_access(self) -> RandomAccess | None:
        ra = self._input._random_access()
        if ra is None or not (self._drop or ra.length is None or ra.length % self._size == 0):
            return None
        return _BatchRA(ra, self._size)

    def _chunks(self) -> ChunkIter:
        ra = self._random_access()
        return RAIter(ra) if ra is not None else _BatchIter(self._input._chunks(), self._size, self._drop)

    def _cardinality(self) -> int:
        n = self._input._cardinality()
        if n < 0:
            return n
        return n // self._size if self._drop else math.ceil(n / self._size)


class _UnbatchIter(ChunkIter):
    def __init__(self, source: ChunkIter) -> None:
        self.source = source
        self.rest: Chunk | None = None

    def next_chunk(self, n: int) -> Chunk | None:
        while self.rest is None:
            c = self.source.next_chunk(1)
            if c is None:
                return None
            flat = _unbatch_chunk(c)
            self.rest = flat if chunk_len(flat) else None
        out, k = self.rest, chunk_len(self.rest)
        self.rest = chunk_slice(out, n, k) if k > n else None
        return chunk_slice(out, 0, n) if k > n else out


def _unbatch_chunk(chunk: Chunk) -> Chunk:
    lead = {a.shape[1] for a in chunk}
    if len(lead) != 1:
        raise InvalidArgumentError(f"Input element components must have the same first dimension to unbatch, "
                                   f"got {sorted(lead)}")
    return [a.reshape((-1, *a.shape[2:])) for a in chunk]


class UnbatchDataset(Dataset):
    """``Dataset.unbatch``: every row of every element becomes an element."""

    def __init__(self, input: Dataset) -> None:
        self._input = input
        st = input._structure
        if any(len(s.shape) == 0 for s in st.specs):
            raise InvalidArgumentError("Cannot unbatch an input with scalar components.")
        self._structure = Structure(st.tree, tuple(TensorSpec(s.shape[1:], s.dtype) for s in st.specs),
                                    tuple(t[1:] for t in st.typical))

    def _chunks(self) -> ChunkIter:
        return _UnbatchIter(self._input._chunks())

    def _cardinality(self) -> int:
        n = self._input._cardinality()
        return n if n in (0, INFINITE) else UNKNOWN


# ------------------------------------------------------------------------------------------------
# repeat, take, skip, concatenate


class _RepeatRA(RandomAccess):
    def __init__(self, inner: RandomAccess, count: int) -> None:
        assert inner.length is not None
        self.inner, self.n = inner, inner.length
        self.length = None if count < 0 else count * self.n

    def gather(self, idx: np.ndarray) -> Chunk:
        return self.inner.gather(idx % self.n)

    def slice(self, start: int, stop: int) -> Chunk:
        if start // self.n == (stop - 1) // self.n:
            base = start // self.n * self.n
            return self.inner.slice(start - base, stop - base)
        return super().slice(start, stop)


class _RepeatIter(ChunkIter):
    def __init__(self, input: Dataset, count: int) -> None:
        self.input, self.count = input, count
        self.epoch = 0
        self.it: ChunkIter | None = input._chunks() if count != 0 else None
        self.produced = False

    def next_chunk(self, n: int) -> Chunk | None:
        while self.it is not None:
            c = self.it.next_chunk(n)
            if c is not None:
                self.produced = True
                return c
            self.epoch += 1
            if (self.count >= 0 and self.epoch >= self.count) or not self.produced:
                self.it = None  # done, or an empty input (repeating it would loop forever)
            else:
                self.it, self.produced = self.input._chunks(), False
        return None


class RepeatDataset(Dataset):
    """``Dataset.repeat``: passes over the input one after another (each a new pass: a new shuffle order)."""

    def __init__(self, input: Dataset, count: int) -> None:
        self._input, self._count = input, count
        self._structure = input._structure

    def _random_access(self) -> RandomAccess | None:
        ra = self._input._random_access()
        if ra is None or self._count == 0:
            return None
        if ra.length is None:
            return ra
        return _RepeatRA(ra, self._count) if ra.length > 0 else None

    def _chunks(self) -> ChunkIter:
        ra = self._random_access()
        return RAIter(ra) if ra is not None else _RepeatIter(self._input, self._count)

    def _cardinality(self) -> int:
        n = self._input._cardinality()
        if self._count < 0:
            return 0 if n == 0 else INFINITE
        if self._count == 0:
            return 0
        return n if n < 0 else self._count * n


class _WindowRA(RandomAccess):
    """Elements ``offset .. offset+length-1`` of another random-access dataset."""

    def __init__(self, inner: RandomAccess, offset: int, length: int | None) -> None:
        self.inner, self.offset, self.length = inner, offset, length

    def gather(self, idx: np.ndarray) -> Chunk:
        return self.inner.gather(idx + self.offset)

    def slice(self, start: int, stop: int) -> Chunk:
        return self.inner.slice(start + self.offset, stop + self.offset)


class _TakeIter(ChunkIter):
    def __init__(self, source: ChunkIter, count: int) -> None:
        self.source, self.left = source, count

    def next_chunk(self, n: int) -> Chunk | None:
        if self.left == 0:
            return None
        c = self.source.next_chunk(min(n, self.left))
        if c is None:
            self.left = 0
            return None
        self.left -= chunk_len(c)
        return c


class TakeDataset(Dataset):
    """``Dataset.take``: at most ``count`` elements (all when ``count`` is negative)."""

    def __init__(self, input: Dataset, count: int) -> None:
        self._input, self._count = input, count
        self._structure = input._structure

    def _random_access(self) -> RandomAccess | None:
        ra = self._input._random_access()
        if ra is None or self._count < 0:
            return ra
        return _WindowRA(ra, 0, self._count if ra.length is None else min(ra.length, self._count))

    def _chunks(self) -> ChunkIter:
        ra = self._random_access()
        if ra is not None:
            return RAIter(ra)
        src = self._input._chunks()
        return src if self._count < 0 else _TakeIter(src, self._count)

    def _cardinality(self) -> int:
        n = self._input._cardinality()
        if n == UNKNOWN or self._count < 0:
            return n
        return self._count if n == INFINITE else min(n, self._count)


class _SkipIter(ChunkIter):
    def __init__(self, source: ChunkIter, count: int) -> None:
        self.source, self.to_skip = source, count

    def next_chunk(self, n: int) -> Chunk | None:
        while self.to_skip != 0:
            c = self.source.next_chunk(self.to_skip if self.to_skip > 0 else max(n, 1024))
            if c is None:
                self.to_skip = 0
                return None
            if self.to_skip > 0:
                self.to_skip -= chunk_len(c)
        return self.source.next_chunk(n)


class _StrideRA(RandomAccess):
    """Elements ``start, start + step, ...`` of another random-access dataset."""

    def __init__(self, inner: RandomAccess, start: int, step: int) -> None:
        self.inner, self.start, self.step = inner, start, step
        self.length = None if inner.length is None else max(-(-(inner.length - start) // step), 0)

    def gather(self, idx: np.ndarray) -> Chunk:
        return self.inner.gather(idx * self.step + self.start)


class _ShardIter(ChunkIter):
    """The elements of ``source`` whose position is ``index`` modulo ``shards``."""

    def __init__(self, source: ChunkIter, shards: int, index: int) -> None:
        self.source, self.shards, self.index, self.position = source, shards, index, 0

    def next_chunk(self, n: int) -> Chunk | None:
        while True:
            c = self.source.next_chunk(n * self.shards)
            if c is None:
                return None
            size = chunk_len(c)
            first = (self.index - self.position) % self.shards
            self.position += size
            if first < size:
                return [leaf[first::self.shards] for leaf in c]


class ShardDataset(Dataset):
    """``Dataset.shard``: every ``num_shards``-th element, from element ``index`` on."""

    def __init__(self, input: Dataset, num_shards: int, index: int) -> None:
        self._input, self._shards, self._index = input, num_shards, index
        self._structure = input._structure

    def _random_access(self) -> RandomAccess | None:
        ra = self._input._random_access()
        return None if ra is None else _StrideRA(ra, self._index, self._shards)

    def _chunks(self) -> ChunkIter:
        ra = self._random_access()
        return RAIter(ra) if ra is not None else _ShardIter(self._input._chunks(), self._shards, self._index)

    def _cardinality(self) -> int:
        n = self._input._cardinality()
        return n if n < 0 else max(-(-(n - self._index) // self._shards), 0)


class SkipDataset(Dataset):
    """``Dataset.skip``: drops the first ``count`` elements (all when ``count`` is negative)."""

    def __init__(self, input: Dataset, count: int) -> None:
        self._input, self._count = input, count
        self._structure = input._structure

    def _random_access(self) -> RandomAccess | None:
        ra = self._input._random_access()
        if ra is None:
            return None
        if self._count < 0:
            return _WindowRA(ra, 0, 0) if ra.length is not None else None
        length = None if ra.length is None else max(ra.length - self._count, 0)
        return _WindowRA(ra, self._count, length)

    def _chunks(self) -> ChunkIter:
        ra = self._random_access()
        return RAIter(ra) if ra is not None else _SkipIter(self._input._chunks(), self._count)

    def _cardinality(self) -> int:
        n = self._input._cardinality()
        if n < 0:
            return n
        return 0 if self._count < 0 else max(n - self._count, 0)


class _ChainIter(ChunkIter):
    def __init__(self, datasets: list[Dataset]) -> None:
        self.pending = list(datasets)
        self.it: ChunkIter = EmptyIter()

    def next_chunk(self, n: int) -> Chunk | None:
        while True:
            c = self.it.next_chunk(n)
            if c is not None or not self.pending:
                return c
            self.it = self.pending.pop(0)._chunks()


class ConcatenateDataset(Dataset):
    """``Dataset.concatenate``: the first dataset's elements, then the second's."""

    def __init__(self, first: Dataset, second: Dataset) -> None:
        a, b = first._structure, second._structure
        if repr(a.tree) != repr(b.tree) or [s.dtype for s in a.specs] != [s.dtype for s in b.specs]:
            raise TypeError(f"Incompatible dataset elements: {first.element_spec} vs. {second.element_spec}")
        specs = []
        for x, y in zip(a.specs, b.specs):
            shape = merge_shapes(x.shape, y.shape)
            if shape is None:
                raise TypeError(f"Incompatible dataset elements: {first.element_spec} vs. {second.element_spec}")
            specs.append(TensorSpec(shape, x.dtype))
        self._first, self._second = first, second
        self._structure = Structure(a.tree, tuple(specs), a.typical)

    def _chunks(self) -> ChunkIter:
        return _ChainIter([self._first, self._second])

    def _cardinality(self) -> int:
        a, b = self._first._cardinality(), self._second._cardinality()
        if INFINITE in (a, b):
            return INFINITE
        return UNKNOWN if UNKNOWN in (a, b) else a + b


# ------------------------------------------------------------------------------------------------
# cache, prefetch, options


class _CacheIter(ChunkIter):
    """The first pass: records what it passes on, and hands the record to the dataset at the end."""

    def __init__(self, ds: CacheDataset) -> None:
        self.ds = ds
        self.source = ds._input._chunks()
        self.record: list[Chunk] = []

    def next_chunk(self, n: int) -> Chunk | None:
        c = self.source.next_chunk(n)
        if c is None:
            if self.ds._cached is None and self.record is not None:
                self.ds._cached = self.record
            self.record = None  # type: ignore[assignment]
            return None
        if self.record is not None:
            self.record.append(c)
        return c


class _ReplayIter(ChunkIter):
    def __init__(self, chunks: list[Chunk]) -> None:
        self.reader = Reader(EmptyIter())
        self.reader.unread(list(chunks))

    def next_chunk(self, n: int) -> Chunk | None:
        return self.reader.read(n)


class CacheDataset(Dataset):
    """``Dataset.cache``: the first complete pass is kept in memory; later passes replay it."""

    def __init__(self, input: Dataset, filename: str) -> None:
        if filename:
            warnings.warn(f"popjit caches tf.data elements in memory; the cache file {filename!r} is not written.",
                          stacklevel=3)
        self._input = input
        self._structure = input._structure
        self._cached: list[Chunk] | None = None
        self._cached_ra: RandomAccess | None = None

    def _random_access(self) -> RandomAccess | None:
        if self._cached is None or not self._cached:
            return None
        if self._cached_ra is None:
            try:
                self._cached_ra = ArrayRA(concat_chunks(self._cached))
            except InvalidArgumentError:  # elements of several shapes: replay only
                return None
        return self._cached_ra

    def _chunks(self) -> ChunkIter:
        if self._cached is not None:
            return _ReplayIter(self._cached)
        return _CacheIter(self)

    def _cardinality(self) -> int:
        return self._input._cardinality()


class PassThroughDataset(Dataset):
    """A stage that changes nothing (``prefetch``, ``with_options``) but keeps its TensorFlow name."""

    def __init__(self, input: Dataset, label: str) -> None:
        self._input = input
        self._label = label
        self._structure = input._structure

    def _random_access(self) -> RandomAccess | None:
        return self._input._random_access()

    def _chunks(self) -> ChunkIter:
        return self._input._chunks()

    def _cardinality(self) -> int:
        return self._input._cardinality()
