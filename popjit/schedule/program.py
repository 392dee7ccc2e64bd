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

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from popjit.schedule import cost
from popjit.schedule.computesets import ComputeSet

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
    pred: str
    then: Sequence
    orelse: Sequence
    sync: Sync
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
