"""The on-disk executable cache: a program compiled in one process is loaded by the next one (no
graph passes, lowering, tile schedule or code generation), runs to the same results, and shows the
same schedule; what its compile depends on is in its key; a program whose compile warned of
out-of-memory is not kept. Real files, real processes. (A damaged entry: test_cache_damage.py.)"""

from __future__ import annotations

import re
import subprocess
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

import popjit.tensorflow as tf
from popjit import config
from popjit.codegen.numerics import DEFAULT, Numerics
from popjit.pipeline import store
from popjit.pipeline.compiler import compile_graph
from popjit.schedule.schedule import OutOfMemoryWarning
from popjit.schedule.target import make_target
from tests.helpers import run_program

PROGRAM = textwrap.dedent("""
    import hashlib, logging, sys
    import numpy as np
    import popjit.tensorflow as tf
    from popjit import ipu

    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s")
    cfg = ipu.config.IPUConfig()
    cfg.auto_select_ipus = 1
    cfg.configure_ipu_system()

    @tf.function(jit_compile=True)
    def f(x, w):
        for _ in tf.range(4):
            x = tf.tanh(tf.matmul(x, w)) + 0.5 * x
        return tf.reduce_sum(x, axis=1)

    strategy = ipu.ipu_strategy.IPUStrategy()
    x = np.linspace(-1, 1, 64 * 48, dtype=np.float32).reshape(64, 48)
    w = np.linspace(-0.1, 0.1, 48 * 48, dtype=np.float32).reshape(48, 48)
    with strategy.scope():
        print("result", strategy.run(f, args=(x, w)).numpy().tolist())
    exe = f.get_concrete_function(x, w).executable("/device:IPU:0")
    print("schedule", hashlib.sha256(exe.as_text("schedule").encode()).hexdigest())
""")


def run(cache: Path) -> subprocess.CompletedProcess:
    return run_program(PROGRAM, cache)


def printed(out: subprocess.CompletedProcess, what: str) -> str:
    (line,) = [ln for ln in out.stdout.splitlines() if ln.startswith(what + " ")]
    return line


@pytest.mark.slow
def test__a_program_compiled_by_one_process__is_loaded_by_the_next(tmp_path):
    first = run(tmp_path / "cache")
    assert "Finished phase: tile schedule of 'f'" in first.stderr
    assert "Loading executable" not in first.stderr, "looking is not a phase"
    (kept,) = (tmp_path / "cache").glob("gen-*/executables/*.exe")

    second = run(tmp_path / "cache")
    assert re.search(r"Finished phase: Loading executable of 'f' in \d\.\d{3} s \(loaded in", second.stderr)
    for phase in ("graph passes", "lowering", "tile schedule", "code generation"):
        assert f"Starting phase: {phase} of 'f'" not in second.stderr, phase
    assert "0 codelets compiled" in second.stderr, "the machine code came from the program library cache"
    assert printed(second, "result") == printed(first, "result")
    assert printed(second, "schedule") == printed(first, "schedule"), "the schedule, computed again, is the same"
    assert list((tmp_path / "cache").glob("gen-*/executables/*.exe")) == [kept]


def graph_of(fn, *args):
    return tf.function(fn).get_concrete_function(*args).graph


def test__the_key__holds_what_the_compile_depends_on():
    fp = graph_of(lambda x: x * 2.0, np.ones(4, np.float32)).fingerprint()
    ipu2 = make_target()
    key = store.executable_key(fp, ipu2, DEFAULT)
    assert key == store.executable_key(fp, make_target(), Numerics())
    other_graph = graph_of(lambda x: x * 3.0, np.ones(4, np.float32)).fingerprint()
    variants = [
        store.executable_key(other_graph, ipu2, DEFAULT),
        store.executable_key(fp, make_target("ipu2", 64), DEFAULT),
        store.executable_key(fp, make_target("ipu21"), DEFAULT),
        store.executable_key(fp, None, DEFAULT),
        store.executable_key(fp, ipu2, Numerics(sr=True)),
    ]
    for setting, value in (("MATMUL", "popjit"), ("PARALLEL_MIN_ELEMENTS", 1024), ("DIRECT_CODELETS", False)):
        with config.context(**{setting: value}):
            variants.append(store.executable_key(fp, ipu2, DEFAULT))
    with config.context(DEBUG=1):
        assert store.executable_key(fp, ipu2, DEFAULT) == key, "how much is printed changes nothing compiled"
    assert len({key, *variants}) == len(variants) + 1


def test__a_program_that_warned_out_of_memory__is_not_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("POPJIT_CACHE_DIR", str(tmp_path))
    graph = graph_of(lambda x: x + 1.0, np.ones(1 << 22, np.float32))
    model = make_target("ipu2", 8, ipu_model=True)  # the IPU Model warns instead of failing
    with pytest.warns(OutOfMemoryWarning):
        compile_graph(graph, model)
    assert not list(tmp_path.rglob("*.exe"))
    with pytest.warns(OutOfMemoryWarning):
        compile_graph(graph, model)  # compiled again: the warning is seen again
    with warnings.catch_warnings():
        warnings.simplefilter("error", OutOfMemoryWarning)
        compile_graph(graph, make_target())
    assert len(list(tmp_path.rglob("*.exe"))) == 1, "the same graph fits a whole IPU and is kept"
