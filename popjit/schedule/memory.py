"""Per-tile memory: always-live categories, liveness of temporaries over the program steps, peak,
and the out-of-memory report (``docs/ipu_hardware.md`` §2.5–2.6, §3.8).

Always live: variables, constants, vertex code (once per codelet per tile), vertex state, copy
descriptors, internal exchange code (per exchange phase) and control code. Not always live:
arguments (from the start to their last use), results (from their first write to the end),
temporaries (first to last use) and each step's exchange buffers and partials. A buffer used in a
loop and outside it, or read in the loop before it is written there (carried), stays live for
the whole loop [U: ordinary liveness, as Poplar's is not published]. Both branches of an ``If``
are laid out one after the other, so a tensor used in only one branch is live only there.
``peak[t] = always_live[t] + max over steps of not_always_live[t, step]`` (§2.5; no gaps).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from popjit.ir.loop import Buffer
from popjit.schedule import cost
from popjit.schedule.computesets import ComputeSet
from popjit.schedule.mapping import TileMapping

ALWAYS_LIVE = ("variables", "constants", "controlCode", "vertexCode", "vertexInstanceState", "copyDescriptor",
               "internalExchangeCode")
NOT_ALWAYS_LIVE = ("temporaries", "exchangeBuffers")
CATEGORIES = ALWAYS_LIVE + NOT_ALWAYS_LIVE

ADVICE = (
    "Graphcore's advice for fitting a model in tile memory (Memory and Performance Optimisation guide):",
    "  - Lower the matmul/convolution option availableMemoryProportion (default 0.6) to trade speed for "
    "temporary memory, e.g. 0.1-0.3 (IPUConfig.matmuls.poplar_options, convolutions.poplar_options).",
    "  - Reduce the (micro-)batch size; keep the effective batch size with gradient accumulation.",
    "  - Use FP16 for weights and activations, with partialsType='half' for their matmul/convolution partials.",
    "  - Use recomputation (activation checkpointing) instead of keeping forward activations.",
    "  - Split the model over more IPUs: sharding or pipelining (pipelining_ops, layers per IPU stage).",
    "  - Reduce code, exchange and vertex-state overheads: fewer, larger operations and good tile mappings.",
    "  - Inspect the memory report (liveness, largest variables) by compiling under the IPU Model "
    "(TF_POPLAR_FLAGS=--use_ipu_model), which keeps going after an out-of-memory.",
)


class OutOfMemoryWarning(UserWarning):
    """A tile is over its memory and the IPU Model carried on (the report marks it)."""


def buffer_kind_label(buf: Buffer) -> str:
    return {"arg": "argument", "var": "variable", "const": "constant", "out": "result", "temp": "temporary"}[buf.kind]


# ----------------------------------------------------------------------------------------------
# Liveness


@dataclass
class Loop:
    """Steps ``[first, last]`` of a loop's body (and condition)."""

    first: int
    last: int


def liveness(steps: Sequence[ComputeSet], loops: Sequence[Loop], buffers: dict[int, Buffer],
             extra_reads: dict[int, set[int]]) -> dict[int, tuple[int, int]]:
    """Live step range of every not-always-live buffer."""
    n = len(steps)
    uses: dict[int, list[int]] = {}
    for s, cs in enumerate(steps):
        for uid in cs.reads | cs.writes | extra_reads.get(s, set()):
            uses.setdefault(uid, []).append(s)
    ranges: dict[int, list[int]] = {}
    for uid, at in uses.items():
        buf = buffers.get(uid)
        if buf is None or buf.kind in ("var", "const"):
            continue
        ranges[uid] = [0 if buf.kind == "arg" else at[0], n - 1 if buf.kind == "out" else at[-1]]
    for loop in sorted(loops, key=lambda lp: lp.last - lp.first):
        for uid, r in ranges.items():
            at = uses[uid]
            k = bisect.bisect_left(at, loop.first)
            if k == len(at) or at[k] > loop.last:
                continue
            outside = r[0] < loop.first or r[1] > loop.last
            carried = uid in steps[at[k]].reads or uid in extra_reads.get(at[k], set())
            if outside or carried:
                r[0], r[1] = min(r[0], loop.first), max(r[1], loop.last)
    return {uid: (r[0], r[1]) for uid, r in ranges.items()}


# ----------------------------------------------------------------------------------------------
# The memory report


@dataclass
class MemoryReport:
    """Per-tile memory of one schedule (arrays over tiles; per-step arrays over steps)."""

    tiles: int
    bytes_per_tile: int
    always_live: dict[str, np.ndarray]
    live_ranges: dict[int, tuple[int, int]]
    peak_step: np.ndarray  # per tile: the step of its not-always-live peak (-1: no steps)
    peak_temporaries: np.ndarray  # per tile, at its peak step
    peak_exchange: np.ndarray
    step_max_bytes: np.ndarray  # per step: the fullest tile's total
    step_live_bytes: np.ndarray  # per step: not-always-live bytes summed over tiles
    buffer_bytes: dict[int, np.ndarray] = field(default_factory=dict)

    @property
    def always_live_total(self) -> np.ndarray:
        return sum(self.always_live.values(), np.zeros(self.tiles, np.int64))

    @property
    def not_always_live_peak(self) -> np.ndarray:
        return self.peak_temporaries + self.peak_exchange

    @property
    def total(self) -> np.ndarray:
        """Peak bytes per tile."""
        return self.always_live_total + self.not_always_live_peak

    def by_category(self) -> dict[str, np.ndarray]:
        """Bytes per tile by category; the not-always-live ones at each tile's peak step."""
        return {**self.always_live, "temporaries": self.peak_temporaries, "exchangeBuffers": self.peak_exchange}

    @property
    def oom_tiles(self) -> np.ndarray:
        return np.flatnonzero(self.total > self.bytes_per_tile)

    @property
    def peak_tile(self) -> int:
        return int(np.argmax(self.total)) if self.tiles else 0


def memory_report(steps: Sequence[ComputeSet], loops: Sequence[Loop], control_bytes: int,
                  buffers: dict[int, Buffer], mappings: dict[int, TileMapping], tiles: int, bytes_per_tile: int,
                  extra_reads: dict[int, set[int]] | None = None) -> MemoryReport:
    """Always-live categories, liveness and peaks over ``steps`` (program order)."""
    extra_reads = extra_reads or {}
    per_buf = {uid: m.bytes_per_tile(buffers[uid].dtype) for uid, m in mappings.items() if uid in buffers}
    always = _always_live(steps, control_bytes, buffers, per_buf, tiles)
    ranges = liveness(steps, loops, buffers, extra_reads)
    report = MemoryReport(tiles, bytes_per_tile, always, ranges, np.full(tiles, -1, np.int64),
                          np.zeros(tiles, np.int64), np.zeros(tiles, np.int64), np.zeros(len(steps), np.int64),
                          np.zeros(len(steps), np.int64), per_buf)
    _sweep(report, steps, ranges, per_buf)
    return report


def _always_live(steps: Sequence[ComputeSet], control_bytes: int, buffers: dict[int, Buffer],
                 per_buf: dict[int, np.ndarray], tiles: int) -> dict[str, np.ndarray]:
    z = np.zeros(tiles, np.int64)
    out = {c: z.copy() for c in ALWAYS_LIVE}
    for uid, b in per_buf.items():
        kind = buffers[uid].kind
        if kind == "var":
            out["variables"] += b
        elif kind == "const":
            out["constants"] += b
    code_tiles: dict[str, np.ndarray] = {}
    code_size: dict[str, int] = {}
    for cs in steps:
        for name, per_tile in cs.codelets.items():
            code_tiles[name] = code_tiles.get(name, z) | (per_tile > 0)
            code_size[name] = cs.code_bytes.get(name, 0)
        if cs.state_bytes is not None:
            out["vertexInstanceState"] += cs.state_bytes
        if cs.copy_descriptor_bytes is not None:
            out["copyDescriptor"] += cs.copy_descriptor_bytes
        for phase in cs.exchange_phases:
            out["internalExchangeCode"] += cost.exchange_code_bytes(phase.msgs_in, phase.msgs_out,
                                                                    cs.target.instruction_bytes)
    for name, mask in code_tiles.items():
        out["vertexCode"] += mask.astype(np.int64) * code_size[name]
    out["controlCode"] += control_bytes
    return out


def _sweep(report: MemoryReport, steps: Sequence[ComputeSet], ranges: dict[int, tuple[int, int]],
           per_buf: dict[int, np.ndarray]) -> None:
    """Walk the steps once, adding buffers as they become live and dropping them after."""
    tiles = report.tiles
    starts: dict[int, list[int]] = {}
    ends: dict[int, list[int]] = {}
    for uid, (lo, hi) in ranges.items():
        if uid in per_buf:
            starts.setdefault(lo, []).append(uid)
            ends.setdefault(hi, []).append(uid)
    live = np.zeros(tiles, np.int64)
    best = np.full(tiles, -1, np.int64)
    always = report.always_live_total
    for s, cs in enumerate(steps):
        for uid in starts.get(s, ()):
            live += per_buf[uid]
        ex = cs.temp_bytes if cs.temp_bytes is not None else 0
        total = live + ex
        better = total > best
        best = np.where(better, total, best)
        report.peak_step[better] = s
        report.peak_temporaries[better] = live[better]
        report.peak_exchange[better] = (np.broadcast_to(ex, (tiles,)))[better]
        report.step_max_bytes[s] = int((always + total).max(initial=0))
        report.step_live_bytes[s] = int(total.sum())
        for uid in ends.get(s, ()):
            live -= per_buf[uid]


# ----------------------------------------------------------------------------------------------
# Out of memory


def largest_on_tile(report: MemoryReport, tile: int, buffers: dict[int, Buffer],
                    limit: int = 8) -> list[tuple[str, int]]:
    """The biggest items on ``tile`` at its peak: live tensors and always-live categories."""
    items: list[tuple[str, int]] = []
    step = int(report.peak_step[tile])
    for uid, b in report.buffer_bytes.items():
        buf = buffers[uid]
        n = int(b[tile])
        if not n:
            continue
        live = buf.kind in ("var", "const") or (uid in report.live_ranges and
                                                 report.live_ranges[uid][0] <= step <= report.live_ranges[uid][1])
        if live:
            shape = ",".join(map(str, buf.shape))
            items.append((f"{buf.name} ({buffer_kind_label(buf)} {buf.dtype.short}[{shape}])", n))
    for cat in ALWAYS_LIVE:
        if cat in ("variables", "constants"):
            continue
        n = int(report.always_live[cat][tile])
        if n:
            items.append((cat, n))
    if int(report.peak_exchange[tile]):
        items.append(("exchange buffers and partials of the peak step", int(report.peak_exchange[tile])))
    items.sort(key=lambda it: -it[1])
    return items[:limit]


def oom_message(report: MemoryReport, buffers: dict[int, Buffer], step_names: Sequence[str],
                tiles_per_ipu: int = 0) -> str:
    """Graphcore-style out-of-memory text naming the fullest tile (and, over several IPUs, which IPU's tile it
    is), what fills it, and the advice."""
    tile = report.peak_tile
    ipu = f" (IPU {tile // tiles_per_ipu}'s tile {tile % tiles_per_ipu})" if tiles_per_ipu else ""
    used = int(report.total[tile])
    over = report.oom_tiles
    step = int(report.peak_step[tile])
    where = f" at step {step} ({step_names[step]})" if 0 <= step < len(step_names) else ""
    lines = [
        f"Out of memory on tile {tile}: {used} bytes used but tiles only have {report.bytes_per_tile} bytes of memory",
        f"{over.size} of {report.tiles} tiles are out of memory; tile {tile}{ipu} is the fullest{where}.",
        f"Largest on tile {tile}:",
    ]
    lines += [f"  {name}: {n:,} bytes" for name, n in largest_on_tile(report, tile, buffers)]
    lines += list(ADVICE)
    return "\n".join(lines)
