"""Scheduling a loop-IR program onto a virtual IPU: tile mapping, vertices, compute sets,
exchange, per-tile memory, a Poplar-like program tree and cycle estimates."""

from popjit.schedule.schedule import Schedule, schedule_program
from popjit.schedule.target import IPU1, IPU2, Target, make_target

__all__ = ["IPU1", "IPU2", "Schedule", "Target", "make_target", "schedule_program"]
