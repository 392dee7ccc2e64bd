"""``Dataset.shuffle``: TensorFlow's shuffle buffer, computed a chunk at a time.

The rule is TensorFlow's: fill a buffer with the first ``buffer_size`` elements; then each output
is a uniformly random element of the buffer, and its place is taken by the next input element;
once the input ends, the rest of the buffer comes out in random order. So an element can move
at most ``buffer_size - 1`` places earlier, and a buffer at least as large as the dataset gives
a uniform random permutation.

popjit computes ``s`` steady-state outputs at once: draw ``s`` slot numbers; output ``t`` is the
element that the most recent earlier draw of the same slot put there (input ``t'``), or the
slot's content before the chunk if there was none. Sorting the draws finds those earlier draws,
so the whole step is a few NumPy operations. The final drain is a random permutation of what is
left, which has the same distribution as drawing one by one.

Each slot number comes from one double of the pass's generator, so the order does not depend on
how the elements are requested (one at a time, or ``get_next_n`` blocks of any size), and a
buffer of positions and a buffer of elements give the same order. Exact orders differ from
TensorFlow's (a different random generator and slot bookkeeping: TF swaps the chosen slot with
the oldest one); the distribution of orders is the same.

Seeds: ``seed`` and ``tf.random.set_seed`` combine as for random ops; with neither, every
dataset gets fresh entropy. A seeded shuffle is reproducible. With
``reshuffle_each_iteration=True`` (the default) each pass over the dataset (each ``iter()``, each
epoch of ``repeat()``) uses the next seed in a sequence, so epochs differ but the sequence of
epochs is reproducible; with False every pass repeats the same order.

When the input has random access (see :mod:`popjit.data.core`) the buffer holds element
*positions* (int64) and the chosen elements are gathered from the input in one ``take`` per
leaf; otherwise it holds the elements themselves.
"""

from __future__ import annotations

import itertools
import threading

import numpy as np

from popjit.data.core import ChunkIter, RandomAccess, Reader
from popjit.data.dataset import Dataset
from popjit.data.structure import Chunk, chunk_len, same_shapes
from popjit.frontend.random_ops import get_seed

_MASK64 = (1 << 64) - 1


def steady_step(store: Chunk, incoming: Chunk, draws: np.ndarray) -> Chunk:
    """Outputs of ``len(draws)`` buffer steps; updates ``store`` (full, writable) in place.

    Step ``t`` outputs slot ``draws[t]`` and refills it with ``incoming[t]``.
    """
    s = len(draws)
    order = np.argsort(draws, kind="stable")
    sd = draws[order]
    dup = sd[1:] == sd[:-1]
    prev = np.full(s, -1, dtype=np.int64)
    prev[order[1:][dup]] = order[:-1][dup]
    fresh = prev >= 0
    last = np.ones(s, dtype=bool)
    last[:-1] = ~dup
    out = []
    for st, inc in zip(store, incoming):
        o = st[draws]
        o[fresh] = inc[prev[fresh]]
        st[sd[last]] = inc[order[last]]
        out.append(o)
    return out


def draw_slots(rng: np.random.Generator, capacity: int, n: int) -> np.ndarray:
    """``n`` uniform slot numbers in ``[0, capacity)``.

    From one double each, so the sequence does not depend on how the draws are split into calls:
    the order of a seeded shuffle is the same however its elements are requested.
    """
    return np.minimum((rng.random(n) * capacity).astype(np.int64), capacity - 1)


def _as_objects(chunk: Chunk) -> Chunk:
    """A chunk as one object leaf of per-element tuples (for elements of several shapes)."""
    if len(chunk) == 1 and chunk[0].dtype == object:
        return chunk
    k = chunk_len(chunk)
    arr = np.empty(k, dtype=object)
    for i in range(k):
        arr[i] = tuple(a[i] for a in chunk)
    return [arr]


class _ShuffleIter(ChunkIter):
    """One pass of the buffer. Subclasses say what the buffer holds and how it becomes elements."""

    def __init__(self, capacity: int, rng: np.random.Generator) -> None:
        self.cap = capacity
        self.rng = rng
        self.store: Chunk | None = None
        self.draining = False
        self.drain_pos = 0

    # -- what subclasses provide ------------------------------------------------------------------
    def pull(self, k: int) -> Chunk | None:
        """Up to ``k`` further input items (one chunk); None when the input has ended."""
        raise NotImplementedError

    def emit(self, items: Chunk) -> Chunk:
        raise NotImplementedError

    def combine(self, a: Chunk, b: Chunk) -> tuple[Chunk, Chunk]:
        """``a`` and ``b`` in one representation (subclasses may change both)."""
        return a, b

    # -- the buffer -------------------------------------------------------------------------------
    @property
    def fill(self) -> int:
        return chunk_len(self.store) if self.store is not None else 0

    def _fill(self) -> None:
        while not self.draining and self.fill < self.cap:
            c = self.pull(self.cap - self.fill)
            if c is None:
                self._start_drain()
            elif self.store is None:
                self.store = [np.array(a) for a in c]
            else:
                st, c = self.combine(self.store, c)
                self.store = [np.concatenate([x, y]) for x, y in zip(st, c)]

    def _start_drain(self) -> None:
        self.draining = True
        if self.store is not None:
            perm = self.rng.permutation(self.fill)
            self.store = [a[perm] for a in self.store]

    def _steady(self, n: int) -> Chunk | None:
        incoming = self.pull(n)
        if incoming is None:
            self._start_drain()
            return None
        assert self.store is not None
        self.store, incoming = self.combine(self.store, incoming)
        draws = draw_slots(self.rng, self.cap, chunk_len(incoming))
        return steady_step(self.store, incoming, draws)

    def next_chunk(self, n: int) -> Chunk | None:
        self._fill()
        parts: list[Chunk] = []
        got = 0
        while got < n and not self.draining:
            c = self._steady(n - got)
            if c is not None:
                parts.append(c)
                got += chunk_len(c)
        if got < n and self.store is not None and self.drain_pos < self.fill:
            k = min(n - got, self.fill - self.drain_pos)
            parts.append([a[self.drain_pos:self.drain_pos + k] for a in self.store])
            self.drain_pos += k
        if not parts:
            return None
        for i in range(1, len(parts)):
            parts[0], parts[i] = self.combine(parts[0], parts[i])
        items = parts[0] if len(parts) == 1 else [np.concatenate(xs) for xs in zip(*parts)]
        return self.emit(items)


class _PositionShuffle(_ShuffleIter):
    """The buffer holds positions in a random-access input; elements are gathered on the way out."""

    def __init__(self, ra: RandomAccess, capacity: int, rng: np.random.Generator) -> None:
        super().__init__(capacity if ra.length is None else max(1, min(capacity, ra.length)), rng)
        self.ra = ra
        self.cursor = 0

    def pull(self, k: int) -> Chunk | None:
        stop = self.cursor + k if self.ra.length is None else min(self.cursor + k, self.ra.length)
        if stop <= self.cursor:
            return None
        out = [np.arange(self.cursor, stop, dtype=np.int64)]
        self.cursor = stop
        return out

    def emit(self, items: Chunk) -> Chunk:
        return self.ra.gather(items[0])


class _ElementShuffle(_ShuffleIter):
    """The buffer holds the elements themselves (one object leaf once they differ in shape)."""

    def __init__(self, source: ChunkIter, capacity: int, rng: np.random.Generator) -> None:
        super().__init__(capacity, rng)
        self.reader = Reader(source)
        self.rows: list[tuple] = []  # elements of several shapes, emitted a same-shaped run at a time

    def pull(self, k: int) -> Chunk | None:
        parts = self.reader.read_many(k)
        if not parts:
            return None
        out = parts[0]
        for p in parts[1:]:
            out, p = self.combine(out, p)
            out = [np.concatenate([x, y]) for x, y in zip(out, p)]
        return out

    def combine(self, a: Chunk, b: Chunk) -> tuple[Chunk, Chunk]:
        if len(a) == len(b) and same_shapes(a, b) and all(x.dtype == y.dtype for x, y in zip(a, b)):
            return a, b
        return _as_objects(a), _as_objects(b)

    def emit(self, items: Chunk) -> Chunk:
        if items[0].dtype != object:
            return items
        self.rows.extend(items[0])
        return self._take_run(len(items[0]))

    def _take_run(self, n: int) -> Chunk:
        """The leading run of same-shaped elements held back from object mode, stacked."""
        first = [np.shape(x) for x in self.rows[0]]
        k = 1
        while k < min(n, len(self.rows)) and [np.shape(x) for x in self.rows[k]] == first:
            k += 1
        run, self.rows = self.rows[:k], self.rows[k:]
        return [np.stack([np.asarray(r[j]) for r in run]) for j in range(len(first))]

    def next_chunk(self, n: int) -> Chunk | None:
        if self.rows:
            return self._take_run(n)
        return super().next_chunk(n)


class ShuffleDataset(Dataset):
    """``Dataset.shuffle`` (see the module docstring for the rule and the seeds)."""

    def __init__(self, input: Dataset, buffer_size: int, seed: int | None, reshuffle: bool) -> None:
        self._input = input
        self._buffer_size = buffer_size
        self._reshuffle = reshuffle
        pair = get_seed(seed)
        if pair is None:
            self._key = [int(np.random.SeedSequence().entropy) & _MASK64]
        else:
            self._key = [pair[0] & _MASK64, pair[1] & _MASK64]
        self._passes = itertools.count()
        self._lock = threading.Lock()
        self._structure = input._structure

    def _rng(self) -> np.random.Generator:
        with self._lock:
            n = next(self._passes) if self._reshuffle else 0
        return np.random.default_rng([*self._key, n])

    def _chunks(self) -> ChunkIter:
        rng = self._rng()
        ra = self._input._random_access()
        if ra is not None:
            return _PositionShuffle(ra, self._buffer_size, rng)
        return _ElementShuffle(self._input._chunks(), self._buffer_size, rng)

    def _cardinality(self) -> int:
        return self._input._cardinality()
