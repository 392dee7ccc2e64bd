"""A Poplar-like program tree (``docs/ipu_hardware.md`` §2.4) with cycle totals.

``Sequence`` runs its children in order; ``Execute`` runs a compute set (``Copy`` programs are
steps too); ``Repeat`` multiplies its body; ``RepeatWhile`` costs ``cond + n x (body + cond +
predicate sync)`` with ``n`` the recorded iteration count (1 when unknown, and marked so);
``If`` costs the predicate sync plus its dearer branch. Branching on a predicate needs every
tile to see it: we charge one internal sync plus ``PREDICATE_CYCLES`` [U] for that.

Every node but a leaf says in what order and how many times its parts run (``runs()``); its cycles
are that sum, and a profile's execution trace walks the same order.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from popjit.schedule import cost
from popjit.schedule.computesets import INTER_IPU_COPY, ComputeSet

#: [U] cycles to broadcast a scalar predicate to every tile, on top of one internal sync.
PREDICATE_CYCLES = 16


class Node:
    """A program in the tree."""

    kind = "Node"

    @property
    def cycles(self) -> int:
        return sum(times * sum(n.cycles for n in nodes) for nodes, times in self.runs())

    def runs(self) -> list[tuple[list[Node], int]]:
        """What runs, in order: groups of nodes, each run the given number of times (empty for a leaf)."""
        return []

    def attrs(self) -> dict[str, Any]:
        """The node's own figures for :meth:`to_dict` (trip counts, the step it executes)."""
        return {}

    def children(self) -> list[Node]:
        return []

    def walk(self) -> Iterator[Node]:
        yield self
        for c in self.children():
            yield from c.walk()

    def label(self) -> str:
        return self.kind

    def lines(self, depth: int = 0) -> list[str]:
        out = [f"{'  ' * depth}{self.label()}  [{self.cycles:,} cycles]"]
        for c in self.children():
            out.extend(c.lines(depth + 1))
        return out

    def as_text(self) -> str:
        return "\n".join(self.lines())

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"type": self.kind, "name": self.label(), "cycles": self.cycles, **self.attrs()}
        kids = self.children()
        if kids:
            d["children"] = [c.to_dict() for c in kids]
        return d

    @property
    def control_code_bytes(self) -> int:
        """Control code this node costs on every tile [U], ``cost.CONTROL_BYTES``."""
        return cost.CONTROL_BYTES.get(self.kind, 0)


@dataclass(eq=False)
class Sequence(Node):
    body: list[Node] = field(default_factory=list)
    kind = "Sequence"

    def runs(self) -> list[tuple[list[Node], int]]:
        return [(list(self.body), 1)]

    def children(self) -> list[Node]:
        return list(self.body)


@dataclass(eq=False)
class Execute(Node):
    """``Execute(cs)``, or a ``Copy`` program when the step is a copy."""

    cs: ComputeSet

    @property
    def kind(self) -> str:  # type: ignore[override]
        return self.cs.program

    @property
    def cycles(self) -> int:
        return self.cs.cycles

    def attrs(self) -> dict[str, Any]:
        return {"step": self.cs.index}

    def label(self) -> str:
        return f"{self.kind} {self.cs.name}"


@dataclass(eq=False)
class Sync(Node):
    """``Sync(INTERNAL)`` plus the predicate broadcast it carries."""

    sync_type: str = "INTERNAL"
    sync_cycles: int = 150
    extra_cycles: int = PREDICATE_CYCLES
    kind = "Sync"

    @property
    def cycles(self) -> int:
        return self.sync_cycles + self.extra_cycles

    def label(self) -> str:
        return f"Sync({self.sync_type})"


@dataclass(eq=False)
class Repeat(Node):
    count: int
    body: Sequence
    kind = "Repeat"

    def runs(self) -> list[tuple[list[Node], int]]:
        return [([self.body], self.count)]

    def attrs(self) -> dict[str, Any]:
        return {"count": self.count}

    def children(self) -> list[Node]:
        return [self.body]

    def label(self) -> str:
        return f"Repeat x{self.count}"


@dataclass(eq=False)
class RepeatWhile(Node):
    """``RepeatWhileTrue(cond, pred, body)``; ``iterations`` is None until known."""

    cond: Sequence
    pred: str
    body: Sequence
    sync: Sync
    iterations: int | None = None
    max_iterations: int | None = None
    kind = "RepeatWhile"

    @property
    def per_iteration_cycles(self) -> int:
        return self.body.cycles + self.cond.cycles + self.sync.cycles

    @property
    def counted_iterations(self) -> int:
        return self.iterations if self.iterations is not None else 1

    def runs(self) -> list[tuple[list[Node], int]]:
        return [([self.cond, self.sync], 1), ([self.body, self.cond, self.sync], self.counted_iterations)]

    def attrs(self) -> dict[str, Any]:
        return {"iterations": self.iterations, "max_iterations": self.max_iterations,
                "counted_iterations": self.counted_iterations}

    def children(self) -> list[Node]:
        return [self.cond, self.sync, self.body]

    def label(self) -> str:
        known = f"{self.iterations} iterations" if self.iterations is not None else "iterations unknown, counted once"
        cap = f", at most {self.max_iterations}" if self.max_iterations is not None else ""
        return f"RepeatWhileTrue {self.pred} ({known}{cap}; {self.per_iteration_cycles:,} cycles per iteration)"


@dataclass(eq=False)
class If(Node):
    """``If(pred, then, else)``; ``every``: ``then`` is a weight update taken once every that many runs."""

    pred: str
    then: Sequence
    orelse: Sequence
    sync: Sync
    every: int | None = None
    kind = "If"

    @property
    def costed_branch(self) -> Sequence:
        """The dearer branch, which the estimate charges (the taken one is known only at run time)."""
        return self.then if self.then.cycles >= self.orelse.cycles else self.orelse

    def runs(self) -> list[tuple[list[Node], int]]:
        return [([self.sync, self.costed_branch], 1)]

    def attrs(self) -> dict[str, Any]:
        return {"costed_branch": "then" if self.costed_branch is self.then else "else"}

    def children(self) -> list[Node]:
        return [self.sync, self.then, self.orelse]

    def label(self) -> str:
        return f"If {self.pred}"


@dataclass
class StageWork:
    """Cycles of one micro-batch of a pipeline, per IPU: forward and backward compute sets, inter-IPU copies
    received, and control (syncs of loops and branches inside the micro-batch)."""

    forward: dict[int, int] = field(default_factory=dict)
    backward: dict[int, int] = field(default_factory=dict)
    links: dict[int, int] = field(default_factory=dict)
    control: int = 0
    update: int = 0  # a weight update taken once per run of the pipeline (gradient accumulation), by the IPUs in turn

    def add(self, node: Node, times: int) -> None:
        """Count ``node`` run ``times`` times per micro-batch."""
        if isinstance(node, If) and node.every is not None:
            self.control += times * node.sync.cycles
            self.add(node.orelse, times)
            self.update += times * node.then.cycles
        elif isinstance(node, Execute):
            cs = node.cs
            part = self.links if cs.kind == INTER_IPU_COPY else (self.backward if cs.backward else self.forward)
            part[cs.ipu] = part.get(cs.ipu, 0) + times * cs.cycles
        elif isinstance(node, Sync):
            self.control += times * node.cycles
        else:
            for nodes, n in node.runs():
                for child in nodes:
                    self.add(child, times * n)

    recompute: bool = False  # the backward pass first runs the forward pass again

    def of(self, ipu: int) -> tuple[int, int]:
        forward = self.forward.get(ipu, 0)
        return forward, self.backward.get(ipu, 0) + (forward if self.recompute and self.backward.get(ipu) else 0)


@dataclass(eq=False)
class Pipeline(Repeat):
    """``count`` micro-batches of a pipeline (``ipu.pipelining_ops``): ``body`` is one micro-batch through
    every stage, stage ``i`` on IPU ``mapping[i]``. ``Sequential`` runs them one after another, as a
    ``Repeat``. ``Grouped`` and ``Interleaved`` overlap them [U, the textbook pipeline with Graphcore's
    ramps]: in each pipeline step every IPU works on a different micro-batch, then the stages' outputs
    cross the IPU-Links, so the run takes ``count + fill`` steps, ``fill`` being ``S - 1`` steps of ramp-up
    and down for S stages, twice that when training (a micro-batch's backward pass comes back through
    every stage). A Grouped step lasts as long as the busiest IPU's forward plus backward work plus the
    copies into the busiest IPU; an Interleaved step runs a forward phase then a backward phase, each as
    long as its busiest IPU's (slower, as Graphcore says, for less stashed memory). Stages sharing an IPU
    share its steps. With ``recompute`` (``allow_recompute``), a stage's backward pass runs its forward pass
    again, and keeps only the stage's inputs of the micro-batches in flight instead of every activation."""

    schedule: str = "Grouped"
    mapping: tuple[int, ...] = ()
    recompute: bool = False
    per_update: int = 0  # micro-batches per weight update: each group is one pipeline run (0: all of them)
    kind = "Pipeline"

    @property
    def group(self) -> int:
        """Micro-batches per run of the pipeline (between weight updates)."""
        return self.per_update or self.count

    @property
    def runs_per_loop(self) -> int:
        return max(self.count // self.group, 1)

    def in_flight(self, stage: int) -> int:
        """Micro-batches whose activations stage ``stage`` keeps for their backward pass at once: Grouped
        holds one per pipeline step until the micro-batch comes back (``2 (S - 1 - stage) + 1``),
        Interleaved half as many steps (``S - stage``), Sequential one."""
        stages = len(self.mapping)
        if not self.overlapped or not self.training:
            return 1
        return 2 * (stages - 1 - stage) + 1 if self.schedule == "Grouped" else stages - stage

    @functools.cached_property
    def work(self) -> StageWork:
        """Per-IPU cycles of one micro-batch: walked once (the body's steps do not change after it is built)."""
        w = StageWork(recompute=self.recompute)
        w.add(self.body, 1)
        return w

    @property
    def overlapped(self) -> bool:
        return self.schedule != "Sequential"

    @property
    def ipus(self) -> list[int]:
        w = self.work
        return sorted(set(self.mapping) | set(w.forward) | set(w.backward))

    @property
    def training(self) -> bool:
        return any(self.work.backward.values())

    @property
    def fill(self) -> int:
        """Pipeline steps of ramp-up and ramp-down."""
        return (len(self.mapping) - 1) * (2 if self.training else 1)

    @property
    def steps(self) -> int:
        """Pipeline steps over the loop: each run of ``group`` micro-batches ramps up and down."""
        return self.runs_per_loop * (self.group + self.fill) if self.overlapped else self.count

    def phase_cycles(self) -> tuple[int, int]:
        """(forward phase, backward phase) cycles of one overlapped pipeline step; a Grouped step is one phase."""
        w = self.work
        link = max(w.links.values(), default=0)
        if self.schedule == "Interleaved" and self.training:
            forward = max((w.of(d)[0] for d in self.ipus), default=0) + link + w.control
            return forward, max((w.of(d)[1] for d in self.ipus), default=0) + link
        return max((sum(w.of(d)) for d in self.ipus), default=0) + link + w.control, 0

    @property
    def step_cycles(self) -> int:
        """One pipeline step; one micro-batch through every stage in turn when Sequential."""
        if self.overlapped:
            return sum(self.phase_cycles())
        w = self.work
        return sum(sum(w.of(d)) for d in self.ipus) + sum(w.links.values()) + w.control

    @property
    def cycles(self) -> int:
        return self.steps * self.step_cycles + self.runs_per_loop * self.work.update

    @property
    def utilisation(self) -> float:
        """The share of the IPUs' cycles spent on the stages' work."""
        w = self.work
        busy = self.count * sum(sum(w.of(d)) for d in self.ipus)
        total = len(self.ipus) * self.cycles
        return busy / total if total else 0.0

    @property
    def ideal_utilisation(self) -> float:
        """Balanced stages with free copies: only the ramps idle the IPUs (``count / (count + fill)``)."""
        return self.group / (self.group + self.fill) if self.overlapped else 1.0 / max(len(self.ipus), 1)

    def timeline(self, micro_batches: int = 64) -> list[dict[str, Any]]:
        """Bars ``{ipu, stage, micro_batch, pass, start, cycles}`` of the first ``micro_batches``
        micro-batches, for charts: when each stage works on each micro-batch in one run of the pipeline."""
        w, stages = self.work, len(self.mapping)
        sharing = {d: self.mapping.count(d) for d in set(self.mapping)}
        fwd_phase, _ = self.phase_cycles()
        bars = []
        for m in range(min(self.group, micro_batches)):
            for i, d in enumerate(self.mapping):
                f, b = (x // sharing[d] for x in w.of(d))
                if self.overlapped:
                    start_f = (m + i) * self.step_cycles
                    back = m + 2 * stages - 2 - i
                    offset = fwd_phase if self.schedule == "Interleaved" else f
                    start_b = back * self.step_cycles + offset
                else:
                    start_f = m * self.step_cycles + sum(w.of(e)[0] // sharing[e] for e in self.mapping[:i])
                    start_b = (m * self.step_cycles + sum(w.of(e)[0] // sharing[e] for e in self.mapping)
                               + sum(w.of(e)[1] // sharing[e] for e in self.mapping[i + 1:]))
                bars.append({"ipu": d, "stage": i, "micro_batch": m, "pass": "forward", "start": start_f, "cycles": f})
                if b:
                    bars.append({"ipu": d, "stage": i, "micro_batch": m, "pass": "backward", "start": start_b,
                                 "cycles": b})
        return bars

    def summary(self) -> dict[str, Any]:
        """Plain data for reports: the schedule, stages, per-IPU work (lists in the order of ``ipus``), steps,
        cycles, utilisation and the timeline."""
        w = self.work
        return {"schedule": self.schedule, "stages": len(self.mapping), "device_mapping": list(self.mapping),
                "recompute": self.recompute,
                "micro_batches": self.count, "micro_batches_per_update": self.group, "ipus": self.ipus,
                "update_cycles": w.update,
                "forward_cycles": [w.of(d)[0] for d in self.ipus],
                "backward_cycles": [w.of(d)[1] for d in self.ipus],
                "link_cycles": [w.links.get(d, 0) for d in self.ipus], "steps": self.steps,
                "step_cycles": self.step_cycles,
                "cycles": self.cycles, "utilisation": self.utilisation,
                "ideal_utilisation": self.ideal_utilisation, "timeline": self.timeline()}

    def attrs(self) -> dict[str, Any]:
        return {"count": self.count, "schedule": self.schedule, "device_mapping": list(self.mapping),
                "steps": self.steps, "utilisation": round(self.utilisation, 4)}

    def label(self) -> str:
        return (f"Pipeline {self.schedule} x{self.count} micro-batches, stages on IPUs {list(self.mapping)} "
                f"({self.steps} steps of {self.step_cycles:,} cycles, {100 * self.utilisation:.1f}% utilised)")
