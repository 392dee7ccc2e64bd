"""Which tile computes each point of a kernel and which tiles hold what it reads: the vectorised
engine behind exchange bytes, per-tile work and reduction partials.

A kernel's points (its ``domain`` × ``rdomain``, row-major) are walked as *runs* along one loop
variable. Runs are first cut where a clamp (min/max) starts or stops biting or a div/mod steps,
so every index expression is affine along each run; then wherever a stride-1 expression crosses a
tile-mapping boundary, giving *pieces* whose every expression lives on one tile. Expressions with
other strides (transposes) expand the runs to single points. Data-dependent indices (gathers)
cannot be resolved at compile time and use the uniform-access model of
:func:`~popjit.schedule.intervals.unknown_exchange` [U].

Everything is arrays: a 1472-tile, multi-MiB element-wise kernel is a few thousand pieces.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from popjit.ir.loop import (
    AtomCollector,
    ExprMutator,
    IAtom,
    IDiv,
    ILin,
    IMax,
    IMin,
    IMod,
    IValue,
    IVar,
    LoopFunctor,
)
from popjit.schedule.intervals import split_runs
from popjit.schedule.mapping import TileMapping

#: Above this many points a kernel's non-affine loads use the uniform-access model instead of
#: being expanded point by point (keeps scheduling in milliseconds).
EXPAND_LIMIT = 1 << 22


# ----------------------------------------------------------------------------------------------
# Kernel points → pieces


class _Unknown(Exception):
    """An index depends on data (a gather)."""


class _AffineEvaluator(LoopFunctor):
    """An index expression for arrays of loop-variable values (broadcasting; no gathered values)."""

    def __init__(self, env: dict[str, np.ndarray]) -> None:
        self.env = env

    def index(self, ix: ILin) -> np.ndarray:
        acc: np.ndarray | int = ix.const
        for atom, c in ix.terms:
            acc = acc + c * self.atom(atom)
        return np.asarray(acc, dtype=np.int64)

    def visit_var(self, a: IVar) -> np.ndarray:
        return self.env[a.name]

    def visit_div(self, a: IDiv) -> np.ndarray:
        return np.floor_divide(self.index(a.x), a.c)

    def visit_mod(self, a: IMod) -> np.ndarray:
        return np.mod(self.index(a.x), a.c)

    def visit_min(self, a: IMin) -> np.ndarray:
        return np.minimum(self.index(a.a), self.index(a.b))

    def visit_max(self, a: IMax) -> np.ndarray:
        return np.maximum(self.index(a.a), self.index(a.b))

    def visit_value(self, a: IValue) -> np.ndarray:
        raise _Unknown


def eval_index(ix: ILin, env: dict[str, np.ndarray]) -> np.ndarray:
    """Evaluate an index expression for arrays of loop-variable values (``_Unknown`` for a gather)."""
    return _AffineEvaluator(env).index(ix)


def data_dependent(ix: ILin) -> bool:
    """Whether an index depends on data (a gather or scatter)."""
    return any(isinstance(a, IValue) for a in ix.atoms())


@dataclass
class Ref:
    """An index expression into a buffer laid out by ``mapping``."""

    index: ILin
    mapping: TileMapping


@dataclass
class Pieces:
    """Pieces of a kernel's points; per ref, each piece's first element, span and tile.

    ``span`` is the number of elements a piece touches (its length for stride-1 refs, else 1),
    clipped to the buffer. A data-dependent ref has ``unknown`` set and no starts or tiles; an
    ``injective`` ref reads every element at most once over the whole kernel.
    """

    length: np.ndarray
    starts: list[np.ndarray] = field(default_factory=list)
    spans: list[np.ndarray] = field(default_factory=list)
    tiles: list[np.ndarray] = field(default_factory=list)
    unknown: list[bool] = field(default_factory=list)
    injective: list[bool] = field(default_factory=list)

    def interval(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        return self.starts[k], self.starts[k] + self.spans[k]


class _Unclamp(ExprMutator):
    """Replaces each ``min``/``max`` clamp by the index it clamps (its non-constant side)."""

    def visit_min(self, a: IMin | IMax) -> ILin:
        return self.index(a.b if a.a.is_const else a.a)

    visit_max = visit_min

    def visit_value(self, a: IValue) -> ILin:
        return ILin(((a, 1),), 0)


def unclamp(ix: ILin) -> ILin:
    """``ix`` with ``min``/``max`` clamps replaced by the index they clamp (used to find where a
    clamp starts and stops biting, and to pick the run variable)."""
    return _Unclamp().index(ix)


def _stride(ix: ILin, var: str) -> int | None:
    """The coefficient of ``var`` if ``ix`` is affine in it, else None."""
    v = IVar(var)
    return ix.coef(v) if ix.linear_in(v) else None


def is_injective(ix: ILin, names: Sequence[str], dims: Sequence[int]) -> bool:
    """Whether an affine index maps distinct points to distinct elements (mixed-radix strides)."""
    if not all(isinstance(a, IVar) for a, _ in ix.terms):
        return False
    coefs = sorted((abs(ix.coef(IVar(n))), d) for n, d in zip(names, dims) if d > 1)
    reach = 0
    for c, d in coefs:
        if c <= reach:
            return False
        reach += c * (d - 1)
    return True


def choose_run_var(names: Sequence[str], dims: Sequence[int], ix: ILin) -> str | None:
    """The loop variable to run along: unit stride in ``ix`` (the compute ref), longest first."""
    best: tuple[int, int, str] | None = None
    for name, d in zip(names, dims):
        if d <= 1:
            continue
        s = _stride(ix, name)
        score = 2 if s == 1 else (1 if s is not None and s != 0 else 0)
        if best is None or (score, d) > best[:2]:
            best = (score, d, name)
    return best[2] if best else None


# ----------------------------------------------------------------------------------------------
# Breakpoints of piecewise-affine indices


def _var_atoms(ix: ILin, var: str) -> list[IAtom]:
    """Non-linear atoms (at any depth) whose value moves with ``var`` (not inside gathered values)."""
    v = IVar(var)
    out: list[IAtom] = []
    for a, _ in ix.terms:
        if isinstance(a, (IVar, IValue)) or v not in AtomCollector().inside(a):
            continue
        out.append(a)
        for inner in _args(a):
            out.extend(_var_atoms(inner, var))
    return out


def _args(a: IAtom) -> list[ILin]:
    """The index arguments of a div, mod, min or max."""
    if isinstance(a, (IDiv, IMod)):
        return [a.x]
    if isinstance(a, (IMin, IMax)):
        return [a.a, a.b]
    raise TypeError(a)


def _slope(ix: ILin, var: str, env: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Value at ``var = t_start`` and step per unit of ``var`` (of an affine expression)."""
    n = env[var].shape
    x0 = np.broadcast_to(eval_index(ix, env), n)
    return x0, np.broadcast_to(eval_index(ix, {**env, var: env[var] + 1}), n) - x0


def _crossings(x0: np.ndarray, s: np.ndarray, c: int, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Runs and offsets ``t`` (0 < t < L) where ``floor((x0 + s t) / c)`` changes."""
    end = x0 + s * (lengths - 1)
    up = s > 0
    k0 = np.where(up, x0 // c + 1, end // c + 1)
    k1 = np.where(up, end // c, x0 // c)
    counts = np.where(s != 0, np.maximum(k1 - k0 + 1, 0), 0)
    run = np.repeat(np.arange(x0.size), counts)
    k = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts) + np.repeat(k0, counts)
    sr, xr = s[run], x0[run]
    t = np.where(sr > 0, -((xr - k * c) // sr), (xr - k * c) // -sr + 1)
    return run, t


def breakpoints(ix: ILin, var: str, env: dict[str, np.ndarray], lengths: np.ndarray,
                budget: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Positions ``(run, t)`` splitting every run into pieces on which ``ix`` is affine, or None
    if there would be more than ``budget``. Clamps (min/max) bend where their arguments cross;
    div/mod step where the argument crosses a multiple of the divisor."""
    runs, ts = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
    for a in _var_atoms(ix, var):
        if isinstance(a, (IMin, IMax)):
            d0, ds = _slope(unclamp(a.a) - unclamp(a.b), var, env)
            ok = ds != 0
            t = np.where(ok, -(d0 // np.where(ok, ds, 1)), 0)
            t = np.where(ok & (ds < 0), (d0 // np.where(ok, -ds, 1)) + 1, t)
            keep = ok & (t > 0) & (t < lengths)
            runs.append(np.flatnonzero(keep))
            ts.append(t[keep])
        elif isinstance(a, (IDiv, IMod)):
            x0, s = _slope(unclamp(a.x), var, env)
            run, t = _crossings(x0, s, a.c, lengths)
            runs.append(run)
            ts.append(t)
        if sum(r.size for r in runs) > budget:
            return None
    return np.concatenate(runs), np.concatenate(ts)


# ----------------------------------------------------------------------------------------------
# The walk


def walk(names: Sequence[str], dims: Sequence[int], refs: Sequence[Ref], compute: int = 0) -> Pieces:
    """Cut a kernel's points into pieces on which every ref lives on one tile and is affine."""
    total = int(np.prod(dims, dtype=np.int64)) if dims else 1
    if total == 0:
        return Pieces(np.zeros(0, np.int64))
    unknown = [data_dependent(r.index) for r in refs]
    injective = [not u and is_injective(r.index, names, dims) for r, u in zip(refs, unknown)]
    var = choose_run_var(names, dims, unclamp(refs[compute].index))
    if var is None:
        return _points(refs, names, dims, total, unknown, injective)
    env, lengths = _run_env(names, dims, var)
    runs, ts = [], []
    for k, r in enumerate(refs):
        if unknown[k]:
            continue
        bp = breakpoints(r.index, var, env, lengths, budget=total // 4)
        if bp is None:
            if total <= EXPAND_LIMIT or k == compute:
                return _points(refs, names, dims, total, unknown, injective)
            unknown[k] = True
            continue
        runs.append(bp[0])
        ts.append(bp[1])
    if runs and sum(r.size for r in runs):
        offs = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        run, t0, lengths = split_runs(lengths, [], offs[np.concatenate(runs)] + np.concatenate(ts))
        env = {n: v[run] for n, v in env.items()}
        env[var] = t0
    bases, strides = [], []
    for r, u in zip(refs, unknown):
        if u:
            bases.append(None)
            strides.append(None)
            continue
        b, s = _slope(r.index, var, env)
        bases.append(np.broadcast_to(b, lengths.shape))
        strides.append(np.where(lengths > 1, s, 0))
    odd = [k for k, s in enumerate(strides) if s is not None and not np.isin(s, (0, 1)).all()]
    if odd:
        if total <= EXPAND_LIMIT or compute in odd:
            return _points(refs, names, dims, total, unknown, injective)
        for k in odd:
            unknown[k], bases[k], strides[k] = True, None, None
    pieces = _cut(refs, bases, strides, lengths)
    pieces.injective = injective
    return pieces


def _point_env(names: Sequence[str], dims: Sequence[int]) -> dict[str, np.ndarray]:
    if not dims:
        return {}
    idx = np.unravel_index(np.arange(int(np.prod(dims))), tuple(dims))
    return {n: i.astype(np.int64) for n, i in zip(names, idx)}


def _run_env(names: Sequence[str], dims: Sequence[int], var: str) -> tuple[dict[str, np.ndarray], np.ndarray]:
    others = [(n, d) for n, d in zip(names, dims) if n != var]
    runs = int(np.prod([d for _, d in others], dtype=np.int64)) if others else 1
    env: dict[str, np.ndarray] = {var: np.zeros(runs, np.int64)}
    if others:
        idx = np.unravel_index(np.arange(runs), tuple(d for _, d in others))
        env.update({n: i.astype(np.int64) for (n, _), i in zip(others, idx)})
    return env, np.full(runs, dims[list(names).index(var)], np.int64)


def _add_ref(out: Pieces, start: np.ndarray | None, mapping: TileMapping, span: np.ndarray) -> None:
    """Record one ref's pieces, clipped to its buffer (out-of-range lanes read nothing)."""
    out.unknown.append(start is None)
    if start is None:
        for lst in (out.starts, out.spans, out.tiles):
            lst.append(np.zeros(0, np.int64))
        return
    lo = np.clip(start, 0, mapping.size)
    hi = np.clip(start + span, 0, mapping.size)
    out.starts.append(lo)
    out.spans.append(hi - lo)
    out.tiles.append(mapping.tile_of(lo))


def _cut(refs: Sequence[Ref], bases: list, strides: list, lengths: np.ndarray) -> Pieces:
    """Cut affine runs where any unit-stride ref crosses a tile boundary."""
    cuts = [(b, r.mapping, s == 1) for b, r, s in zip(bases, refs, strides) if b is not None]
    run, t0, plen = split_runs(lengths, cuts)
    out = Pieces(plen)
    for b, r, s in zip(bases, refs, strides):
        if b is None:
            _add_ref(out, None, r.mapping, plen)
            continue
        sr = s[run]
        _add_ref(out, b[run] + sr * t0, r.mapping, np.where(sr == 1, plen, 1))
    return out


def _points(refs: Sequence[Ref], names: Sequence[str], dims: Sequence[int], total: int, unknown: list[bool],
            injective: list[bool]) -> Pieces:
    """Every point its own piece (strided or irregular indices)."""
    env = _point_env(names, dims)
    ones = np.ones(total, np.int64)
    out = Pieces(ones)
    for r, u in zip(refs, unknown):
        try:
            start = None if u else np.broadcast_to(eval_index(r.index, env), (total,))
        except _Unknown:
            start = None
        _add_ref(out, start, r.mapping, ones)
    out.injective = injective
    return out
