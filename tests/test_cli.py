"""The ``popjit`` command, run as real subprocesses (``python -m popjit`` and the console script).

Every subprocess gets its own temporary POPJIT_CACHE_DIR, so the tests never touch ~/.cache.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

import popjit


def console_script() -> str:
    """The installed ``popjit`` script (beside this Python, or on PATH)."""
    beside = Path(sysconfig.get_path("scripts")) / "popjit"
    found = str(beside) if beside.exists() else shutil.which("popjit")
    assert found, "the `popjit` console script is not installed (pip install -e .)"
    return found


def run(args: list[str], cache_dir: Path, *, script: bool = False, timeout: float = 300,
        **env: str) -> subprocess.CompletedProcess:
    """Run ``python -m popjit ARGS`` (or the console script) with a clean popjit environment."""
    base = {k: v for k, v in os.environ.items() if k not in ("POPJIT_NUM_IPUS", "TF_POPLAR_FLAGS", "POPJIT_DEBUG")}
    cmd = [console_script()] if script else [sys.executable, "-m", "popjit"]
    return subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=timeout,
                          env={**base, "POPJIT_CACHE_DIR": str(cache_dir), **env})


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    """``popjit demo`` once, on a cold cache of its own."""
    cache = tmp_path_factory.mktemp("popjit-cache")
    return run(["demo"], cache), cache


def test_version(tmp_path: Path) -> None:
    r = run(["--version"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"popjit {popjit.__version__} (numba ")


def test_help_lists_the_subcommands(tmp_path: Path) -> None:
    r = run(["--help"], tmp_path, script=True)
    assert r.returncode == 0, r.stderr
    for command in ("devices", "demo", "cache", "run", "report"):
        assert re.search(rf"^\s+{command}\s", r.stdout, re.M), command


def test_no_command_prints_help(tmp_path: Path) -> None:
    r = run([], tmp_path)
    assert r.returncode == 0
    assert "usage: popjit" in r.stdout


@pytest.mark.parametrize("script", [False, True], ids=["python-m", "console-script"])
def test_devices_default_ipu2(tmp_path: Path, script: bool) -> None:
    r = run(["devices"], tmp_path, script=script)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "16 IPUs" in out and "set POPJIT_NUM_IPUS" in out
    assert re.search(r"IPU version\s+ipu2\b", out)
    assert re.search(r"tiles per IPU\s+1472\n", out)
    assert re.search(r"memory per tile\s+638976 bytes", out)
    assert re.search(r"clock\s+1\.33 GHz", out)
    assert re.search(r"workers per tile\s+6 ", out)


def test_devices_honours_num_ipus_and_version(tmp_path: Path) -> None:
    r = run(["devices", "--ipu-version", "ipu1"], tmp_path, POPJIT_NUM_IPUS="4")
    assert r.returncode == 0, r.stderr
    assert "4 IPUs (POPJIT_NUM_IPUS=4)" in r.stdout
    assert re.search(r"tiles per IPU\s+1216\n", r.stdout)
    assert re.search(r"memory per tile\s+262144 bytes", r.stdout)
    assert re.search(r"clock\s+1\.60 GHz", r.stdout)


def test_devices_tiles_per_ipu(tmp_path: Path) -> None:
    r = run(["devices", "--tiles-per-ipu", "8"], tmp_path)
    assert re.search(r"tiles per IPU\s+8\n", r.stdout), r.stdout + r.stderr
    assert re.search(r"memory per tile\s+638976 bytes", r.stdout)


def test_devices_reports_a_bad_poplar_flag(tmp_path: Path) -> None:
    r = run(["devices"], tmp_path, TF_POPLAR_FLAGS="--no_such_flag")
    assert r.returncode == 1
    assert "--no_such_flag" in r.stderr and "Traceback" not in r.stderr


def test_describe_system_lists_configured_devices() -> None:
    from popjit.cli import describe_system

    text = describe_system()  # conftest configured one ipu2 device
    assert re.search(r"/device:IPU:0\s+1 IPU \(0\)", text)
    assert "1472 tiles" in text


def test_demo_trains_the_digits_cnn_and_reports_the_ipu_estimates(demo) -> None:
    r, _ = demo
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "tf.keras.layers.Conv2D(32, 3" in r.stdout  # the script is shown
    epochs = re.findall(r"^Epoch (\d+)/10$", r.stdout, re.M)
    assert epochs == [str(e) for e in range(1, 11)]
    assert len(re.findall(r"^45/45 \[=+\] - .*loss: [\d.]+ - accuracy: [\d.]+$", r.stdout, re.M)) == 10
    losses = [float(v) for v in re.findall(r"^45/45 .* - loss: ([\d.]+)", r.stdout, re.M)]
    assert losses[-1] < losses[0] / 5
    accuracy = float(re.search(r"test accuracy\s+([\d.]+) on 320 unseen digits", r.stdout).group(1))
    assert accuracy >= 0.95
    step = re.search(r"on an IPU \(estimate\)\s+([\d,.]+) us per training step: one program of 5 steps is "
                     r"([\d,]+) cycles", r.stdout)
    assert step, r.stdout[-3000:]
    per_step_us, cycles = float(step.group(1).replace(",", "")), int(step.group(2).replace(",", ""))
    assert per_step_us == pytest.approx(cycles / 5 / 1.33e3, rel=0.01)
    assert re.search(r"peak tile memory: [\d,]+ B on tile \d+ \([\d.]+% of 638,976 B\)", r.stdout)
    assert re.search(r"memory by category .*vertexCode [\d,]+/[\d,]+", r.stdout)
    assert "demo finished" in r.stdout


def test_cache_list_then_clear(demo) -> None:
    _, cache = demo
    listed = run(["cache", "list", "-v"], cache)
    assert listed.returncode == 0, listed.stderr
    assert str(cache) in listed.stdout
    m = re.search(r"gen-\w+\s+(\d+) generated modules, (\d+) compiled programs, (\d+) compiled codelets.*current",
                  listed.stdout)
    assert m and int(m.group(1)) > 0 and int(m.group(2)) > 0, listed.stdout
    codelets, kernels = (len(list(cache.glob(f"gen-*/{d}/*.unit"))) for d in ("units", "kernels"))
    assert int(m.group(3)) == codelets + kernels and codelets > 0 and kernels > 0, "the demo's codelets and kernels"
    assert "popjit_gen/" in listed.stdout
    (cache / "notes.txt").write_text("not popjit's")
    cleared = run(["cache", "clear"], cache)
    assert cleared.returncode == 0, cleared.stderr
    assert re.search(r"removed 1 cache generation \(", cleared.stdout)
    assert not list(cache.glob("gen-*"))
    assert (cache / "notes.txt").exists()
    after = run(["cache"], cache)
    assert after.returncode == 0 and "empty" in after.stdout


def test_cache_clear_stale_keeps_the_current_generation(tmp_path: Path) -> None:
    from popjit.cli import _current_generation

    (tmp_path / _current_generation() / "popjit_gen").mkdir(parents=True)
    (tmp_path / "gen-000000000000" / "popjit_gen").mkdir(parents=True)
    (tmp_path / "gen-000000000000" / "popjit_gen" / "k_old.py").write_text("x = 1\n")
    listed = run(["cache", "list"], tmp_path)
    assert "gen-000000000000  1 generated modules, 0 compiled programs" in listed.stdout
    assert "stale" in listed.stdout
    r = run(["cache", "clear", "--stale"], tmp_path)
    assert r.returncode == 0 and "removed 1 cache generation" in r.stdout
    assert [p.name for p in tmp_path.glob("gen-*")] == [_current_generation()]


def test_cache_list_of_a_missing_directory(tmp_path: Path) -> None:
    r = run(["cache", "list"], tmp_path / "nowhere")
    assert r.returncode == 0 and "empty" in r.stdout
    assert not (tmp_path / "nowhere").exists()


def test_unknown_subcommand_fails(tmp_path: Path) -> None:
    r = run(["frobnicate"], tmp_path)
    assert r.returncode != 0
    assert "invalid choice: 'frobnicate'" in r.stderr


def test_report_without_profiles_fails_with_advice(tmp_path: Path) -> None:
    """``popjit report`` itself: tests/profiles/test_report.py."""
    r = run(["report", str(tmp_path)], tmp_path, script=True)
    assert r.returncode == 1
    assert "no profile.json under" in r.stderr and "POPLAR_ENGINE_OPTIONS" in r.stderr
