"""Schedule construction (minimal first version: one compute set per kernel or matmul)."""

from __future__ import annotations

from dataclasses import dataclass, field

from popjit.loop.ir import Kernel, MatMul, Program
from popjit.schedule.target import Target


@dataclass
class ComputeSet:
    name: str
    kind: str


@dataclass
class Schedule:
    target: Target
    compute_sets: list[ComputeSet] = field(default_factory=list)

    def as_text(self) -> str:
        return "\n".join(f"{cs.name} ({cs.kind})" for cs in self.compute_sets)


def schedule_program(program: Program, target: Target) -> Schedule:
    sched = Schedule(target)
    for s in program.walk():
        if isinstance(s, (Kernel, MatMul)):
            sched.compute_sets.append(ComputeSet(s.name, type(s).__name__))
    return sched
