"""The popjit profile: one JSON document per compiled program, built from its tile schedule.

Every figure comes from the schedule (:meth:`popjit.schedule.Schedule.summary`, its memory report
and its program tree); nothing here estimates anything. ``docs/profiles.md`` describes each field.
The document starts with ``"format": "popjit-profile", "version": 1``; a reader refuses other
formats and newer versions.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import numpy as np

import popjit
from popjit.errors import InvalidArgumentError
from popjit.profile.trace import TRACE_LIMIT, cycles_by_kind, execution_trace
from popjit.schedule import Schedule
from popjit.schedule.memory import ALWAYS_LIVE, NOT_ALWAYS_LIVE

FORMAT = "popjit-profile"
VERSION = 1

#: Fields of a schedule step's summary that go into the profile's compute sets (per-tile cycles stay out: size).
_STEP_FIELDS = ("index", "name", "kind", "program", "cycles", "executions", "compute_cycles", "exchange_cycles",
                "tiles", "vertices", "exchange_bytes_in_max", "exchange_bytes_total", "flops", "note", "ipu",
                "backward")


def _plain(value: Any) -> Any:
    """NumPy arrays and scalars as JSON values."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _memory(schedule: Schedule, summary: dict[str, Any]) -> dict[str, Any]:
    mem = schedule.memory
    return {
        "always_live_categories": list(ALWAYS_LIVE),
        "not_always_live_categories": list(NOT_ALWAYS_LIVE),
        "by_category": _plain(summary["memory_by_category"]),
        "total_by_tile": _plain(summary["memory_by_tile"]),
        "always_live_by_tile": _plain(summary["always_live_by_tile"]),
        "not_always_live_peak_by_tile": _plain(summary["not_always_live_peak_by_tile"]),
        "peak_step_by_tile": _plain(mem.peak_step),
        "peak_tile": summary["peak_tile"],
        "peak_tile_bytes": summary["peak_tile_memory"],
        "total_bytes": int(mem.total.sum()),
        "oom": summary["oom"],
        "oom_tiles": summary["oom_tiles"],
        "oom_text": schedule.oom_text,
        "peak_by_ipu": summary["peak_by_ipu"],
    }


def _liveness(schedule: Schedule, summary: dict[str, Any]) -> dict[str, Any]:
    live = summary["liveness"]
    return {
        "always_live_bytes": int(schedule.memory.always_live_total.sum()),
        "steps": [{"step": s.index, "name": s.name, "not_always_live_bytes": int(live["step_live_bytes"][s.index]),
                   "max_tile_bytes": int(live["step_max_tile_bytes"][s.index])} for s in schedule.steps],
    }


def _compute_sets(schedule: Schedule, summary: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for step, s in zip(schedule.steps, summary["steps"]):
        entry = {k: _plain(s[k]) for k in _STEP_FIELDS}
        entry["total_cycles"] = s["cycles"] * s["executions"]
        entry["vertices_by_codelet"] = {name: int(v.sum()) for name, v in sorted(step.codelets.items())}
        out.append(entry)
    return out


def _execution(schedule: Schedule, summary: dict[str, Any], limit: int) -> dict[str, Any]:
    trace = execution_trace(schedule.tree, limit)
    return {
        "total_cycles": summary["total_cycles"],
        "seconds": summary["seconds"],
        "cycles_by_kind": cycles_by_kind(schedule.tree),
        "trace_limit": limit,
        "folded_iterations": trace.folded_iterations,
        "trace": trace.events,
    }


def build_profile(schedule: Schedule, graph: bool = True, execution: bool = True,
                  limit: int = TRACE_LIMIT) -> dict[str, Any]:
    """The profile of ``schedule``: the header and target, then the graph profile (memory, liveness,
    program tree, compute sets) and/or the execution profile (totals and the execution trace)."""
    summary = schedule.summary()
    profile: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "program": schedule.name,
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "popjit_version": popjit.__version__,
        "target": _plain(summary["target"]),
        "total_cycles": summary["total_cycles"],
        "seconds": summary["seconds"],
    }
    if graph:
        profile["graph"] = {
            "memory": _memory(schedule, summary),
            "liveness": _liveness(schedule, summary),
            "program_tree": schedule.tree.to_dict(),
            "compute_sets": _compute_sets(schedule, summary),
            "pipelines": _plain(summary["pipelines"]),
        }
    if execution:
        profile["execution"] = _execution(schedule, summary, limit)
    return profile


def near_limit(profile: dict[str, Any]) -> bool:
    """Whether the fullest tile uses half its memory or more: the charts then draw the memory per tile
    (below that, the line would flatten the bars)."""
    return profile["graph"]["memory"]["peak_tile_bytes"] >= profile["target"]["bytes_per_tile"] / 2


def check_profile(data: Any, where: str) -> dict[str, Any]:
    """``data`` if it is a popjit profile this popjit reads; otherwise ``InvalidArgumentError`` naming ``where``."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise InvalidArgumentError(f"{where} is not a popjit profile (no \"format\": \"{FORMAT}\" header).")
    version = data.get("version")
    if not isinstance(version, int) or version > VERSION or version < 1:
        raise InvalidArgumentError(f"{where} is a popjit profile of version {version!r}; this popjit "
                                   f"{popjit.__version__} reads version {VERSION}.")
    return data


def load_profile(path: str | Path) -> dict[str, Any]:
    """Read and check one profile file."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InvalidArgumentError(f"cannot read the profile {path}: {e}") from None
    return check_profile(data, str(path))
