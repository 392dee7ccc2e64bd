"""The execution trace of a schedule: its program tree walked in run order, each step split into the
sync, exchange and compute phases of its superstep, on a cycle timeline.

Loops run their real trip counts (a ``RepeatWhile`` whose count is unknown at compile time runs
once, as its cycle estimate counts it). A long program would give millions of events, so once the
trace holds ``limit`` events the remaining iterations of a loop become one ``loop`` event spanning
their cycles: the timeline stays exact, only the detail stops.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from popjit.schedule import program as prog

#: Events a trace holds before it folds the remaining iterations of each loop into one event.
TRACE_LIMIT = 10_000

KINDS = ("compute", "exchange", "link", "sync", "loop", "pipeline")

#: The colour of each kind of event in the charts.
KIND_COLOURS = {"compute": "#1f77b4", "exchange": "#ff7f0e", "link": "#d62728", "sync": "#7f7f7f",
                "loop": "#2ca02c", "pipeline": "#9467bd"}


@dataclass
class Trace:
    """Events ``{"start", "cycles", "kind", "step", "name"}`` (``step`` -1 for a program-level sync; a
    ``loop`` event also has ``iterations``) and how many loop iterations were folded."""

    limit: int = TRACE_LIMIT
    events: list[dict[str, Any]] = field(default_factory=list)
    folded_iterations: int = 0
    now: int = 0

    def emit(self, kind: str, cycles: int, step: int, name: str, **extra: Any) -> None:
        if cycles:
            self.events.append({"start": self.now, "cycles": cycles, "kind": kind, "step": step, "name": name,
                                **extra})
            self.now += cycles

    def walk(self, node: prog.Node) -> None:
        """Append ``node``'s run to the trace."""
        if isinstance(node, prog.Execute):
            for kind, cycles in node.cs.phases:
                self.emit(kind, cycles, node.cs.index, node.cs.name)
            return
        if isinstance(node, prog.Sync):
            self.emit("sync", node.cycles, -1, node.label())
            return
        if isinstance(node, prog.Pipeline):
            self._pipeline(node)
            return
        for nodes, times in node.runs():
            for i in range(times):
                if i and len(self.events) >= self.limit:
                    self._fold(node, nodes, times - i)
                    break
                for child in nodes:
                    self.walk(child)

    def _pipeline(self, node: prog.Pipeline) -> None:
        """A pipeline: one ``pipeline`` event per pipeline step (every IPU busy on its stage's micro-batch; the
        stages' bars are in the schedule's pipeline timeline), and its weight update after each run."""
        per_run = node.steps // node.runs_per_loop
        update = node.work.update
        for k in range(node.steps):
            if len(self.events) >= self.limit:
                left = node.steps - k
                self.folded_iterations += left
                cycles = left * node.step_cycles + (node.runs_per_loop - k // per_run) * update
                self.emit("loop", cycles, -1, f"{node.label()}: {left:,} more steps", iterations=left)
                return
            self.emit("pipeline", node.step_cycles, -1, f"pipeline step {k + 1} of {node.steps}")
            if (k + 1) % per_run == 0:
                self.emit("compute", update, -1, "weight update")

    def _fold(self, loop: prog.Node, nodes: list[prog.Node], iterations: int) -> None:
        self.folded_iterations += iterations
        cycles = iterations * sum(n.cycles for n in nodes)
        self.emit("loop", cycles, -1, f"{loop.label()}: {iterations:,} more iterations", iterations=iterations)


def execution_trace(tree: prog.Node, limit: int = TRACE_LIMIT) -> Trace:
    """The trace of one run of ``tree``."""
    trace = Trace(limit)
    trace.walk(tree)
    return trace


def cycles_by_kind(node: prog.Node) -> dict[str, int]:
    """Cycles of one run of ``node`` spent in compute, exchange, IPU-Link traffic and sync (loops multiplied)."""
    out = dict.fromkeys(KINDS[:4], 0)
    if isinstance(node, prog.Execute):
        for kind, cycles in node.cs.phases:
            out[kind] += cycles
        return out
    if isinstance(node, prog.Sync):
        out["sync"] += node.cycles
        return out
    if isinstance(node, prog.Pipeline):
        return _pipeline_by_kind(node)
    for nodes, times in node.runs():
        for child in nodes:
            for kind, cycles in cycles_by_kind(child).items():
                out[kind] += times * cycles
    return out


def _pipeline_by_kind(node: prog.Pipeline) -> dict[str, int]:
    """An overlapped pipeline's cycles split as its micro-batches' own work is [U: overlap spreads evenly]."""
    body = cycles_by_kind(node.body)
    whole = sum(body.values())
    out = {kind: node.cycles * c // whole if whole else 0 for kind, c in body.items()}
    out["compute"] += node.cycles - sum(out.values())
    return out
