"""The matmul planner (``docs/ipu_hardware.md`` §4.1–4.3).

A batched matmul ``[G, M, K] @ [G, K, N]`` is split over tiles as ``bG x bM x bN x bK`` blocks:
tile ``(g, i, j, l)`` computes the partial product of row block ``i``, column block ``j`` and
depth block ``l`` with one ``ConvPartial1x1Out`` AMP vertex; when ``bK > 1`` one compute set per
reduce stage (``cost.reduce_stages``: 1 to 3) sums the ``bK`` partials (``ReduceAdd``). Grains: rows
1, columns = AMP conv units, depth = AMP input channels (§4.1). Every candidate split is costed at once with NumPy:

    cycles = passes x (sync + exchange(operands) + sync + AMP
                       [+ (sync + exchange(partials) + sync + ReduceAdd) per reduce stage])  (bK > 1)
    temp   = operand blocks on the tile + partials [+ received partials]     (one pass)

Tiles of a supertile that multiply the same block of A receive it at twice the rate (§3.8). The
cheapest plan whose temporary memory fits ``availableMemoryProportion x bytes_per_tile`` wins (ties:
less memory); when no single-pass plan fits, plans that make several serial passes over a tile's
output columns are tried too (PopLibs' serial output-channel split: less memory, more cycles). If none
fits, the bound is doubled up to twice the tile memory, then the plan of least memory is taken
(poplin's fallback, §4.3, with a warning). Partials are float, or half with ``partialsType='half'``
for half inputs. Operand layouts (``createMatMulInputLHS`` style) put block ``(i, l)`` of A spread
over the ``bN`` tiles that use it, and likewise for B.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, fields
from functools import lru_cache

import numpy as np

from popjit import dtypes
from popjit.dtypes import DType
from popjit.schedule import cost
from popjit.schedule.intervals import Exchange, split_runs, unique
from popjit.schedule.mapping import TileMapping
from popjit.schedule.target import DEFAULT_PLAN_OPTIONS, PlanOptions, Target

log = logging.getLogger("popjit")


@dataclass(frozen=True)
class MatMulPlan:
    """A chosen split and its estimate. ``m, n, k, g`` are the largest per-tile block sizes; ``serial``
    passes each take ``n_pass`` of a tile's ``n`` output columns (PopLibs' serial output-channel split),
    so ``cycles`` covers every pass and ``temp_bytes`` is one pass's. A ``swapped`` plan computes
    ``Cᵀ = Bᵀ Aᵀ`` (PopLibs' ``swapOperands`` transform): ``M`` and ``N`` are then the product's columns
    and rows, and its operand ``a`` is the statement's ``b``."""

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
    serial: int = 1
    n_pass: int = 0
    half_partials: bool = False
    swapped: bool = False

    @property
    def tiles(self) -> int:
        return self.bG * self.bM * self.bN * self.bK

    @property
    def partial_bytes(self) -> int:
        """Bytes of one partial product."""
        return 2 if self.half_partials else 4

    def tile(self, gb: np.ndarray, i: np.ndarray, j: np.ndarray, l: np.ndarray) -> np.ndarray:
        """Tile of block ``(gb, i, j, l)``: output-column splits innermost (they share inputs on a
        supertile, §4.2), then depth, rows, groups."""
        return ((gb * self.bM + i) * self.bK + l) * self.bN + j

    def describe(self) -> str:
        serial = f", {self.serial} serial passes of {self.n_pass} columns" if self.serial > 1 else ""
        swapped = ", operands swapped (C^T = B^T A^T)" if self.swapped else ""
        return (f"split G{self.bG} x M{self.bM} x N{self.bN} x K{self.bK} = {self.tiles} tiles, "
                f"per tile [{self.g}x]{self.m}x{self.k} @ {self.k}x{self.n}{serial}{swapped}")


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


def _serial_candidates(column_groups: int) -> np.ndarray:
    """Serial passes worth trying: 1 and powers of two up to the column groups of a tile."""
    return np.unique(np.minimum(1 << np.arange(max(1, column_groups).bit_length() + 1), max(1, column_groups)))


def _grains(dtype: DType, target: Target) -> tuple[int, int, bool]:
    """(column grain, depth grain, uses AMP)."""
    if dtype.is_floating:
        return target.conv_units(dtype), target.amp_in_channels(dtype), True
    return 1, 1, False


@dataclass(frozen=True)
class _Space:
    """Candidate plans as parallel arrays: the splits, per-tile blocks and serial passes."""

    bg: np.ndarray
    bm: np.ndarray
    bn: np.ndarray
    bk: np.ndarray
    serial: np.ndarray
    g: np.ndarray
    m: np.ndarray
    n: np.ndarray
    k: np.ndarray
    ng_pass: np.ndarray  # column groups per pass
    n_pass: np.ndarray
    kg: np.ndarray
    swapped: np.ndarray

    def __add__(self, other: _Space) -> _Space:
        return _Space(*(np.concatenate([getattr(self, f.name), getattr(other, f.name)]) for f in fields(self)))


def _space(G: int, M: int, N: int, K: int, dtype: DType, target: Target, serial: bool, swapped: bool = False) -> _Space:
    gn, gk, _ = _grains(dtype, target)
    nu, ku = -(-N // gn), -(-K // gk)
    T = target.tiles
    axes = [_candidates(G, T), _candidates(M, T), _candidates(nu, T), _candidates(ku, T),
            _serial_candidates(nu) if serial else np.array([1], np.int64)]
    bg, bm, bn, bk, s = (a.ravel() for a in np.meshgrid(*axes, indexing="ij"))
    ng = cost.ceil_div(nu, bn)
    ok = (bg * bm * bn * bk <= T) & (s <= ng)
    bg, bm, bn, bk, s, ng = bg[ok], bm[ok], bn[ok], bk[ok], s[ok], ng[ok]
    ng_pass = cost.ceil_div(ng, s)
    kg = cost.ceil_div(ku, bk)
    n = np.minimum(ng * gn, N)
    return _Space(bg, bm, bn, bk, s, cost.ceil_div(G, bg), cost.ceil_div(M, bm), n, np.minimum(kg * gk, K), ng_pass,
                  np.minimum(ng_pass * gn, n), kg, np.full(bg.size, swapped))


def _spaces(G: int, M: int, N: int, K: int, dtype: DType, target: Target, serial: bool) -> _Space:
    """Candidates of both orientations (swapping the operands changes nothing without the AMP's grains)."""
    plain = _space(G, M, N, K, dtype, target, serial)
    return plain + _space(G, N, M, K, dtype, target, serial, swapped=True) if dtype.is_floating else plain


@lru_cache(maxsize=256)
def plan_matmul(G: int, M: int, N: int, K: int, dtype: DType, target: Target, a_shared: bool = False,
                b_shared: bool = False, options: PlanOptions = DEFAULT_PLAN_OPTIONS, name: str = "") -> MatMulPlan:
    """The cheapest split of a ``[G,M,K] @ [G,K,N]`` matmul on ``target`` under ``options`` (see module
    doc). Serial passes are tried only when no single-pass plan fits the memory bound."""
    half = options.half_partials and dtype == dtypes.float16
    bound = options.available_memory_proportion * target.bytes_per_tile
    space = _spaces(G, M, N, K, dtype, target, serial=False)
    cycles, temp = _plan_cost(space, dtype, target, a_shared, b_shared, half)
    if not (temp <= bound).any():
        space = _spaces(G, M, N, K, dtype, target, serial=True)
        cycles, temp = _plan_cost(space, dtype, target, a_shared, b_shared, half)
    best = _choose(cycles, temp, bound, target.bytes_per_tile, name or f"[{G}x]{M}x{K} @ {K}x{N}")
    pick = {f: int(getattr(space, f)[best]) for f in ("bg", "bm", "bn", "bk", "g", "m", "n", "k", "serial", "n_pass")}
    swapped = bool(space.swapped[best])
    rows, cols = (N, M) if swapped else (M, N)
    return MatMulPlan(G, rows, cols, K, dtype, pick["bg"], pick["bm"], pick["bn"], pick["bk"], pick["g"], pick["m"],
                      pick["n"], pick["k"], int(cycles[best]), int(temp[best]), pick["serial"], pick["n_pass"], half,
                      swapped)


def _plan_cost(sp: _Space, dtype: DType, target: Target, a_shared: bool, b_shared: bool,
               half_partials: bool) -> tuple[np.ndarray, np.ndarray]:
    """Cycles of every pass together, and one pass's temporary bytes, of every candidate."""
    es = dtype.size
    rate = target.exchange_bytes_per_cycle
    g, m, n, k, bg, bm, bn, bk = sp.g, sp.m, sp.n_pass, sp.k, sp.bg, sp.bm, sp.bn, sp.bk
    # why: swapped, the statement's b is the product's first operand
    first_shared = np.where(sp.swapped, b_shared, a_shared)
    second_shared = np.where(sp.swapped, a_shared, b_shared)
    a_rep = bn * np.where(first_shared, bg, 1)
    b_rep = bm * np.where(second_shared, bg, 1)
    a_in = g * es * (m * k * (a_rep - 1) // a_rep)
    b_in = g * es * (k * n * (b_rep - 1) // b_rep)
    # why: tiles of a supertile that multiply the same A block receive it together, at twice the rate
    a_cycles = np.where(bn % 2 == 0, cost.ceil_div(a_in, 2 * rate), cost.ceil_div(a_in, rate))
    if dtype.is_floating:
        compute = cost.conv_partial_cycles(m, sp.ng_pass, sp.kg, g, dtype == dtypes.float16, target.conv_units(dtype),
                                           target.amp_in_channels(dtype), target.workers, half_partials=half_partials)
    else:
        compute = cost.int_matmul_cycles(m, n, k, g)
    sync = target.sync_cycles
    pbytes = 2 if half_partials else 4
    cycles = sync + a_cycles + cost.ceil_div(b_in, rate) + sync + compute
    partials = g * m * n * pbytes
    outputs = cost.ceil_div(m, bk) * n * g  # final outputs a tile reduces
    red_in = np.zeros_like(partials)
    for depth, left in cost.reduce_stages(bk):
        received = (depth - 1) * outputs * left * pbytes
        stage = 2 * sync + cost.ceil_div(received, rate) + cost.reduce_add_cycles(outputs * left, depth, target.workers,
                                                                                 half_partials)
        cycles = cycles + np.where(depth > 1, stage, 0)
        red_in = np.maximum(red_in, received)
    return sp.serial * cycles, g * es * (m * k + k * n) + partials + red_in


def _choose(cycles: np.ndarray, temp: np.ndarray, bound: float, bytes_per_tile: int, name: str) -> int:
    """The fastest plan (ties: the smaller) within ``bound`` temporary bytes per tile; if none fits, the
    bound doubles up to twice the tile memory, then the plan of least memory is taken (PopLibs'
    fallback, with its warnings). A bound of 0 asks for the least memory."""
    least = int(np.lexsort((cycles, temp))[0])
    if bound <= 0:
        return least
    while True:
        fits = np.flatnonzero(temp <= bound)
        if fits.size:
            return int(fits[np.lexsort((temp[fits], cycles[fits]))[0]])
        if bound * 2 > 2 * bytes_per_tile:
            break
        bound *= 2
        log.warning("Unable to meet the memory target of matmul %s: retrying with a per-tile memory limit of %d "
                    "bytes.", name, int(bound))
    log.warning("Unable to meet the memory target of matmul %s: optimising for minimum memory (%d bytes per tile).",
                name, int(temp[least]))
    return least


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
    """The planner's layout of the statement's operand ``a`` or ``b`` (stored ``groups`` matrices, maybe
    transposed). Swapped, ``a`` (stored ``[M, K]``) is the product's second operand ``Aᵀ`` stored
    transposed, and ``b`` its first."""
    if plan.swapped:
        return _planned_operand_layout(plan, "b" if which == "a" else "a", groups, not transposed)
    return _planned_operand_layout(plan, which, groups, transposed)


def _planned_operand_layout(plan: MatMulPlan, which: str, groups: int, transposed: bool) -> Blocked:
    """The layout of the planned product's operand ``which``."""
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
    """The output ``[G, M, N]`` of the statement: block ``(g, i, j)`` on its ``bK`` tiles, rows split between
    them (swapped, the stored rows are the product's columns)."""
    if plan.swapped:
        def swapped_tile(g, rb, cb, rep):  # type: ignore[no-untyped-def]
            return plan.tile(g // plan.g, cb, rb, rep)

        return Blocked(plan.G, plan.N, plan.M, plan.n, plan.m, plan.bK, swapped_tile)

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
