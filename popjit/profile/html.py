"""``popjit report DIR --html OUT.html``: one self-contained page of plotly charts per program.

The page inlines plotly's JavaScript (no CDN: it opens offline). Per program: a heat map of tile
memory (out-of-memory tiles marked), memory per tile by category, liveness over the program steps,
the program tree (an icicle chart), each pipeline's timeline (its stages' passes per IPU) and the
execution trace (a timeline of compute, exchange and sync).
"""

from __future__ import annotations

import html
import math
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio
from plotly.offline import get_plotlyjs
from plotly.subplots import make_subplots

from popjit.profile.data import near_limit
from popjit.profile.trace import KIND_COLOURS


def memory_heatmap(p: dict[str, Any]) -> go.Figure:
    """Tiles in a grid, coloured by their peak bytes; out-of-memory tiles marked with an X."""
    mem = p["graph"]["memory"]
    totals = mem["total_by_tile"]
    cols = max(1, math.ceil(math.sqrt(len(totals))))
    rows = math.ceil(len(totals) / cols)
    z: list[list[float | None]] = [[None] * cols for _ in range(rows)]
    text: list[list[str]] = [[""] * cols for _ in range(rows)]
    for tile, n in enumerate(totals):
        z[tile // cols][tile % cols] = n
        text[tile // cols][tile % cols] = f"tile {tile}: {n:,} B"
    fig = go.Figure(go.Heatmap(z=z, text=text, hoverinfo="text", colorscale="Viridis",
                               colorbar={"title": "bytes"}, zmin=0))
    oom = mem["oom_tiles"]
    if oom:
        fig.add_trace(go.Scatter(x=[t % cols for t in oom], y=[t // cols for t in oom], mode="markers",
                                 marker={"symbol": "x", "color": "red", "size": 8}, name="out of memory",
                                 text=[f"tile {t}: out of memory" for t in oom], hoverinfo="text"))
    limit = p["target"]["bytes_per_tile"]
    fig.update_layout(title=f"Tile memory: {p['program']} (peak {max(totals):,} B of {limit:,} B per tile; "
                            f"{len(oom)} tiles out of memory)",
                      xaxis_title=f"tile mod {cols}", yaxis_title=f"tile // {cols}")
    return fig


def memory_by_category(p: dict[str, Any]) -> go.Figure:
    """Stacked areas (one path per category, fast with 1472 tiles): each tile's peak bytes by category (and
    the memory per tile, :func:`near_limit`)."""
    mem = p["graph"]["memory"]
    tiles = list(range(len(mem["total_by_tile"])))
    fig = go.Figure()
    for cat, per_tile in mem["by_category"].items():
        if any(per_tile):
            fig.add_trace(go.Scatter(x=tiles, y=per_tile, name=cat, stackgroup="memory", mode="lines",
                                     line={"shape": "hvh", "width": 0}))
    if near_limit(p):
        fig.add_hline(y=p["target"]["bytes_per_tile"], line_dash="dash", line_color="red",
                      annotation_text="memory per tile")
    fig.update_layout(title=f"Memory by category per tile: {p['program']}",
                      xaxis_title="tile", yaxis_title="bytes")
    return fig


def liveness_chart(p: dict[str, Any]) -> go.Figure:
    """Bytes live at each program step: all tiles (always live + not always live) and the fullest tile."""
    live = p["graph"]["liveness"]
    steps = [s["step"] for s in live["steps"]]
    names = [s["name"] for s in live["steps"]]
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_trace(go.Scatter(x=steps, y=[live["always_live_bytes"] + s["not_always_live_bytes"] for s in live["steps"]],
                             text=names, mode="lines+markers", name="all tiles"), secondary_y=False)
    fig.add_trace(go.Scatter(x=steps, y=[s["max_tile_bytes"] for s in live["steps"]], text=names,
                             mode="lines+markers", name="fullest tile"), secondary_y=True)
    fig.update_layout(title=f"Liveness: {p['program']}", xaxis_title="program step")
    fig.update_yaxes(title_text="bytes live, all tiles", secondary_y=False)
    fig.update_yaxes(title_text="bytes, fullest tile", secondary_y=True)
    return fig


def _flatten(node: dict[str, Any], parent: str, ids: list[str], labels: list[str], parents: list[str],
             hover: list[str]) -> None:
    ident = f"{parent}/{len(ids)}"
    ids.append(ident)
    labels.append(node["name"])
    parents.append(parent)
    hover.append(f"{node['type']}: {node['cycles']:,} cycles")
    for child in node.get("children", ()):
        _flatten(child, ident, ids, labels, parents, hover)


def program_tree(p: dict[str, Any]) -> go.Figure:
    """The program tree as an icicle chart (hover: each node's cycles)."""
    ids: list[str] = []
    labels: list[str] = []
    parents: list[str] = []
    hover: list[str] = []
    _flatten(p["graph"]["program_tree"], "", ids, labels, parents, hover)
    fig = go.Figure(go.Icicle(ids=ids, labels=labels, parents=parents, hovertext=hover, hoverinfo="label+text",
                              root_color="lightgrey"))
    fig.update_layout(title=f"Program tree: {p['program']}", margin={"t": 50, "l": 10, "r": 10, "b": 10})
    return fig


def execution_timeline(p: dict[str, Any]) -> go.Figure:
    """The execution trace: one lane per phase kind, bars from each event's start cycle."""
    ex = p["execution"]
    fig = go.Figure()
    for kind, colour in KIND_COLOURS.items():
        events = [e for e in ex["trace"] if e["kind"] == kind]
        if events:
            fig.add_trace(go.Bar(base=[e["start"] for e in events], x=[e["cycles"] for e in events],
                                 y=[kind] * len(events), orientation="h", name=kind, marker_color=colour,
                                 text=[f"{e['name']} (step {e['step']}): {e['cycles']:,} cycles" for e in events],
                                 hoverinfo="text", textposition="none"))
    folded = f"; {ex['folded_iterations']:,} loop iterations folded" if ex["folded_iterations"] else ""
    fig.update_layout(title=f"Execution trace: {p['program']} ({ex['total_cycles']:,} cycles{folded})",
                      xaxis_title="cycle", barmode="overlay")
    return fig


#: Colours of a pipeline's forward and backward passes in its timeline.
PASS_COLOURS = {"forward": "#1f77b4", "backward": "#ff7f0e"}


def pipeline_timeline(p: dict[str, Any], pipe: dict[str, Any]) -> go.Figure:
    """A pipeline's run: one lane per IPU, a bar per stage and micro-batch, forward and backward passes."""
    fig = go.Figure()
    for kind, colour in PASS_COLOURS.items():
        bars = [b for b in pipe["timeline"] if b["pass"] == kind]
        if bars:
            fig.add_trace(go.Bar(base=[b["start"] for b in bars], x=[b["cycles"] for b in bars],
                                 y=[f"IPU {b['ipu']}" for b in bars], orientation="h", name=kind,
                                 marker_color=colour, text=[f"stage {b['stage']}, micro-batch {b['micro_batch']}: "
                                                            f"{b['cycles']:,} cycles" for b in bars],
                                 hoverinfo="text", textposition="none"))
    fig.update_layout(title=f"Pipeline timeline: {p['program']} ({pipe['schedule']}, {pipe['steps']} steps of "
                            f"{pipe['step_cycles']:,} cycles, {100 * pipe['utilisation']:.1f}% busy)",
                      xaxis_title="cycle", barmode="overlay", yaxis={"autorange": "reversed"})
    return fig


def figures(p: dict[str, Any]) -> list[go.Figure]:
    """Every chart the profile ``p`` has data for."""
    out = []
    if "graph" in p:
        out += [memory_heatmap(p), memory_by_category(p), liveness_chart(p), program_tree(p)]
        out += [pipeline_timeline(p, pipe) for pipe in p["graph"].get("pipelines", ())]
    if "execution" in p:
        out.append(execution_timeline(p))
    return out


def _section(p: dict[str, Any]) -> str:
    tgt = p["target"]
    head = (f"<h2>{html.escape(p['program'])}</h2><p>{html.escape(tgt['version'])}, {tgt['tiles']} tiles x "
            f"{tgt['bytes_per_tile']:,} B at {tgt['clock_hz'] / 1e9:.2f} GHz: {p['total_cycles']:,} cycles = "
            f"{p['seconds'] * 1e6:,.2f} us</p>")
    charts = [pio.to_html(fig, full_html=False, include_plotlyjs=False) for fig in figures(p)]
    return "<section>" + head + "".join(charts) + "</section>"


def write_html(profiles: list[dict[str, Any]], out: str | Path) -> Path:
    """Write the page for ``profiles`` to ``out``."""
    out = Path(out)
    body = "".join(_section(p) for p in profiles)
    page = ("<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>popjit profile report</title>"
            f"<script type=\"text/javascript\">{get_plotlyjs()}</script></head><body>"
            f"<h1>popjit profile report</h1><p>{len(profiles)} program(s)</p>{body}</body></html>")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page, encoding="utf-8")
    return out
