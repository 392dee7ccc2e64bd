"""Parallel codelets loaded from the cache by a later process must run.

The engine launches codelets on Numba's thread pool (its ``numba_parallel_for``); a cached
program library refers to that function by name, so a later process must start the pool before it
loads one, or it jumps into uninitialised thread pools and crashes (SIGSEGV; Numba issue 8578 is the
same trap for Numba's own cached parallel functions). Real directories, fresh processes.
"""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

import pytest

from tests.helpers import run_program

pytestmark = pytest.mark.slow

PROGRAM = textwrap.dedent("""
    import numpy as np
    import popjit.tensorflow as tf
    from popjit import ipu

    cfg = ipu.config.IPUConfig()
    cfg.auto_select_ipus = 1
    cfg.configure_ipu_system()

    @tf.function(jit_compile=True)
    def f(x, w):
        for _ in tf.range(3):
            x = tf.tanh(tf.matmul(x, w)) * 1.5 + tf.reduce_mean(x, axis=0)
        return x

    x = np.linspace(-1, 1, 1 << 18, dtype=np.float32).reshape(512, 512)
    strategy = ipu.ipu_strategy.IPUStrategy()
    with strategy.scope():
        y = strategy.run(f, args=(x, x.T / 512)).numpy()
    print("result", float(y.sum()))
""")


def run(cache: Path) -> subprocess.CompletedProcess:
    return run_program(PROGRAM, cache, check=False)


def test__parallel_codelets_from_the_cache__run_in_a_new_process(tmp_path: Path) -> None:
    first = run(tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    assert any(", lo, hi):" in p.read_text() for p in tmp_path.glob("gen-*/popjit_gen/k_*.py")), \
        "the program has no parallel codelet: the test would prove nothing"
    cached = list(tmp_path.glob("gen-*/programs/*.lib"))
    assert len(cached) == 1, "the program's machine code is one cached library"
    stamps = {p: p.stat().st_mtime_ns for p in cached}
    second = run(tmp_path)  # its engine calls parallel codelets loaded from the cache
    assert second.returncode == 0, f"exit {second.returncode}: {second.stderr[-3000:]}"
    assert second.stdout == first.stdout
    assert {p: p.stat().st_mtime_ns for p in cached} == stamps, "the program was compiled again, not loaded"
