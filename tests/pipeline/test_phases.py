"""Compile phases: each one timed and logged on the ``popjit`` logger (``popjit run -v`` prints them), and
the compile progress bar of ``TF_POPLAR_FLAGS=--show_progress_bar``.

The ``popjit run`` tests are real subprocesses with a cache directory of their own, compiling a program of
a dozen distinct codelets from an empty cache: a genuine compile of a few seconds on this machine.
"""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import re
import threading
from pathlib import Path

import numpy as np
import pytest

import popjit.tensorflow as tf
from popjit import config, runner
from popjit.codegen import phases
from popjit.codegen.phases import BAR_DELAY, CompileProgress, Phases, codelets_note
from tests.test_run import popjit_run, write

COMPILE_PHASES = ["graph passes", "lowering", "tile schedule", "code generation"]
ALL_PHASES = [*COMPILE_PHASES, "machine code"]
FINISHED = re.compile(r"Finished phase: (?P<phase>[A-Za-z ]+) of '(?P<program>[^']+)' in (?P<seconds>\d+\.\d{3}) s"
                      r"(?: \((?P<note>[^)]*)\))?$")
CODELETS = re.compile(r"(?P<compiled>\d+) codelets? compiled, (?P<cached>\d+) from the cache(?:, \d+ through Numba)?")


def finished(lines: list[str], program: str) -> list[tuple[str, float, str]]:
    """(phase, seconds, note) of every "Finished phase" line for ``program``, in order."""
    out = []
    for line in lines:
        m = FINISHED.search(line)
        if m and m["program"] == program:
            out.append((m["phase"], float(m["seconds"]), m["note"] or ""))
    return out


def codelet_counts(note: str) -> tuple[int, int]:
    m = CODELETS.fullmatch(note)
    assert m, note
    return int(m["compiled"]), int(m["cached"])


# -- the phases helper -------------------------------------------------------------------------------------


def test__phases__log_each_start_and_finish_with_its_time_and_note(caplog):
    p = Phases("prog")
    with caplog.at_level(logging.INFO, logger="popjit"):
        with p.phase("first") as first:
            first.note = "3 things"
        with p.phase("second"):
            pass
    messages = [r.getMessage() for r in caplog.records if r.name == "popjit"]
    assert [m.split(" in ")[0] for m in messages] == [
        "Starting phase: first of 'prog'", "Finished phase: first of 'prog'",
        "Starting phase: second of 'prog'", "Finished phase: second of 'prog'"]
    assert finished(messages, "prog") == [("first", round(p.done[0].seconds, 3), "3 things"),
                                          ("second", round(p.done[1].seconds, 3), "")]
    assert p.summary() == f"first {p.done[0].seconds:.3f} s, second {p.done[1].seconds:.3f} s"
    assert p.elapsed() >= p.done[0].seconds + p.done[1].seconds


def test__phases__a_phase_that_raises_is_not_recorded_as_finished(caplog):
    p = Phases("prog")
    with caplog.at_level(logging.INFO, logger="popjit"), pytest.raises(ValueError, match="boom"), p.phase("broken"):
        raise ValueError("boom")
    assert [r.getMessage() for r in caplog.records if r.name == "popjit"] == ["Starting phase: broken of 'prog'"]
    assert p.done == [] and p.summary() == ""


def test__phases__pause_the_garbage_collector_until_the_outermost_ends_even_when_one_raises():
    assert gc.isenabled()
    p = Phases("prog")
    with p.phase("outer"):
        assert not gc.isenabled()
        with pytest.raises(ValueError, match="boom"), p.phase("inner"):
            raise ValueError("boom")
        assert not gc.isenabled(), "the outer phase still runs"
    assert gc.isenabled()


def test__phases__leave_a_collector_the_user_switched_off_switched_off():
    gc.disable()
    try:
        with Phases("prog").phase("only"):
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test__phases__on_two_threads_keep_the_collector_paused_until_both_end():
    inside, release = threading.Event(), threading.Event()

    def other() -> None:
        with Phases("other").phase("waiting"):
            inside.set()
            release.wait(10)

    thread = threading.Thread(target=other)
    thread.start()
    inside.wait(10)
    with Phases("prog").phase("short"):
        pass
    paused_while_other_runs = not gc.isenabled()
    release.set()
    thread.join()
    assert paused_while_other_runs and gc.isenabled()


@pytest.mark.parametrize(("compiled", "callees", "numba", "text"), [
    (12, 12, 0, "12 codelets compiled, 0 from the cache"),
    (12, 12, 2, "12 codelets compiled, 0 from the cache, 2 through Numba"),
    (1, 1, 0, "1 codelet compiled, 0 from the cache"),
    (0, 7, 0, "0 codelets compiled, 7 from the cache"),
    (2, 41, 0, "2 codelets compiled, 39 from the cache"),
])
def test__codelets_note__says_what_was_compiled_and_what_came_from_the_cache(compiled, callees, numba, text):
    assert codelets_note(compiled, callees, numba) == text


# -- a real compile, in this process -----------------------------------------------------------------------


def _phase_probe(x):
    return tf.reduce_sum(tf.sin(x) * tf.cos(x), axis=0) + tf.reduce_max(tf.square(x) - x, axis=0)


def test__compile_and_first_run__log_every_phase_of_the_program_in_order(caplog):
    fn = tf.function(_phase_probe, jit_compile=True)
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    with caplog.at_level(logging.INFO, logger="popjit"):
        out = fn(x).numpy()
    np.testing.assert_allclose(out, (np.sin(x) * np.cos(x)).sum(0) + (np.square(x) - x).max(0), rtol=1e-5, atol=1e-6)
    exe = fn.get_concrete_function(x).executable("cpu")
    program = exe.graph.name
    lines = [r.getMessage() for r in caplog.records if r.name == "popjit"]
    starts = [line for line in lines if line.startswith("Starting phase:") and line.endswith(f" of '{program}'")]
    # graphConstruction (Poplar's name) spans the compile phases, before the machine code
    assert starts == [f"Starting phase: {p} of '{program}'" for p in ["graphConstruction", *ALL_PHASES]]
    done = finished(lines, program)
    assert [d[0] for d in done] == [*COMPILE_PHASES, "graphConstruction", "machine code"]
    compiled, cached = codelet_counts(done[-1][2])
    distinct = len({c.name for c in exe.engine_source.callees})
    # the session's cache may hold this program's machine code, or some of its codelets', already (another
    # test, an earlier run): every distinct callee is either compiled or from the cache
    assert compiled + cached == distinct, (compiled, cached, distinct)


def test__compile_and_first_run__collect_no_garbage_while_their_phases_run(tmp_path, monkeypatch):
    running, collections_in_phases = [], []
    phase = Phases.phase

    @contextlib.contextmanager
    def noted(self, name):
        with phase(self, name) as current:
            running.append(name)
            try:
                yield current
            finally:
                running.remove(name)

    def note(stage: str, info: dict) -> None:
        if stage == "start" and running:
            collections_in_phases.append((info["generation"], list(running)))

    monkeypatch.setattr(Phases, "phase", noted)
    threshold = gc.get_threshold()
    gc.set_threshold(10, 2, 2)  # why: a collection every few allocations, as a long compile meets them
    gc.callbacks.append(note)
    try:
        with config.context(CACHE_DIR=str(tmp_path)):
            fn = tf.function(lambda x: tf.reduce_max(tf.exp(x) * 2.0 - x, axis=1), jit_compile=True)
            x = np.linspace(-2, 2, 24, dtype=np.float32).reshape(4, 6)
            out = fn(x).numpy()
    finally:
        gc.callbacks.remove(note)
        gc.set_threshold(*threshold)
    np.testing.assert_allclose(out, (np.exp(x) * 2.0 - x).max(1), rtol=1e-5)
    assert collections_in_phases == []


def test__debug_summary__gives_the_phase_times(capsys):
    fn = tf.function(lambda x: tf.tanh(x) * 3.0 - x, jit_compile=True)
    with config.context(DEBUG=1):
        fn(np.ones(5, np.float32))
    err = capsys.readouterr().err
    summary = re.search(r"=== popjit: compiled (\S+) ===\n(.*)\n", err)
    assert summary, err
    line = summary[2]
    assert re.search(r"\d+ codelets, \d+ temporaries, \d+\.\d{3} s \(", line), line
    times = re.findall(r"([a-z ]+) (\d+\.\d{3}) s", line.split("(", 1)[1])
    assert [t[0].strip(", ") for t in times] == COMPILE_PHASES
    assert line.endswith("; machine code compiles on first run)")


# -- the progress bar --------------------------------------------------------------------------------------


def test__progress_bar__stays_hidden_during_the_first_second(monkeypatch, capsys):
    monkeypatch.setenv("TF_POPLAR_FLAGS", "--show_progress_bar=true")
    with CompileProgress("quick") as progress:
        for done in range(1, 4):
            progress(done, 3)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(("flag", "shown"), [("true", True), ("false", False), ("auto", False)])
def test__progress_bar__follows_show_progress_bar(monkeypatch, capsys, flag, shown):
    """Past the delay (zero here) the bar shows with ``true``, never with ``false``, and with ``auto``
    only on a terminal (pytest's captured stderr is not one). Outside a terminal rich prints it once,
    complete, when the compile ends."""
    monkeypatch.setenv("TF_POPLAR_FLAGS", f"--show_progress_bar={flag}")
    monkeypatch.setattr(phases, "BAR_DELAY", 0.0)
    with CompileProgress("slow_program") as progress:
        for done in range(1, 5):
            progress(done, 4)
    err = capsys.readouterr().err
    if shown:
        assert re.search(r"Compiling 'slow_program' .* 4/4 codelets \d:\d\d:\d\d", err), err
        assert "optimising" not in err  # the bar ends saying what it compiled
    else:
        assert err == ""


# -- popjit run -v -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("argv", "request_"), [
    (["-v", "train.py", "-v"], runner.Request("path", "train.py", ("-v",), verbose=True)),
    (["--verbose", "-m", "pkg.mod", "a"], runner.Request("module", "pkg.mod", ("a",), verbose=True)),
    (["-v", "-v", "-c", "print(1)"], runner.Request("code", "print(1)", (), verbose=True)),
    (["train.py", "--verbose"], runner.Request("path", "train.py", ("--verbose",))),
    (["-v", "-h"], None),
])
def test__run_verbose__is_an_option_before_the_program(argv, request_):
    assert runner.parse_args(argv) == request_


def test__run_verbose__alone_is_a_usage_error():
    with pytest.raises(runner.UsageError, match="required: SCRIPT"):
        runner.parse_args(["-v"])


def test__run_help__describes_verbose():
    assert "[-v]" in runner.USAGE and "-v, --verbose" in runner.HELP


PROGRAM = """
import json
import numpy as np
import tensorflow as tf


@tf.function(jit_compile=True)
def many_codelets(x, w):
    a = tf.tanh(x) * tf.exp(-x)
    b = tf.sigmoid(tf.matmul(a, w))
    c = tf.reduce_max(b, axis=1) + tf.reduce_sum(tf.math.log1p(tf.abs(b)), axis=1)
    d = tf.cumsum(tf.nn.softmax(b), axis=1)
    return c, tf.reduce_mean(d, axis=0) + tf.reduce_min(tf.sqrt(tf.abs(a)), axis=0)[:3]


x = np.linspace(-1.0, 1.0, 20, dtype=np.float32).reshape(4, 5)
w = np.linspace(0.5, -0.5, 15, dtype=np.float32).reshape(5, 3)
c, m = many_codelets(x, w)
print(json.dumps([c.numpy().tolist(), m.numpy().tolist()]))
"""


def _reference() -> list[np.ndarray]:
    x = np.linspace(-1.0, 1.0, 20, dtype=np.float32).reshape(4, 5)
    w = np.linspace(0.5, -0.5, 15, dtype=np.float32).reshape(5, 3)
    a = np.tanh(x) * np.exp(-x)
    b = 1 / (1 + np.exp(-(a @ w)))
    c = b.max(1) + np.log1p(np.abs(b)).sum(1)
    e = np.exp(b - b.max(1, keepdims=True))
    d = np.cumsum(e / e.sum(1, keepdims=True), axis=1)
    return [c, d.mean(0) + np.sqrt(np.abs(a)).min(0)[:3]]


def _run(tmp_path: Path, cache: str, *options: str, bar: str) -> tuple[list[str], str]:
    """``popjit run [options] program.py`` with its own cache ``cache``: (stderr lines, stderr); the
    program's results are checked against NumPy."""
    script = write(tmp_path / "program.py", PROGRAM)
    r = popjit_run([*options, str(script)], tmp_path, POPJIT_CACHE_DIR=str(tmp_path / cache),
                   TF_POPLAR_FLAGS=f"--show_progress_bar={bar}")
    assert r.returncode == 0, r.stderr
    for got, want in zip(json.loads(r.stdout.strip().splitlines()[-1]), _reference()):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    return r.stderr.splitlines(), r.stderr


BAR = re.compile(r"Compiling 'many_codelets' .* (\d+)/(\d+) codelets \d:\d\d:\d\d")


@pytest.mark.slow
def test__popjit_run_v__logs_the_phases_and_a_second_run_takes_everything_from_the_cache(tmp_path):
    lines, err = _run(tmp_path, "cache", "-v", bar="true")
    done = finished(lines, "many_codelets")
    assert [d[0] for d in done] == [*COMPILE_PHASES, "graphConstruction", "machine code"], err
    compiled, cached = codelet_counts(done[-1][2])
    assert compiled >= 8 and cached == 0, done[-1]
    # the bar shows exactly when compiling took over a second, counting every codelet
    bar = BAR.search(err)
    assert (bar is not None) == (done[-1][1] >= BAR_DELAY), err
    if bar:
        assert (int(bar[1]), int(bar[2])) == (compiled, compiled)

    lines, err = _run(tmp_path, "cache", "--verbose", bar="true")
    done = finished(lines, "many_codelets")
    assert [d[0] for d in done] == ["Loading executable", "machine code"], err
    assert re.fullmatch(r"loaded in \d+\.\d{3} s from .*\.exe", done[0][2]), done[0]
    assert codelet_counts(done[-1][2]) == (0, compiled)
    assert (BAR.search(err) is not None) == (done[-1][1] >= BAR_DELAY), err


@pytest.mark.slow
def test__progress_bar__true_without_v_shows_no_phase_lines(tmp_path):
    lines, err = _run(tmp_path, "cache", bar="true")
    assert not any("phase" in line for line in lines), err
    assert BAR.search(err), "an empty cache: compiling takes seconds, so the bar shows\n" + err


@pytest.mark.slow
@pytest.mark.parametrize("bar", ["false", "auto"])
def test__progress_bar__false_or_auto_without_a_terminal_shows_none(tmp_path, bar):
    lines, err = _run(tmp_path, "cache", "-v", bar=bar)
    (seconds,) = [d[1] for d in finished(lines, "many_codelets") if d[0] == "machine code"]
    if seconds < BAR_DELAY:
        pytest.skip(f"compiling took {seconds} s: too quick for a bar to be due")
    assert "Compiling '" not in err and "codelets 0:" not in err, err
