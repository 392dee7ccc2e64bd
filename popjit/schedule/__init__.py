"""Scheduling a loop-IR program onto a virtual IPU: tile mapping, vertices, compute sets,
exchange, per-tile memory, a Poplar-like program tree and cycle estimates.

    schedule_program(program, target) -> Schedule      # .as_text(), .summary(), .steps, .tree

Modules: ``target`` (hardware figures), ``mapping`` (tile mappings), ``intervals`` and ``access``
(vectorised exchange and work per tile), ``cost`` (vertex cycle and memory estimators),
``matmul_plan`` (the matmul planner and operand layouts), ``computesets`` (vertices per
statement), ``program`` (the program tree), ``memory`` (liveness, categories, out-of-memory),
``schedule`` (the whole).
"""

from popjit.schedule.computesets import ComputeSet
from popjit.schedule.mapping import TileMapping
from popjit.schedule.memory import OutOfMemoryWarning
from popjit.schedule.schedule import Schedule, schedule_program
from popjit.schedule.target import IPU1, IPU2, Target, make_target

__all__ = [
    "IPU1", "IPU2", "ComputeSet", "OutOfMemoryWarning", "Schedule", "Target", "TileMapping", "make_target",
    "schedule_program",
]
