"""``popjit report DIR`` in the terminal: tables of the programs, their memory and their time (rich)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

TOP = 10


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:,.2f} us"


def programs_table(profiles: list[dict[str, Any]]) -> Table:
    """One row per program: target, estimated cycles and time, peak tile memory, out-of-memory tiles."""
    t = Table(title="Programs")
    for col in ("program", "target", "compute sets", "cycles", "time", "peak tile memory", "OOM tiles"):
        t.add_column(col, justify="left" if col in ("program", "target") else "right")
    for p in profiles:
        tgt = p["target"]
        model = ", IPU Model" if tgt.get("ipu_model") else ""
        g = p.get("graph")
        mem = g["memory"] if g else None
        css = sum(cs["program"] == "Execute" for cs in g["compute_sets"]) if g else None
        ipus = f" on {tgt['num_ipus']} IPUs" if tgt.get("num_ipus", 1) > 1 else ""
        t.add_row(p["program"], f"{tgt['version']} {tgt['tiles']} tiles{ipus}{model}",
                  "-" if css is None else str(css), f"{p['total_cycles']:,}", _us(p["seconds"]),
                  "-" if mem is None else f"{mem['peak_tile_bytes']:,} B (tile {mem['peak_tile']})",
                  "-" if mem is None else str(len(mem["oom_tiles"])))
    return t


def memory_table(p: dict[str, Any]) -> Table:
    """Bytes by memory category: on the fullest tile of each category and over all tiles."""
    mem = p["graph"]["memory"]
    t = Table(title=f"Memory by category: {p['program']}")
    for col in ("category", "liveness", "max tile B", "all tiles B"):
        t.add_column(col, justify="left" if col in ("category", "liveness") else "right")
    for cat, per_tile in mem["by_category"].items():
        live = "always live" if cat in mem["always_live_categories"] else "not always live"
        t.add_row(cat, live, f"{max(per_tile, default=0):,}", f"{sum(per_tile):,}")
    t.add_row("total", "", f"{mem['peak_tile_bytes']:,}", f"{mem['total_bytes']:,}", style="bold")
    return t


def tiles_table(p: dict[str, Any], top: int = TOP) -> Table:
    """The ``top`` fullest tiles, with their largest category."""
    mem = p["graph"]["memory"]
    limit = p["target"]["bytes_per_tile"]
    totals = mem["total_by_tile"]
    order = sorted(range(len(totals)), key=lambda i: (-totals[i], i))[:top]
    oom = set(mem["oom_tiles"])
    t = Table(title=f"Top {len(order)} tiles by memory: {p['program']}")
    for col in ("tile", "bytes", "% of tile", "largest category", "OOM"):
        t.add_column(col, justify="right" if col in ("tile", "bytes", "% of tile") else "left")
    for i in order:
        cat = max(mem["by_category"], key=lambda c: mem["by_category"][c][i])
        t.add_row(str(i), f"{totals[i]:,}", f"{100 * totals[i] / limit:.1f}%", cat, "yes" if i in oom else "")
    return t


def compute_sets_table(p: dict[str, Any], top: int = TOP) -> Table:
    """The ``top`` steps by cycles over a run (cycles per execution times executions)."""
    css = p["graph"]["compute_sets"]
    order = sorted(css, key=lambda c: -c["total_cycles"])[:top]
    total = max(p["total_cycles"], 1)
    many = p["target"].get("num_ipus", 1) > 1
    t = Table(title=f"Top {len(order)} compute sets by cycles: {p['program']}")
    for col in ("step", *(("IPU", "pass") if many else ()), "name", "kind", "vertices", "tiles", "cycles", "runs",
                "total cycles", "%"):
        t.add_column(col, justify="left" if col in ("name", "kind", "pass") else "right")
    for c in order:
        where = (str(c.get("ipu", 0)), "backward" if c.get("backward") else "forward") if many else ()
        t.add_row(str(c["index"]), *where, c["name"], c["kind"], f"{c['vertices']:,}", str(c["tiles"]),
                  f"{c['cycles']:,}", f"{c['executions']:,}", f"{c['total_cycles']:,}",
                  f"{100 * c['total_cycles'] / total:.1f}")
    return t


def pipeline_table(p: dict[str, Any], pipe: dict[str, Any]) -> Table:
    """One pipeline: each IPU's stages and its forward and backward cycles per micro-batch, then the totals."""
    t = Table(title=f"Pipeline ({pipe['schedule']}, {pipe['micro_batches']} micro-batches): {p['program']}")
    for col in ("IPU", "stages", "forward cycles", "backward cycles", "copies in (cycles)"):
        t.add_column(col, justify="left" if col == "stages" else "right")
    for k, ipu in enumerate(pipe["ipus"]):
        stages = [str(i) for i, d in enumerate(pipe["device_mapping"]) if d == ipu]
        t.add_row(str(ipu), ", ".join(stages) or "-", f"{pipe['forward_cycles'][k]:,}",
                  f"{pipe['backward_cycles'][k]:,}", f"{pipe['link_cycles'][k]:,}")
    t.caption = (f"{pipe['steps']} pipeline steps of {pipe['step_cycles']:,} cycles = {pipe['cycles']:,} cycles; "
                 f"{100 * pipe['utilisation']:.1f}% of the IPUs' cycles busy (balanced stages: "
                 f"{100 * pipe['ideal_utilisation']:.1f}%)")
    return t


def execution_table(p: dict[str, Any]) -> Table:
    """Cycles of a run by phase kind."""
    ex = p["execution"]
    total = max(ex["total_cycles"], 1)
    t = Table(title=f"Execution: {p['program']} ({ex['total_cycles']:,} cycles, {_us(ex['seconds'])})")
    for col in ("phase", "cycles", "%"):
        t.add_column(col, justify="left" if col == "phase" else "right")
    for kind, cycles in ex["cycles_by_kind"].items():
        t.add_row(kind, f"{cycles:,}", f"{100 * cycles / total:.1f}")
    return t


def print_summary(profiles: list[dict[str, Any]], console: Console | None = None) -> None:
    """Print every table for ``profiles``."""
    console = console or Console()
    console.print(programs_table(profiles))
    for p in profiles:
        if "execution" in p:
            console.print(execution_table(p))
        if "graph" in p:
            console.print(memory_table(p))
            console.print(tiles_table(p))
            console.print(compute_sets_table(p))
            for pipe in p["graph"].get("pipelines", ()):
                console.print(pipeline_table(p, pipe))
            mem = p["graph"]["memory"]
            if mem["oom_tiles"]:
                tiles = ", ".join(map(str, mem["oom_tiles"][:32])) + (" ..." if len(mem["oom_tiles"]) > 32 else "")
                console.print(f"[bold red]Out of memory[/] in {p['program']}: {len(mem['oom_tiles'])} tiles over "
                              f"{p['target']['bytes_per_tile']:,} B: {tiles}")
