"""Scheduling a loop-IR program onto a virtual IPU: the cost and memory model of the program.

``schedule_program`` does not change what runs. It decides every buffer's tile mapping
(inputs first, as the TF backend's allocation pass does: matmul operands in the planner's
layout, everything else linear with a rotating start tile), builds one compute set per kernel
(plus reduction and matmul stages), a Poplar-like program tree, per-tile memory with liveness,
and cycle estimates; a tile over its memory is an out-of-memory error (a warning under the IPU
Model, and none at all for host execution).
"""

from __future__ import annotations

import itertools
import logging
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from popjit.errors import ResourceExhaustedError
from popjit.ir.loop import Buffer, Collective, Copy, If, Kernel, LoopFunctor, MatMul, Program, Repeat, Stmt, While
from popjit.schedule import program as prog
from popjit.schedule.computesets import Builder, ComputeSet
from popjit.schedule.mapping import TileMapping
from popjit.schedule.memory import CATEGORIES, Loop, MemoryReport, OutOfMemoryWarning, memory_report, oom_message
from popjit.schedule.shards import ShardedBuilder, pipeline_stashes
from popjit.schedule.target import Target

log = logging.getLogger("popjit")


@dataclass(eq=False)
class Schedule:
    """A program on a virtual IPU: mappings, steps (compute sets in program order), the program
    tree, memory and cycles. ``oom`` is set when a tile is over its memory (IPU Model / host)."""

    target: Target
    name: str
    tree: prog.Sequence
    steps: list[ComputeSet]
    memory: MemoryReport
    mappings: dict[int, TileMapping]
    buffers: dict[int, Buffer]
    origin: dict[int, str] = field(default_factory=dict)
    oom: bool = False
    oom_text: str = ""
    enforce_memory: bool = True

    # -- queries -----------------------------------------------------------------------------------
    @property
    def compute_sets(self) -> list[ComputeSet]:
        """Steps that execute a compute set (``Copy`` programs excluded)."""
        return [s for s in self.steps if s.program == "Execute"]

    @property
    def total_cycles(self) -> int:
        return self.tree.cycles

    @property
    def seconds(self) -> float:
        return self.total_cycles / self.target.clock_hz

    @property
    def peak_tile_memory(self) -> int:
        return int(self.memory.total.max(initial=0))

    @property
    def oom_tiles(self) -> list[int]:
        return [int(t) for t in self.memory.oom_tiles]

    @property
    def pipelines(self) -> list[prog.Pipeline]:
        """The pipelines of the program (``ipu.pipelining_ops``), in program order."""
        return [n for n in self.tree.walk() if isinstance(n, prog.Pipeline)]

    def ipu_of_tile(self, tile: int) -> tuple[int, int]:
        """(IPU, its own tile number) of a tile of the schedule's tile space."""
        per = self.target.tiles // self.target.num_ipus
        return tile // per, tile % per

    def peak_by_ipu(self) -> list[dict[str, int]]:
        """Each IPU's fullest tile (its own number) and its bytes."""
        per = self.target.tiles // self.target.num_ipus
        out = []
        for ipu in range(self.target.num_ipus):
            part = self.memory.total[ipu * per:(ipu + 1) * per]
            tile = int(np.argmax(part)) if part.size else 0
            out.append({"ipu": ipu, "peak_tile": tile, "peak_bytes": int(part.max(initial=0)),
                        "total_bytes": int(part.sum())})
        return out

    def mapping_of(self, buf: Buffer) -> TileMapping:
        return self.mappings[buf.uid]

    def step(self, name: str) -> ComputeSet:
        """The step called ``name`` (or whose name starts with it)."""
        for s in self.steps:
            if s.name == name:
                return s
        for s in self.steps:
            if s.name.startswith(name):
                return s
        raise KeyError(f"no step {name!r}; steps: {[s.name for s in self.steps]}")

    # -- text --------------------------------------------------------------------------------------
    def as_text(self) -> str:
        """The superstep table, the program tree and the totals."""
        t = self.target
        many = t.num_ipus > 1
        where = f" ({t.num_ipus} IPUs of {t.tiles // t.num_ipus} tiles)" if many else ""
        lines = [f"tile schedule of {self.name} on {t.describe()}{where}"]
        lines.append(f"{'step':>4}  {'ipu ' if many else ''}{'compute set':<34} {'kind':<14} {'tiles':>5} "
                     f"{'vertices':>8} {'max exch in B':>13} {'cycles':>11} {'runs':>7} {'peak tile B':>11}")
        for s in self.steps:
            ipu = f"{s.ipu:>3} " if many else ""
            lines.append(
                f"{s.index:>4}  {ipu}{_clip(s.name, 34):<34} {s.kind:<14} {s.tiles_used:>5} "
                f"{int(s.vertices.sum()):>8} {int(s.exchange_in.bytes_in.max(initial=0)):>13,} {s.cycles:>11,} "
                f"{s.executions:>7,} {int(self.memory.step_max_bytes[s.index]):>11,}")
        lines.append("program:")
        lines.extend("  " + ln for ln in self.tree.lines())
        lines.extend(self.totals_lines())
        return "\n".join(lines)

    def totals_lines(self) -> list[str]:
        """Three lines: the total cycles and time, the peak tile memory and the memory by category."""
        mem = self.memory
        peak_tile = mem.peak_tile
        oom = self.oom_tiles
        oom_text = "none" if not oom else f"{len(oom)} ({_tile_list(oom)})"
        cats = mem.by_category()
        lines = [
            f"total: {self.total_cycles:,} cycles = {self.seconds * 1e6:,.2f} us "
            f"at {self.target.clock_hz / 1e9:.2f} GHz",
            f"peak tile memory: {self.peak_tile_memory:,} B on tile {peak_tile} "
            f"({100 * self.peak_tile_memory / self.target.bytes_per_tile:.1f}% of {self.target.bytes_per_tile:,} B); "
            f"total {int(mem.total.sum()):,} B; out-of-memory tiles: {oom_text}",
            "memory by category (max tile / all tiles, B): "
            + ", ".join(f"{c} {int(v.max(initial=0)):,}/{int(v.sum()):,}" for c, v in cats.items() if v.any()),
        ]
        if self.target.num_ipus > 1:
            lines.append("peak tile memory per IPU: " + ", ".join(
                f"IPU {p['ipu']} {p['peak_bytes']:,} B on its tile {p['peak_tile']}" for p in self.peak_by_ipu()))
        for p in self.pipelines:
            lines.append(f"pipeline ({p.schedule}, {len(p.mapping)} stages on IPUs {list(p.mapping)}, {p.count} "
                         f"micro-batches): {p.steps} steps of {p.step_cycles:,} cycles, {100 * p.utilisation:.1f}% "
                         f"of the IPUs' cycles busy (balanced stages: {100 * p.ideal_utilisation:.1f}%)")
        return lines

    def __str__(self) -> str:
        return self.as_text()

    # -- data for profile writers -----------------------------------------------------------------
    def summary(self) -> dict[str, Any]:
        """Plain data: target, totals, memory per tile by category (arrays), liveness per step and
        every step's figures; the program tree as nested dicts."""
        t, mem = self.target, self.memory
        return {
            "name": self.name,
            "target": {"version": t.version, "tiles": t.tiles, "bytes_per_tile": t.bytes_per_tile,
                       "clock_hz": t.clock_hz, "num_ipus": t.num_ipus, "ipu_model": t.ipu_model},
            "total_cycles": self.total_cycles,
            "seconds": self.seconds,
            "peak_tile_memory": self.peak_tile_memory,
            "peak_tile": mem.peak_tile,
            "oom": self.oom,
            "oom_tiles": self.oom_tiles,
            "memory_by_tile": mem.total,
            "memory_by_category": mem.by_category(),
            "always_live_by_tile": mem.always_live_total,
            "not_always_live_peak_by_tile": mem.not_always_live_peak,
            "liveness": {"step_live_bytes": mem.step_live_bytes, "step_max_tile_bytes": mem.step_max_bytes},
            "steps": [_step_summary(s) for s in self.steps],
            "program": self.tree.to_dict(),
            "peak_by_ipu": self.peak_by_ipu(),
            "pipelines": [p.summary() for p in self.pipelines],
        }


def _step_summary(s: ComputeSet) -> dict[str, Any]:
    return {
        "index": s.index, "name": s.name, "kind": s.kind, "program": s.program, "cycles": s.cycles,
        "executions": s.executions, "compute_cycles": s.max_compute_cycles,
        "exchange_cycles": s.exchange_in_cycles + s.exchange_out_cycles, "tiles": s.tiles_used,
        "vertices": int(s.vertices.sum()), "codelets": sorted(s.codelets),
        "exchange_bytes_in_max": int(s.exchange_in.bytes_in.max(initial=0)),
        "exchange_bytes_total": int(s.exchange_in.bytes_in.sum()
                                    + (s.exchange_out.bytes_in.sum() if s.exchange_out else 0)),
        "cycles_by_tile": s.compute_cycles, "flops": s.flops, "note": s.note, "ipu": s.ipu, "backward": s.backward,
    }


def _clip(s: str, n: int) -> str:
    return s if len(s) <= n else s[: n - 1] + "…"


def _tile_list(tiles: list[int], limit: int = 8) -> str:
    head = ", ".join(map(str, tiles[:limit]))
    return head + (", …" if len(tiles) > limit else "")


# ----------------------------------------------------------------------------------------------
# Building


class _Walker(LoopFunctor):
    """Walks the loop IR once, building steps, loops and the program tree."""

    def __init__(self, builder: Builder | ShardedBuilder) -> None:
        self.builder = builder
        self.steps: list[ComputeSet] = []
        self.loops: list[Loop] = []
        self.extra_reads: dict[int, set[int]] = {}
        self.nodes: list[prog.Node] = []
        self.pipelines: list[tuple[Loop, prog.Pipeline]] = []

    def block(self, stmts: list[Stmt]) -> prog.Sequence:
        seq = prog.Sequence([])
        for s in stmts:
            seq.body.extend(self.stmt(s))
        return seq

    def _steps(self, css: list[ComputeSet]) -> list[prog.Node]:
        """The steps in order; consecutive steps of several serial passes go in a ``Repeat``."""
        nodes: list[prog.Node] = []
        for passes, group in itertools.groupby(css, key=lambda cs: cs.passes):
            first = len(self.steps)
            run: list[prog.Node] = []
            for cs in group:
                cs.index = len(self.steps)
                self.steps.append(cs)
                run.append(prog.Execute(cs))
            if passes > 1:
                self._loop(first)
                nodes.append(prog.Repeat(passes, prog.Sequence(run)))
            else:
                nodes.extend(run)
        return nodes

    def _pred_read(self, pred: Buffer) -> None:
        at = max(len(self.steps) - 1, 0)
        self.extra_reads.setdefault(at, set()).add(pred.uid)
        self.builder.mapping(pred)

    def _sync(self) -> prog.Sync:
        return prog.Sync("INTERNAL", self.builder.target.sync_cycles)

    def visit_kernel(self, s: Kernel | MatMul | Copy | Collective) -> list[prog.Node]:
        return self._steps(self.builder.steps_of(s))

    visit_matmul = visit_copy = visit_collective = visit_kernel

    def visit_repeat(self, s: Repeat) -> list[prog.Node]:
        first = len(self.steps)
        self.builder.enter_loop(s.body)
        body = self.block(s.body)
        node = prog.Repeat(s.count, body) if s.pipeline is None else prog.Pipeline(s.count, body, *s.pipeline)
        self._loop(first)
        if isinstance(node, prog.Pipeline) and len(self.steps) > first:
            self.pipelines.append((Loop(first, len(self.steps) - 1), node))
        return [node]

    def visit_while(self, s: While) -> list[prog.Node]:
        first = len(self.steps)
        self.builder.enter_loop(s.cond + s.body)
        cond = self.block(s.cond)
        self._pred_read(s.pred)
        node = prog.RepeatWhile(cond, s.pred.name, self.block(s.body), self._sync(), max_iterations=s.max_iterations)
        self._loop(first)
        return [node]

    def visit_if(self, s: If) -> list[prog.Node]:
        self._pred_read(s.pred)
        with self.builder.branch():
            then = self.block(s.then)
        with self.builder.branch():
            orelse = self.block(s.orelse)
        return [prog.If(s.pred.name, then, orelse, self._sync(), s.every)]

    def _loop(self, first: int) -> None:
        if len(self.steps) > first:
            self.loops.append(Loop(first, len(self.steps) - 1))


def _allocate_inputs(program: Program, builder: Builder | ShardedBuilder) -> None:
    """Map arguments, variables and constants before anything else, in order of first use: the
    operands of a matmul that reads them first in the planner's layout, the rest linearly."""
    for s in program.walk():
        reads = getattr(s, "reads", None)
        if reads is None:
            continue
        for buf in sorted(reads(), key=lambda b: b.uid):
            if buf.kind not in ("arg", "var", "const") or builder.mapped(buf):
                continue
            if isinstance(s, MatMul):
                builder.allocate_for_matmul(buf, s)
            else:
                builder.mapping(buf)


def _set_executions(node: prog.Node, times: int) -> None:
    if isinstance(node, prog.Execute):
        node.cs.executions = times
        return
    if isinstance(node, prog.Repeat):
        times *= node.count
    elif isinstance(node, prog.RepeatWhile):
        times *= node.counted_iterations
    for c in node.children():
        _set_executions(c, times)


def schedule_program(program: Program, target: Target, enforce_memory: bool = True) -> Schedule:
    """Schedule ``program`` on ``target``.

    A tile over ``target.bytes_per_tile`` raises ``ResourceExhaustedError`` (Graphcore's message
    and advice) when ``enforce_memory`` and not ``target.ipu_model``; under the IPU Model it warns
    (``OutOfMemoryWarning``) and the schedule is marked ``oom``; with ``enforce_memory=False``
    (host execution) it is only marked.
    """
    builder = Builder(target) if target.num_ipus == 1 else ShardedBuilder(target, program)
    _allocate_inputs(program, builder)
    walker = _Walker(builder)
    tree = walker.block(program.body)
    for buf in program.variables:
        builder.mapping(buf)
    _set_executions(tree, 1)
    control = sum(n.control_code_bytes for n in tree.walk())
    buffers, mappings, origin = builder.buffers, builder.mappings, builder.origin
    for loop, pipe in walker.pipelines:
        for stash, mapping in pipeline_stashes(walker.steps[loop.first:loop.last + 1], pipe, buffers, mappings):
            buffers[stash.uid], mappings[stash.uid], origin[stash.uid] = stash, mapping, "pipeline stash"
            for at in (loop.first, loop.last):  # live while the pipeline runs
                walker.extra_reads.setdefault(at, set()).add(stash.uid)
    memory = memory_report(walker.steps, walker.loops, control, buffers, mappings, target.tiles,
                           target.bytes_per_tile, walker.extra_reads)
    sched = Schedule(target, program.name, tree, walker.steps, memory, mappings, buffers, origin,
                     enforce_memory=enforce_memory)
    if memory.oom_tiles.size:
        _out_of_memory(sched)
    return sched


def _out_of_memory(sched: Schedule) -> None:
    sched.oom = True
    t = sched.target
    sched.oom_text = oom_message(sched.memory, sched.buffers, [s.name for s in sched.steps],
                                 t.tiles // t.num_ipus if t.num_ipus > 1 else 0)
    if not sched.enforce_memory:
        log.debug("host execution: %s", sched.oom_text.splitlines()[0])
        return
    if sched.target.ipu_model:
        first = sched.oom_text.splitlines()[0]
        log.warning("%s (IPU Model: continuing; the report marks the out-of-memory tiles)", first)
        warnings.warn(sched.oom_text, OutOfMemoryWarning, stacklevel=3)
        return
    raise ResourceExhaustedError(sched.oom_text)


__all__ = ["CATEGORIES", "Schedule", "schedule_program"]
