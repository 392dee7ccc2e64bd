"""The protocol between pipeline stages: chunk iterators, random access, readers.

Every dataset can make a :class:`ChunkIter`, whose ``next_chunk(n)`` returns the next 1..n
elements as one chunk (see :mod:`popjit.data.structure`) or None at the end. Asking for ``n``
lets each stage work on whole arrays: ``batch(32)`` asks its input for ``32 * n`` elements.

Some datasets also offer :class:`RandomAccess`: element ``i`` can be computed directly
(``from_tensor_slices``, ``range``, ``from_tensors``, and ``map``/``batch``/``zip``/``take``/
``skip``/``repeat``/``enumerate`` of random-access inputs). ``shuffle`` then shuffles element
*positions* and gathers the chosen elements with one NumPy ``take`` per leaf, and slicing a
``from_tensor_slices`` source returns views, not copies.
"""

from __future__ import annotations

import numpy as np

from popjit.data.structure import Chunk, chunk_len, chunk_slice, concat_chunks, same_shapes

INFINITE = -1
UNKNOWN = -2
AUTOTUNE = -1  # tf.data.AUTOTUNE: let the runtime choose (popjit prefetches what an execution needs)


class ChunkIter:
    """One pass over a dataset, a chunk at a time."""

    def next_chunk(self, n: int) -> Chunk | None:
        """The next 1..n elements as a chunk, or None when the pass is over."""
        raise NotImplementedError


class RandomAccess:
    """Direct access to element ``i`` of a deterministic dataset (``length`` None: infinite)."""

    length: int | None = None

    def gather(self, idx: np.ndarray) -> Chunk:
        """The elements at positions ``idx`` (int64, each in range) as one chunk."""
        raise NotImplementedError

    def slice(self, start: int, stop: int) -> Chunk:
        """Elements ``start..stop-1``; sources override this to return views."""
        return self.gather(np.arange(start, stop, dtype=np.int64))


class RAIter(ChunkIter):
    """A pass over a random-access dataset by consecutive slices."""

    def __init__(self, ra: RandomAccess) -> None:
        self.ra = ra
        self.pos = 0

    def next_chunk(self, n: int) -> Chunk | None:
        stop = self.pos + n if self.ra.length is None else min(self.pos + n, self.ra.length)
        if stop <= self.pos:
            return None
        out = self.ra.slice(self.pos, stop)
        self.pos = stop
        return out


class EmptyIter(ChunkIter):
    def next_chunk(self, n: int) -> Chunk | None:
        return None


class Reader:
    """A chunk iterator with put-back: read what you need, return what you did not use."""

    def __init__(self, source: ChunkIter) -> None:
        self.source = source
        self.pending: list[Chunk] = []
        self.ended = False

    def read(self, n: int) -> Chunk | None:
        """Up to ``n`` elements of one shape (pending ones first), or None at the end."""
        if self.pending:
            c = self.pending.pop(0)
            if chunk_len(c) > n:
                self.pending.insert(0, chunk_slice(c, n, chunk_len(c)))
                c = chunk_slice(c, 0, n)
            return c
        if self.ended:
            return None
        c = self.source.next_chunk(n)
        if c is None:
            self.ended = True
        return c

    def read_many(self, n: int) -> list[Chunk]:
        """Chunks totalling ``n`` elements, or fewer if the pass ends first."""
        out: list[Chunk] = []
        got = 0
        while got < n:
            c = self.read(n - got)
            if c is None:
                break
            out.append(c)
            got += chunk_len(c)
        return out

    def unread(self, chunks: list[Chunk]) -> None:
        """Put chunks back in front, in order."""
        self.pending[:0] = [c for c in chunks if chunk_len(c)]


def join(chunks: list[Chunk]) -> tuple[Chunk | None, list[Chunk]]:
    """The longest leading run of same-shaped chunks joined into one, and the chunks after it."""
    if not chunks:
        return None, []
    k = 1
    while k < len(chunks) and same_shapes(chunks[0], chunks[k]):
        k += 1
    return concat_chunks(chunks[:k]), chunks[k:]
