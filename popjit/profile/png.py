"""``popjit report DIR --png OUTDIR``: static plots of each program (matplotlib, Agg backend).

Per program ``<n>_<program>_memory.png`` (peak bytes per tile by category, out-of-memory tiles
marked), ``_liveness.png`` and ``_trace.png`` (the execution timeline), each written only when the
profile has that part.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # why: files only, never a window (and no display on a server)

import matplotlib.pyplot as plt

from popjit.profile.data import near_limit
from popjit.profile.trace import KIND_COLOURS


def _stem(k: int, p: dict[str, Any]) -> str:
    return f"{k}_{re.sub(r'[^A-Za-z0-9_.-]+', '_', p['program'])[:80]}"


def memory_png(p: dict[str, Any], path: Path) -> None:
    mem = p["graph"]["memory"]
    used = {cat: per_tile for cat, per_tile in mem["by_category"].items() if any(per_tile)}
    fig, ax = plt.subplots(figsize=(10, 4))
    # why an area, not bars: one polygon per category draws 1472 tiles in milliseconds (bars took seconds)
    ax.stackplot(range(len(mem["total_by_tile"])), *used.values(), labels=list(used))
    if near_limit(p):
        ax.axhline(p["target"]["bytes_per_tile"], color="red", linestyle="--", label="memory per tile")
    if mem["oom_tiles"]:
        ax.scatter(mem["oom_tiles"], [mem["total_by_tile"][t] for t in mem["oom_tiles"]], color="red", marker="x",
                   label="out of memory", zorder=3)
    ax.set(title=f"Memory by category per tile: {p['program']}", xlabel="tile", ylabel="bytes")
    ax.legend(fontsize="small", loc="upper right")
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


def liveness_png(p: dict[str, Any], path: Path) -> None:
    live = p["graph"]["liveness"]
    steps = [s["step"] for s in live["steps"]]
    fig, ax = plt.subplots(figsize=(10, 4))
    ax.plot(steps, [live["always_live_bytes"] + s["not_always_live_bytes"] for s in live["steps"]], marker=".")
    ax.set(title=f"Liveness: {p['program']}", xlabel="program step", ylabel="bytes live, all tiles")
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


def trace_png(p: dict[str, Any], path: Path) -> None:
    ex = p["execution"]
    fig, ax = plt.subplots(figsize=(10, 3))
    lanes = list(KIND_COLOURS)
    for y, kind in enumerate(lanes):
        spans = [(e["start"], e["cycles"]) for e in ex["trace"] if e["kind"] == kind]
        if spans:
            ax.broken_barh(spans, (y - 0.4, 0.8), color=KIND_COLOURS[kind])
    ax.set_yticks(range(len(lanes)), lanes)
    ax.set(title=f"Execution trace: {p['program']} ({ex['total_cycles']:,} cycles)", xlabel="cycle")
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


def write_pngs(profiles: list[dict[str, Any]], out: str | Path) -> list[Path]:
    """Write the plots of ``profiles`` into the directory ``out``; return the files written."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for k, p in enumerate(profiles):
        plots = []
        if "graph" in p:
            plots += [("memory", memory_png), ("liveness", liveness_png)]
        if "execution" in p:
            plots.append(("trace", trace_png))
        for name, plot in plots:
            path = out / f"{_stem(k, p)}_{name}.png"
            plot(p, path)
            written.append(path)
    return written
