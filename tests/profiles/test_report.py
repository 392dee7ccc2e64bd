"""``popjit report``: the terminal tables (a real subprocess), the PNG plots, and the HTML page opened
in headless Chromium (Debian's ``chromium``, driven by playwright; ``.ci/run`` installs it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest
from rich.console import Console

import popjit.tensorflow as tf
from popjit.frontend.control_flow import for_range
from popjit.profile import ReportOptions, write_report
from popjit.profile.html import figures
from popjit.profile.terminal import print_summary
from popjit.schedule import make_target, schedule_program
from popjit.schedule.memory import OutOfMemoryWarning
from tests.schedule.helpers import traced

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _looped(x):
    return for_range(0, 3, 1, lambda i, acc: [tf.tanh(acc) * 0.5 + x], [tf.zeros_like(x)])[0]


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> tuple[Path, list[dict]]:
    """Two programs' reports: a loop on 16 tiles, and an out-of-memory one under the IPU Model on 8."""
    root = tmp_path_factory.mktemp("report")
    options = ReportOptions(graph=True, execution=True, directory=str(root))
    looped = schedule_program(traced(_looped, np.zeros(2048, np.float32)), make_target("ipu2", 16))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OutOfMemoryWarning)
        oom = schedule_program(traced(lambda x: x + 1.0, np.zeros(1 << 22, np.float32)),
                               make_target("ipu2", 8, ipu_model=True))
    oom.name = "too_big"
    dirs = [write_report(s, options) for s in (looped, oom)]
    return root, [json.loads((d / "profile.json").read_text()) for d in dirs]


def popjit_report(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("POPLAR_ENGINE_OPTIONS", "TF_POPLAR_FLAGS")}
    return subprocess.run([sys.executable, "-m", "popjit", "report", *args], capture_output=True, text=True,
                          timeout=300, cwd=cwd, env={**env, "COLUMNS": "200"})


def test__terminal_summary__programs_totals_memory_and_oom_tiles(reports, tmp_path):
    root, (looped, oom) = reports
    r = popjit_report(str(root), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    n_css = min(10, len(looped["graph"]["compute_sets"]))
    for title in ("Programs", "Memory by category: too_big", "Top 8 tiles by memory: too_big",
                  f"Top {n_css} compute sets by cycles: {looped['program']}", "Execution: too_big"):
        assert title in r.stdout, title
    assert f"{looped['total_cycles']:,}" in r.stdout and f"{oom['total_cycles']:,}" in r.stdout
    peak = oom["graph"]["memory"]["peak_tile_bytes"]
    assert f"{peak:,} B (tile {oom['graph']['memory']['peak_tile']})" in r.stdout
    assert "Out of memory in too_big: 8 tiles over 638,976 B: 0, 1, 2, 3, 4, 5, 6, 7" in r.stdout


def test__one_profile_file__and_errors(reports, tmp_path):
    root, (looped, _) = reports
    (one,) = [p for p in root.rglob("profile.json") if json.loads(p.read_text())["program"] == looped["program"]]
    r = popjit_report(str(one), cwd=tmp_path)
    assert r.returncode == 0 and "too_big" not in r.stdout and looped["program"] in r.stdout
    r = popjit_report(str(tmp_path / "missing"), cwd=tmp_path)
    assert r.returncode == 1 and "no such file or directory" in r.stderr
    r = popjit_report(str(tmp_path), cwd=tmp_path)
    assert r.returncode == 1 and "no profile.json under" in r.stderr
    (tmp_path / "profile.json").write_text('{"format": "something else"}')
    r = popjit_report(str(tmp_path), cwd=tmp_path)
    assert r.returncode == 1 and "is not a popjit profile" in r.stderr


def test__png__plots_per_program(reports, tmp_path):
    root, _ = reports
    r = popjit_report(str(root), "--png", str(tmp_path / "png"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    files = sorted(p.name for p in (tmp_path / "png").iterdir())
    assert len(files) == 6 and sum(f.endswith("_memory.png") for f in files) == 2, files
    assert any(f.endswith("too_big_trace.png") for f in files)
    for f in files:
        height, width, _ = matplotlib.image.imread(tmp_path / "png" / f).shape
        assert height > 100 and width > 300


def test__html__one_offline_page_whose_charts_render_in_chromium(reports, tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian's chromium is not installed (apt-get install chromium; .ci/run does)")
    root, (looped, oom) = reports
    out = tmp_path / "report.html"
    r = popjit_report(str(root), "--html", str(out), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    page_text = out.read_text()
    assert "<script src=" not in page_text, "plotly's JavaScript is inlined, nothing is fetched"
    requests: list[str] = []
    with sync_api.sync_playwright() as pw:
        home = str(tmp_path / "home")  # chromium's profile and caches stay out of the user's home
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS,
                                     env={**os.environ, "HOME": home, "XDG_CONFIG_HOME": home, "XDG_CACHE_HOME": home})
        try:
            page = browser.new_page()
            page.on("request", lambda req: requests.append(req.url))
            page.goto(out.as_uri())
            page.wait_for_function("document.querySelectorAll('.js-plotly-plot .main-svg').length >= 10")
            plots = page.locator(".js-plotly-plot")
            titles = [t.strip() for t in page.locator(".js-plotly-plot .gtitle").all_text_contents()]
            timeline = plots.nth(9)  # the second program's execution trace
            timeline_bars = timeline.locator(".barlayer .point").count()
            oom_marks = plots.nth(5).locator(".scatterlayer .point").count()  # the second program's heat map
            icicle_nodes = plots.nth(3).locator(".slice").count()
        finally:
            browser.close()
    assert len(titles) == 10
    for p in (looped, oom):
        for title in ("Tile memory", "Memory by category per tile", "Liveness", "Program tree", "Execution trace"):
            assert any(t.startswith(f"{title}: {p['program']}") for t in titles), (title, titles)
    assert timeline_bars == len(oom["execution"]["trace"])
    assert oom_marks == 8, "the eight out-of-memory tiles are marked on the heat map"
    assert icicle_nodes == _tree_size(looped["graph"]["program_tree"])
    assert [u for u in requests if not u.startswith("file:")] == []


def _tree_size(node: dict) -> int:
    return 1 + sum(_tree_size(c) for c in node.get("children", ()))


def test__a_profile_with_one_part__shows_only_that_part(reports):
    _, (looped, _) = reports
    graph_only = {k: v for k, v in looped.items() if k != "execution"}
    execution_only = {k: v for k, v in looped.items() if k != "graph"}
    console = Console(record=True, width=200)
    print_summary([graph_only, execution_only], console)
    text = console.export_text()
    assert text.count(f"Memory by category: {looped['program']}") == 1
    assert text.count(f"Execution: {looped['program']}") == 1
    assert [f.layout.title.text.split(":")[0] for f in figures(graph_only)] == [
        "Tile memory", "Memory by category per tile", "Liveness", "Program tree"]
    assert [f.layout.title.text.split(":")[0] for f in figures(execution_only)] == ["Execution trace"]
