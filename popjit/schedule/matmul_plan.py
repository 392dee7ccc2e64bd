"""The matmul planner (``docs/ipu_hardware.md`` §4.1–4.3).

A batched matmul ``[G, M, K] @ [G, K, N]`` is split over tiles as ``bG x bM x bN x bK`` blocks:
tile ``(g, i, j, l)`` computes the partial product of row block ``i``, column block ``j`` and
depth block ``l`` with one ``ConvPartial1x1Out`` AMP vertex; when ``bK > 1`` a second compute
set reduces the ``bK`` partials (``ReduceAdd``). Grains: rows 1, columns = AMP conv units, depth
= AMP input channels (§4.1). Every candidate split is costed at once with NumPy:

    cycles = sync + exchange(operands) + sync + AMP
             [+ sync + exchange(partials) + sync + ReduceAdd]        (bK > 1)
    temp   = operand blocks on the tile + float partials [+ received partials]

and the cheapest plan whose temporary memory fits ``available_memory_proportion x
bytes_per_tile`` wins (ties: less memory). If none fits, the bound is doubled up to twice the
tile memory, then dropped (poplin's fallback, §4.3). Operand layouts (``createMatMulInputLHS``
style) put block ``(i, l)`` of A spread over the ``bN`` tiles that use it, and likewise for B.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from popjit import dtypes
from popjit.dtypes import DType
from popjit.schedule import cost
from popjit.schedule.intervals import Exchange, split_runs, unique
from popjit.schedule.mapping import TileMapping
from popjit.schedule.target import Target


@dataclass(frozen=True)
class MatMulPlan:
    """A chosen split and its estimate. ``m, n, k, g`` are the largest per-tile block sizes."""

    G: int
    M: int
    N: int
    K: int
    dtype: DType
    bG: int  # noqa: N815  (the spec's notation)
    bM: int  # noqa: N815  (the spec's notation)
    bN: int  # noqa: N815  (the spec's notation)
    bK: int  # noqa: N815  (the spec's notation)
    g: int
    m: int
    n: int
    k: int
    cycles: int
    temp_bytes: int

    @property
    def tiles(self) -> int:
        return self.bG * self.bM * self.bN * self.bK

    def tile(self, gb: np.ndarray, i: np.ndarray, j: np.ndarray, l: np.ndarray) -> np.ndarray:
        """Tile of block ``(gb, i, j, l)``: output-column splits innermost (they share inputs on a
        supertile, §4.2), then depth, rows, groups."""
        return ((gb * self.bM + i) * self.bK + l) * self.bN + j

    def describe(self) -> str:
        return (f"split G{self.bG} x M{self.bM} x N{self.bN} x K{self.bK} = {self.tiles} tiles, "
                f"per tile [{self.g}x]{self.m}x{self.k} @ {self.k}x{self.n}")


def _candidates(units: int, limit: int) -> np.ndarray:
    """Splits of ``units`` grains worth trying: every split up to 16, then geometric steps, each
    snapped to the smallest split giving the same per-tile size."""
    if units <= 0:  # an empty dimension: one (empty) block
        return np.array([1], dtype=np.int64)
    top = max(1, min(units, limit))
    raw = np.concatenate([np.arange(1, min(top, 16) + 1), np.unique(np.round(1.25 ** np.arange(60)).astype(np.int64)),
                          [top]])
    raw = raw[(raw >= 1) & (raw <= top)]
    per = cost.ceil_div(units, raw)
    return np.unique(cost.ceil_div(units, per))


def _grains(dtype: DType, target: Target) -> tuple[int, int, bool]:
    """(column grain, depth grain, uses AMP)."""
    if dtype.is_floating:
        return target.conv_units(dtype), target.amp_in_channels(dtype), True
    return 1, 1, False


@lru_cache(maxsize=256)
def plan_matmul(G: int, M: int, N: int, K: int, dtype: DType, target: Target, a_shared: bool = False,
                b_shared: bool = False) -> MatMulPlan:
    """The cheapest split of a ``[G,M,K] @ [G,K,N]`` matmul on ``target`` (see module doc)."""
    gn, gk, amp = _grains(dtype, target)
    nu, ku = -(-N // gn), -(-K // gk)
    T = target.tiles
    axes = [_candidates(G, T), _candidates(M, T), _candidates(nu, T), _candidates(ku, T)]
    bg, bm, bn, bk = (a.ravel() for a in np.meshgrid(*axes, indexing="ij"))
    ok = bg * bm * bn * bk <= T
    bg, bm, bn, bk = bg[ok], bm[ok], bn[ok], bk[ok]
    g, m = cost.ceil_div(G, bg), cost.ceil_div(M, bm)
    ng, kg = cost.ceil_div(nu, bn), cost.ceil_div(ku, bk)
    n, k = np.minimum(ng * gn, N), np.minimum(kg * gk, K)
    cycles, temp = _plan_cost(g, m, n, k, ng, kg, bg, bm, bn, bk, dtype, target, amp, a_shared, b_shared)
    best = _choose(cycles, temp, target)
    return MatMulPlan(G, M, N, K, dtype, int(bg[best]), int(bm[best]), int(bn[best]), int(bk[best]), int(g[best]),
                      int(m[best]), int(n[best]), int(k[best]), int(cycles[best]), int(temp[best]))


def _plan_cost(g, m, n, k, ng, kg, bg, bm, bn, bk, dtype: DType, target: Target, amp: bool, a_shared: bool,
               b_shared: bool) -> tuple[np.ndarray, np.ndarray]:
    es = dtype.size
    rate = target.exchange_bytes_per_cycle
    a_rep = bn * (bg if a_shared else 1)
    b_rep = bm * (bg if b_shared else 1)
    received = g * es * (m * k * (a_rep - 1) // a_rep + k * n * (b_rep - 1) // b_rep)
    if amp:
        compute = cost.conv_partial_cycles(m, ng, kg, g, dtype == dtypes.float16, target.conv_units(dtype),
                                           target.amp_in_channels(dtype), target.workers)
    else:
        compute = cost.int_matmul_cycles(m, n, k, g)
    sync = target.sync_cycles
    cycles = sync + cost.ceil_div(received, rate) + sync + compute
    partials = g * m * n * 4
    red_rows = cost.ceil_div(m, bk)
    red_in = (bk - 1) * red_rows * n * g * 4
    red = cost.reduce_add_cycles(red_rows * n * g, bk, target.workers)
    multi = bk > 1
    cycles = cycles + np.where(multi, 2 * sync + cost.ceil_div(red_in, rate) + red, 0)
    temp = g * es * (m * k + k * n) + partials + np.where(multi, red_in, 0)
    return cycles, temp


def _choose(cycles: np.ndarray, temp: np.ndarray, target: Target) -> int:
    bound = target.available_memory_proportion * target.bytes_per_tile
    while bound <= 2 * target.bytes_per_tile:
        fits = np.flatnonzero(temp <= bound)
        if fits.size:
            return int(fits[np.lexsort((temp[fits], cycles[fits]))[0]])
        bound *= 2
    return int(np.lexsort((temp, cycles))[0])


# ----------------------------------------------------------------------------------------------
# Layouts


def _block_sizes(total: int, per: int, count: int) -> np.ndarray:
    return np.clip(total - np.arange(count) * per, 0, per)


@dataclass(frozen=True)
class Blocked:
    """A stored ``[groups, rows, cols]`` tensor whose (row block, column block) pair picks a plan
    block, split row-wise over ``reps`` tiles that all need it. ``tile(g, rb, cb, rep)``."""

    groups: int
    rows: int
    cols: int
    row_block: int
    col_block: int
    reps: int
    tile: Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], np.ndarray]

    def owner_rep(self, r: np.ndarray) -> np.ndarray:
        """Which of the ``reps`` tiles holds stored row ``r`` (rows of a block split evenly)."""
        rb = r // self.row_block
        in_block = np.minimum(self.row_block, self.rows - rb * self.row_block)
        return (r - rb * self.row_block) * self.reps // np.maximum(in_block, 1)

    def mapping(self, num_tiles: int) -> TileMapping:
        """Intervals: each stored row cut at column-block boundaries, on its owner tile."""
        ncb = -(-self.cols // self.col_block)
        g, r, cb = (a.ravel() for a in np.meshgrid(np.arange(self.groups), np.arange(self.rows), np.arange(ncb),
                                                    indexing="ij"))
        start = (g * self.rows + r) * self.cols + cb * self.col_block
        tiles = self.tile(g, r // self.row_block, cb, self.owner_rep(r))
        size = self.groups * self.rows * self.cols
        return TileMapping(size, np.append(start, size), tiles, num_tiles)


def operand_layout(plan: MatMulPlan, which: str, groups: int, transposed: bool) -> Blocked:
    """The planner's layout of operand ``a`` or ``b`` (stored ``groups`` matrices, maybe transposed)."""
    ms, ns, ks = plan.m, plan.n, plan.k
    bG = plan.bG
    gs = plan.g
    shared = groups == 1 and plan.G > 1

    if which == "a":
        rows, cols, rb_size, cb_size = (plan.K, plan.M, ks, ms) if transposed else (plan.M, plan.K, ms, ks)
        reps = plan.bN * (bG if shared else 1)

        def tile(g, rb, cb, rep):  # type: ignore[no-untyped-def]
            i, l = (cb, rb) if transposed else (rb, cb)
            gb = rep // plan.bN if shared else g // gs
            return plan.tile(gb, i, rep % plan.bN, l)
    else:
        rows, cols, rb_size, cb_size = (plan.N, plan.K, ns, ks) if transposed else (plan.K, plan.N, ks, ns)
        reps = plan.bM * (bG if shared else 1)

        def tile(g, rb, cb, rep):  # type: ignore[no-untyped-def]
            l, j = (cb, rb) if transposed else (rb, cb)
            gb = rep // plan.bM if shared else g // gs
            return plan.tile(gb, rep % plan.bM, j, l)

    return Blocked(groups, rows, cols, rb_size, cb_size, reps, tile)


def output_layout(plan: MatMulPlan) -> Blocked:
    """The output ``[G, M, N]``: block ``(g, i, j)`` on its ``bK`` tiles, rows split between them."""

    def tile(g, rb, cb, rep):  # type: ignore[no-untyped-def]
        return plan.tile(g // plan.g, rb, cb, rep)

    return Blocked(plan.G, plan.M, plan.N, plan.m, plan.n, plan.bK, tile)


def tile_blocks(plan: MatMulPlan, num_tiles: int) -> dict[str, np.ndarray]:
    """Per-tile block sizes (``g, m, n, k``, 0 on tiles outside the plan) and reduce rows."""
    gb, i, j, l = (a.ravel() for a in np.meshgrid(np.arange(plan.bG), np.arange(plan.bM), np.arange(plan.bN),
                                                   np.arange(plan.bK), indexing="ij"))
    t = plan.tile(gb, i, j, l)
    sizes = {
        "g": _block_sizes(plan.G, plan.g, plan.bG)[gb],
        "m": _block_sizes(plan.M, plan.m, plan.bM)[i],
        "n": _block_sizes(plan.N, plan.n, plan.bN)[j],
        "k": _block_sizes(plan.K, plan.k, plan.bK)[l],
    }
    m = sizes["m"]
    sizes["red_rows"] = cost.ceil_div(m * (l + 1), plan.bK) - cost.ceil_div(m * l, plan.bK)
    out = {}
    for name, v in sizes.items():
        arr = np.zeros(num_tiles, np.int64)
        arr[t] = v
        out[name] = arr
    return out


def block_exchange(src: TileMapping, need: Blocked, elem_bytes: int) -> Exchange:
    """Exchange giving every plan tile the whole operand block it multiplies.

    The stored rows are cut at column-block and source-layout boundaries into pieces, each in one
    block on one holder tile. A consumer receives its block minus what it already holds; a holder
    sends its share of a block once, multicast to all other consumers of that block.
    """
    T = src.num_tiles
    rows = need.groups * need.rows
    if rows == 0 or need.cols == 0:
        return Exchange.zeros(T)
    base = np.arange(rows, dtype=np.int64) * need.cols
    ncb, nrb = -(-need.cols // need.col_block), -(-need.rows // need.row_block)
    col_cuts = TileMapping(need.cols, np.minimum(np.arange(ncb + 1) * need.col_block, need.cols),
                           np.zeros(ncb, np.int64), T)
    run, t0, plen = split_runs(np.full(rows, need.cols, np.int64), [(base, src), (np.zeros(rows, np.int64), col_cuts)])
    g, r = np.divmod(run, need.rows)
    block = (g * nrb + r // need.row_block) * ncb + t0 // need.col_block
    nblocks = need.groups * nrb * ncb
    size = np.bincount(block, weights=plen, minlength=nblocks).astype(np.int64)
    # held[b, h]: elements of block b on tile h (sorted distinct keys b*T + h)
    key = block * T + src.tile_of(base[run] + t0)
    order = np.argsort(key, kind="stable")
    hkeys = unique(key)
    held = np.bincount(np.searchsorted(hkeys, key[order]), weights=plen[order], minlength=hkeys.size).astype(np.int64)
    hb, hh = np.divmod(hkeys, T)
    holders = np.bincount(hb, minlength=nblocks)
    # consumers: every rep of every block
    bb, rep = (a.ravel() for a in np.meshgrid(np.arange(nblocks), np.arange(need.reps), indexing="ij"))
    bg, rest = np.divmod(bb, nrb * ncb)
    rb, cb = np.divmod(rest, ncb)
    ct = need.tile(bg, rb, cb, rep)
    ckeys = bb * T + ct
    pos = np.clip(np.searchsorted(hkeys, ckeys), 0, max(hkeys.size - 1, 0))
    own = np.where(hkeys[pos] == ckeys, held[pos], 0) if hkeys.size else np.zeros_like(ckeys)
    bytes_in = np.bincount(ct, weights=(size[bb] - own) * elem_bytes, minlength=T).astype(np.int64)
    msgs_in = np.bincount(ct, weights=holders[bb] - (own > 0), minlength=T).astype(np.int64)
    sorted_c = np.sort(ckeys)
    at = np.clip(np.searchsorted(sorted_c, hkeys), 0, max(sorted_c.size - 1, 0))
    consumer = sorted_c[at] == hkeys if sorted_c.size else np.zeros(hkeys.size, bool)
    sends = need.reps - consumer.astype(np.int64)
    bytes_out = np.bincount(hh, weights=held * (sends > 0) * elem_bytes, minlength=T).astype(np.int64)
    msgs_out = np.bincount(hh, weights=sends, minlength=T).astype(np.int64)
    return Exchange(bytes_in, bytes_out, msgs_in, msgs_out)
