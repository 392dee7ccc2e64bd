"""Tile mappings: which tile holds each element of a flat tensor (``docs/ipu_hardware.md`` §2.3).

A :class:`TileMapping` is a list of element intervals in element order, each on one tile, stored
as two arrays (``starts`` with one more entry than ``tiles``), so a tensor of any size costs as
many entries as it has intervals and every query is a vectorised NumPy call.
"""

from __future__ import annotations

from functools import cached_property

import numpy as np

from popjit.dtypes import DType
from popjit.schedule.target import Target

#: ``tile_of`` switches from binary search to a per-element table for more queries than this,
#: on tensors of at most ``DENSE_LIMIT`` elements.
DENSE_QUERIES = 1 << 16
DENSE_LIMIT = 1 << 24


class TileMapping:
    """Intervals ``[starts[r], starts[r+1])`` of a flat tensor of ``size`` elements on ``tiles[r]``."""

    def __init__(self, size: int, starts: np.ndarray, tiles: np.ndarray, num_tiles: int) -> None:
        self.size = int(size)
        self.starts = np.asarray(starts, dtype=np.int64)
        self.tiles = np.asarray(tiles, dtype=np.int64)
        self.num_tiles = int(num_tiles)
        assert self.starts.shape[0] == self.tiles.shape[0] + 1, "one start per interval plus the end"

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.starts)

    @cached_property
    def elements_per_tile(self) -> np.ndarray:
        """Elements held by each tile (int64[num_tiles])."""
        return np.bincount(self.tiles, weights=self.lengths, minlength=self.num_tiles).astype(np.int64)

    @cached_property
    def regions_per_tile(self) -> np.ndarray:
        """Contiguous regions on each tile (adjacent intervals on one tile are one region)."""
        if not self.tiles.size:
            return np.zeros(self.num_tiles, np.int64)
        new = np.ones(self.tiles.size, bool)
        new[1:] = self.tiles[1:] != self.tiles[:-1]
        return np.bincount(self.tiles[new], minlength=self.num_tiles).astype(np.int64)

    @property
    def tiles_used(self) -> int:
        return int(np.count_nonzero(self.elements_per_tile))

    @property
    def max_elements_per_tile(self) -> int:
        return int(self.elements_per_tile.max(initial=0))

    def bytes_per_tile(self, dtype: DType) -> np.ndarray:
        return self.elements_per_tile * dtype.size

    def interval_of(self, index: np.ndarray) -> np.ndarray:
        """The interval holding each element index."""
        return np.searchsorted(self.starts, index, side="right") - 1

    def tile_of(self, index: np.ndarray) -> np.ndarray:
        """The tile holding each element index (indices outside the tensor are clipped)."""
        index = np.asarray(index, np.int64)
        if not self.tiles.size:
            return np.zeros(index.shape, np.int64)
        if index.size > DENSE_QUERIES and self.size <= DENSE_LIMIT:
            return self._dense[np.clip(index, 0, self.size - 1)].astype(np.int64)
        return self.tiles[np.clip(self.interval_of(index), 0, self.tiles.size - 1)]

    @cached_property
    def _dense(self) -> np.ndarray:
        """The tile of every element (for many random-order queries: a gather beats a search)."""
        small = np.int16 if self.num_tiles < 2**15 else np.int32
        return np.repeat(self.tiles.astype(small), self.lengths)

    def rank(self) -> tuple[int, int, int]:
        """Poplar's ranking of candidate layouts for an element-wise output (§2.3): the smallest
        maximum elements per tile, then the most tiles, then the fewest regions."""
        return (self.max_elements_per_tile, -self.tiles_used, int(self.regions_per_tile.sum()))

    def describe(self) -> str:
        per = self.elements_per_tile[self.elements_per_tile > 0]
        if not per.size:
            return "empty"
        return f"{per.size} tiles, {per.min()}..{per.max()} elements per tile, {self.tiles.size} intervals"

    def __repr__(self) -> str:
        return f"TileMapping({self.size} elements: {self.describe()})"


def linear_partitions(size: int, grain: int, min_elements: int, num_tiles: int) -> np.ndarray:
    """Element boundaries of ``poputil::calcLinearTileMapping`` (§2.3) on tiles ``0..P-1``.

    ``numGrains = ceil(N/grain)``; grains per partition ``ceil(numGrains/tiles)``, raised so no
    tile holds fewer than ``min_elements``; partition ``v`` gets grains
    ``[v*numGrains/P, (v+1)*numGrains/P)``; the last may end with a partial grain.
    """
    if size <= 0:
        return np.zeros(1, np.int64)
    num_grains = -(-size // grain)
    per = -(-num_grains // num_tiles)
    min_grains = -(-min_elements // grain)
    per = max(per, -(-num_grains // max(1, num_grains // min_grains)))
    parts = -(-num_grains // per)
    grain_starts = np.arange(parts + 1, dtype=np.int64) * num_grains // parts
    return np.minimum(grain_starts * grain, size)


def linear_mapping(size: int, dtype: DType, target: Target, offset: int = 0) -> TileMapping:
    """Poplar's linear mapping (grain = vector width, at least 128 B per tile), rotated to start at
    tile ``offset`` unless it spans every tile (the TF backend's ``MapTensorLinearly``)."""
    starts = linear_partitions(size, target.vector_width(dtype), target.min_elements_per_tile(dtype), target.tiles)
    parts = starts.size - 1
    shift = offset if parts < target.tiles else 0
    return TileMapping(size, starts, (np.arange(parts, dtype=np.int64) + shift) % target.tiles, target.tiles)


def single_tile_mapping(size: int, tile: int, num_tiles: int) -> TileMapping:
    """The whole tensor on one tile."""
    if size <= 0:
        return TileMapping(0, np.zeros(1, np.int64), np.zeros(0, np.int64), num_tiles)
    return TileMapping(size, np.array([0, size], np.int64), np.array([tile], np.int64), num_tiles)


class LinearAllocator:
    """Hands out linear mappings with the per-graph running start tile (``linear_mapping_state``)."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.offset = 0

    def __call__(self, size: int, dtype: DType) -> TileMapping:
        m = linear_mapping(size, dtype, self.target, self.offset)
        self.advance(m.tiles.size)
        return m

    def advance(self, used: int) -> None:
        """Move the start tile past a mapping over ``used`` tiles (unless it spans them all)."""
        if used < self.target.tiles:
            self.offset = (self.offset + used) % self.target.tiles
