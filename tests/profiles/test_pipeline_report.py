"""A pipelined program's profile and ``popjit report``: the IPU and pass of each compute set, the pipeline's
table in the terminal, and its timeline chart rendered in headless Chromium."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from popjit.profile import ReportOptions, write_report
from tests.profiles.test_report import CHROMIUM, CHROMIUM_ARGS, popjit_report
from tests.schedule.helpers import pipelined


@pytest.fixture
def pipeline_report(fresh_ipu_system, tmp_path) -> tuple[Path, dict, object]:
    sched, pipe = pipelined(2, 4)
    directory = write_report(sched, ReportOptions(graph=True, execution=True, directory=str(tmp_path / "report")))
    return directory, json.loads((directory / "profile.json").read_text()), pipe


def test__terminal__pipeline_table_and_ipu_of_each_compute_set(pipeline_report, tmp_path):
    directory, profile, pipe = pipeline_report
    r = popjit_report(str(directory), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert f"Pipeline (Grouped, 4 micro-batches): {profile['program']}" in r.stdout
    assert f"{pipe.steps} pipeline steps of {pipe.step_cycles:,} cycles" in r.stdout
    assert "on 2 IPUs" in r.stdout and "backward" in r.stdout
    work = pipe.work
    for ipu in (0, 1):
        assert f"{work.forward[ipu]:,}" in r.stdout and f"{work.backward[ipu]:,}" in r.stdout


def test__html__pipeline_timeline_renders_a_bar_per_stage_pass(pipeline_report, tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian's chromium is not installed (apt-get install chromium; .ci/run does)")
    directory, profile, _ = pipeline_report
    out = tmp_path / "report.html"
    r = popjit_report(str(directory), "--html", str(out), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    with sync_api.sync_playwright() as pw:
        home = str(tmp_path / "home")
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS,
                                     env={**os.environ, "HOME": home, "XDG_CONFIG_HOME": home, "XDG_CACHE_HOME": home})
        try:
            page = browser.new_page()
            page.goto(out.as_uri())
            page.wait_for_function("document.querySelectorAll('.js-plotly-plot .main-svg').length >= 6")
            titles = [t.strip() for t in page.locator(".js-plotly-plot .gtitle").all_text_contents()]
            index = next(i for i, t in enumerate(titles) if t.startswith("Pipeline timeline"))
            bars = page.locator(".js-plotly-plot").nth(index).locator(".barlayer .point").count()
            lanes = page.locator(".js-plotly-plot").nth(index).locator(".ytick").all_text_contents()
        finally:
            browser.close()
    assert bars == len(profile["graph"]["pipelines"][0]["timeline"]) == 4 * 2 * 2  # micro-batches x stages x passes
    assert sorted(lanes) == ["IPU 0", "IPU 1"]
