"""Interval arithmetic over tile mappings and the exchange it implies.

Intervals are ``[lo, hi)`` element ranges tagged with a group (usually a tile or a
``dst * tiles + src`` pair). Everything is sorting, cumulative maxima and ``bincount``: no Python
loops over elements or tiles.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from popjit.schedule.mapping import TileMapping

# ----------------------------------------------------------------------------------------------
# Interval arithmetic


def unique(a: np.ndarray) -> np.ndarray:
    """Sorted distinct values (sort-based: NumPy 2's hash-based ``np.unique`` is far slower on
    the large integer arrays used here)."""
    s = np.sort(a, kind="stable")
    if s.size < 2:
        return s
    keep = np.empty(s.size, bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]


Cut = tuple  # (base: int64[runs], mapping: TileMapping[, mask: bool[runs]])


def split_runs(lengths: np.ndarray, cuts: Sequence[Cut], extra: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
    """Cut runs ``t in [0, lengths[r])`` wherever ``base[r] + t`` crosses a boundary of a mapping
    (only in runs where the cut's optional ``mask`` is set), and at ``extra`` global positions
    (``offsets[r] + t``).

    Returns ``(run, t0, length)`` of every piece, in run order.
    """
    offs = np.zeros(lengths.size + 1, np.int64)
    np.cumsum(lengths, out=offs[1:])
    points = [offs[:-1][lengths > 0]]
    if extra is not None:
        points.append(extra)
    for cut in cuts:
        base, mapping = cut[0], cut[1]
        starts = mapping.starts
        lo = np.searchsorted(starts, base, side="right")
        hi = np.searchsorted(starts, base + lengths, side="left")
        counts = np.maximum(hi - lo, 0)
        if len(cut) > 2:
            counts = np.where(cut[2], counts, 0)
        total = int(counts.sum())
        if not total:
            continue
        run = np.repeat(np.arange(lengths.size), counts)
        first = np.repeat(np.cumsum(counts) - counts, counts)
        k = np.arange(total) - first + np.repeat(lo, counts)
        points.append(offs[run] + starts[k] - base[run])
    cut_at = unique(np.concatenate(points))
    plen = np.diff(np.append(cut_at, offs[-1]))
    run = np.searchsorted(offs, cut_at, side="right") - 1
    return run, cut_at - offs[run], plen


def _sorted_groups(group: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple:
    """Intervals sorted by (group, lo), shifted by ``group * big`` so groups never overlap, with the
    running end of all earlier intervals (``prev``) and the shift ``big``."""
    big = np.int64(max(int(hi.max(initial=0)), int(lo.max(initial=0))) + 2)
    shift = group * big
    order = np.argsort(lo + shift, kind="stable")  # why not lexsort((lo, group)): the same order, 2-3x faster
    group, lo, hi, shift = group[order], lo[order], hi[order], shift[order]
    lo2, hi2 = lo + shift, hi + shift
    prev = np.empty_like(hi2)
    if hi2.size:
        prev[0] = -1
        prev[1:] = np.maximum.accumulate(hi2)[:-1]
    return group, lo, hi, lo2, hi2, prev, big


def coalesce(group: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Merge neighbouring entries of one group whose intervals continue each other (a cheap,
    order-preserving pass that shrinks point-by-point pieces before sorting)."""
    if group.size < 2:
        return group, lo, hi
    new = np.ones(group.size, bool)
    new[1:] = (group[1:] != group[:-1]) | (lo[1:] != hi[:-1])
    if new.all():
        return group, lo, hi
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, group.size - 1)
    return group[first], lo[first], hi[last]


def union_by_group(group: np.ndarray, lo: np.ndarray, hi: np.ndarray, ngroups: int) -> tuple[np.ndarray, np.ndarray]:
    """Per group: elements covered by the union of ``[lo, hi)``, and its contiguous regions."""
    if not group.size:
        return np.zeros(ngroups, np.int64), np.zeros(ngroups, np.int64)
    group, lo, hi = coalesce(group, lo, hi)
    g, _lo, _hi, lo2, hi2, prev, _big = _sorted_groups(group, lo, hi)
    new = np.clip(hi2 - np.maximum(lo2, prev), 0, None)
    starts = lo2 > prev
    return (np.bincount(g, weights=new, minlength=ngroups).astype(np.int64),
            np.bincount(g[starts], minlength=ngroups).astype(np.int64))


def merged_intervals(group: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, ...]:
    """The union of ``[lo, hi)`` per group as disjoint sorted intervals ``(group, lo, hi)``."""
    if not group.size:
        return group, lo, hi
    g, lo, _hi, lo2, hi2, prev, big = _sorted_groups(group, lo, hi)
    idx = np.flatnonzero(lo2 > prev)
    last = np.append(idx[1:] - 1, g.size - 1)
    return g[idx], lo[idx], np.maximum.accumulate(hi2)[last] - g[idx] * big


# ----------------------------------------------------------------------------------------------
# Exchange


@dataclass
class Exchange:
    """Bytes and messages each tile receives and sends in one exchange phase. ``paired_in``: the part of
    ``bytes_in`` the tile's supertile neighbour receives with it, which arrives at twice the rate (§3.8)."""

    bytes_in: np.ndarray
    bytes_out: np.ndarray
    msgs_in: np.ndarray
    msgs_out: np.ndarray
    paired_in: np.ndarray | None = None

    @classmethod
    def zeros(cls, tiles: int) -> Exchange:
        return cls(*(np.zeros(tiles, np.int64) for _ in range(4)))

    def __add__(self, other: Exchange) -> Exchange:
        paired = None
        if self.paired_in is not None or other.paired_in is not None:
            paired = self.paired + other.paired
        return Exchange(self.bytes_in + other.bytes_in, self.bytes_out + other.bytes_out,
                        self.msgs_in + other.msgs_in, self.msgs_out + other.msgs_out, paired)

    @property
    def paired(self) -> np.ndarray:
        return self.paired_in if self.paired_in is not None else np.zeros_like(self.bytes_in)

    def supertile_paired(self) -> Exchange:
        """This exchange with every received byte shared with the supertile neighbour."""
        return Exchange(self.bytes_in, self.bytes_out, self.msgs_in, self.msgs_out, self.bytes_in.copy())

    def divided(self, parts: int) -> Exchange:
        """One of ``parts`` equal passes of this exchange (bytes rounded up; the same messages)."""
        if parts == 1:
            return self

        def part(a: np.ndarray | None) -> np.ndarray | None:
            return None if a is None else -(-a // parts)

        return Exchange(part(self.bytes_in), part(self.bytes_out), self.msgs_in, self.msgs_out,
                        part(self.paired_in))

    @property
    def any(self) -> bool:
        return bool(self.bytes_in.any() or self.bytes_out.any())

    def cycles(self, bytes_per_cycle: int) -> int:
        """The phase's length: the busiest tile's ``max(sent, received) / rate``, a received byte shared with
        the supertile neighbour counting half (``docs/ipu_hardware.md`` §2.2, §3.8)."""
        received = self.bytes_in - self.paired // 2
        busiest = np.maximum(received, self.bytes_out).max(initial=0)
        return int(-(-int(busiest) * 16 // (bytes_per_cycle * 16)))


def exchange_of(dst: np.ndarray, src: np.ndarray, lo: np.ndarray, hi: np.ndarray, elem_bytes: int,
                tiles: int, distinct: bool = False) -> Exchange:
    """Tile ``dst`` needs elements ``[lo, hi)`` held by tile ``src``: distinct remote bytes per tile.

    An element needed several times by one tile is received once; one needed by several tiles is
    sent once, as the exchange multicasts (receivers select the sender's bus). ``distinct``
    promises no tile asks for an element twice (an injective read), which skips de-duplication.
    """
    remote = (dst != src) & (hi > lo)
    dst, src, lo, hi = dst[remote], src[remote], lo[remote], hi[remote]
    if not dst.size:
        return Exchange.zeros(tiles)
    msgs_in, msgs_out = pair_counts(dst, src, tiles)
    if distinct:
        sizes = (hi - lo) * elem_bytes
        return Exchange(np.bincount(dst, weights=sizes, minlength=tiles).astype(np.int64),
                        np.bincount(src, weights=sizes, minlength=tiles).astype(np.int64), msgs_in, msgs_out)
    key, klo, khi = coalesce(dst * tiles + src, lo, hi)
    g, _lo, _hi, lo2, hi2, prev, _big = _sorted_groups(key, klo, khi)
    received = np.clip(hi2 - np.maximum(lo2, prev), 0, None)
    sent, _ = union_by_group(src, lo, hi, tiles)
    return Exchange(np.bincount(g // tiles, weights=received * elem_bytes, minlength=tiles).astype(np.int64),
                    sent * elem_bytes, msgs_in, msgs_out)


def pair_counts(dst: np.ndarray, src: np.ndarray, tiles: int) -> tuple[np.ndarray, np.ndarray]:
    """Distinct partners per tile: how many tiles each ``dst`` hears from, each ``src`` sends to."""
    if dst.size > 4 * tiles and tiles <= 4096:
        seen = np.zeros(tiles * tiles, bool)
        seen[dst * tiles + src] = True
        grid = seen.reshape(tiles, tiles)
        return np.count_nonzero(grid, axis=1).astype(np.int64), np.count_nonzero(grid, axis=0).astype(np.int64)
    d, s = np.divmod(unique(dst * tiles + src), tiles)
    return np.bincount(d, minlength=tiles).astype(np.int64), np.bincount(s, minlength=tiles).astype(np.int64)


def unknown_exchange(dst: np.ndarray, plen: np.ndarray, mapping: TileMapping, elem_bytes: int) -> Exchange:
    """Data-dependent reads (gathers) [U]: each tile reads ``min(points, size)`` elements spread
    uniformly over the source's layout, so the fraction it already holds is local."""
    tiles = mapping.num_tiles
    points = np.bincount(dst, weights=plen, minlength=tiles)
    size = max(mapping.size, 1)
    held = mapping.elements_per_tile
    wanted = np.minimum(points, size)
    bytes_in = (wanted * (1.0 - held / size) * elem_bytes).astype(np.int64)
    bytes_out = (bytes_in.sum() * held / size).astype(np.int64)
    used = mapping.tiles_used
    return Exchange(bytes_in, bytes_out, np.minimum(wanted, used).astype(np.int64),
                    np.where(held > 0, np.count_nonzero(points), 0).astype(np.int64))
