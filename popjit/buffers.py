"""Host memory for the engines' buffers: every one starts on a cache line.

NumPy aligns an array's data to 16 bytes only, so a float32 matrix's rows and the pieces a split product
or a parallel codelet cuts it into start anywhere in a cache line. why that matters:

- a 64-byte vector load (AVX-512) that is not on a line's start reads two lines;
- where two threads' pieces meet inside a line, each write by one takes the line from the other's core
  (false sharing). The MLP W1's two large products, split by columns over two threads, write the weights'
  784 rows at 512 bytes in: on a 2-core Ice Lake VM 100 steps of them took 17.2-17.5 ms with the weights
  on a line's start against 22.1-24.3 ms 16 or 32 bytes past it (three processes; serially 27.6-28.1 against
  29.0-30.1 ms).

Variables (:class:`popjit.frontend.variables.Variable`, and the copies replicas other than the first
hold, :mod:`popjit.runtime.replicas`), a run's results, outfeed buffers and temporaries
(:mod:`popjit.pipeline.executable`) are allocated here.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

#: Bytes per cache line on the x86-64 and AArch64 hosts popjit runs on (and per AVX-512 vector).
CACHE_LINE = 64


def _padded(nbytes: int) -> int:
    """``nbytes`` rounded up to whole cache lines."""
    return -(-nbytes // CACHE_LINE) * CACHE_LINE


def _aligned_block(nbytes: int) -> tuple[np.ndarray, int]:
    """``nbytes`` uninitialised bytes starting on a cache line (a view into a slightly larger allocation),
    and the address of the first."""
    raw = np.empty(nbytes + CACHE_LINE, np.uint8)
    address = raw.ctypes.data
    start = -address % CACHE_LINE
    return raw[start:start + nbytes], address + start


def _aligned_array(shape: tuple[int, ...], dtype: np.dtype) -> tuple[np.ndarray, int]:
    """:func:`aligned_empty` of ``shape`` and ``dtype``, and the address of its data."""
    if dtype.hasobject:
        array = np.empty(shape, dtype)
        return array, array.ctypes.data
    raw, address = _aligned_block(math.prod(shape) * dtype.itemsize)
    return raw.view(dtype).reshape(shape), address


def aligned_empty(shape: int | tuple[int, ...], dtype: Any) -> np.ndarray:
    """An uninitialised C-ordered array whose data starts on a cache line (:data:`CACHE_LINE`); NumPy's own
    alignment for an array of objects (strings), which no engine reads."""
    return _aligned_array((shape,) if isinstance(shape, int) else tuple(shape), np.dtype(dtype))[0]


def aligned_arrays(shapes: Sequence[tuple[int, ...]], dtypes: Sequence[Any]) -> tuple[list[np.ndarray], np.ndarray]:
    """New arrays as :func:`aligned_empty` makes them, each its own allocation, and the addresses of their
    data (``uintp``), read once each, as finding the alignment needs. why each its own: a run's results
    are the user's, who may keep one and drop the others."""
    made = [_aligned_array(tuple(shape), np.dtype(dtype)) for shape, dtype in zip(shapes, dtypes, strict=True)]
    return [array for array, _ in made], np.array([address for _, address in made], dtype=np.uintp)


class AlignedLayout:
    """Flat buffers of the given element counts and dtypes carved out of one allocation, each starting on
    a cache line. why one allocation: an engine's temporaries are lent to every run (:meth:`lent`), and
    finding an allocation's address from Python costs microseconds (a W1 step has 35 temporaries)."""

    def __init__(self, sizes: Sequence[int], dtypes: Sequence[Any]) -> None:
        self._parts: list[tuple[int, int, np.dtype]] = []
        offset = 0
        for size, dtype in zip(sizes, dtypes, strict=True):
            nbytes = size * np.dtype(dtype).itemsize
            self._parts.append((offset, offset + nbytes, np.dtype(dtype)))
            offset += _padded(nbytes)
        self._total = offset
        self._offsets = np.array([lo for lo, _, _ in self._parts], dtype=np.uintp)
        self._spare: list[tuple[list[np.ndarray], np.ndarray]] = []

    @contextlib.contextmanager
    def lent(self) -> Iterator[tuple[list[np.ndarray], np.ndarray]]:
        """Buffers as :meth:`allocate` makes them, for one run: given back when it ends and lent again to the
        next (one set is kept between runs; runs at the same time each get their own). why: a large
        allocation is new memory from the system each time (glibc maps one of 32 MB or more afresh and unmaps
        it when freed), whose pages the kernel zeroes as the engine first writes them: a ResNet stage's
        training step, 58 MB of patches among its temporaries, spent 13% of its time there."""
        try:
            buffers = self._spare.pop()
        except IndexError:
            buffers = self.allocate()
        try:
            yield buffers
        finally:
            if not self._spare:
                self._spare.append(buffers)

    def allocate(self) -> tuple[list[np.ndarray], np.ndarray]:
        """New uninitialised buffers, one per size given, and the addresses of their data (``uintp``): the
        block's address plus each buffer's offset, where :func:`data_addresses` would read each buffer's
        (an empty buffer's is where it would start, which nothing reads)."""
        if not self._parts:  # why: most programs have no outfeed, and reading an address costs microseconds
            return [], self._offsets
        block, address = _aligned_block(self._total)
        return [block[lo:hi].view(dtype) for lo, hi, dtype in self._parts], address + self._offsets


def data_addresses(arrays: Sequence[np.ndarray]) -> np.ndarray:
    """The addresses of ``arrays``' data, as ``uintp``. About 1.5 us an array (``ndarray.ctypes``): a
    run's temporaries take theirs from :meth:`AlignedLayout.allocate` instead."""
    return np.array([a.ctypes.data for a in arrays], dtype=np.uintp)


def aligned_copy(array: Any) -> np.ndarray:
    """A C-ordered copy of ``array`` whose data starts on a cache line."""
    source = np.asarray(array)
    copy = aligned_empty(source.shape, source.dtype)
    copy[...] = source
    return copy


def is_aligned(array: np.ndarray) -> bool:
    """Whether ``array``'s data starts on a cache line (an empty array has none to place)."""
    return array.size == 0 or array.ctypes.data % CACHE_LINE == 0
