"""An engine compiled while its parallel codelets come from the cache must run when it is itself
loaded from the cache in a later process.

Numba records the parallel runtime's start-up with a function's cached machine code only when it
compiled the parallel callee in the same process (Numba issue 8578), so such an engine, loaded in
a process that has not started the runtime, jumped into uninitialised thread pools and crashed
(SIGSEGV). popjit starts the runtime before it loads an engine. Real directories, fresh processes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

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
    env = {**os.environ, "POPJIT_CACHE_DIR": str(cache)}
    return subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, env=env, timeout=600)


def engine_machine_code(cache: Path) -> list[Path]:
    return [p for p in cache.glob("gen-*/numba/popjit_gen_*/e_*") if p.suffix in (".nbi", ".nbc")]


def test__engine_compiled_over_cached_parallel_codelets__runs_from_the_cache(tmp_path: Path) -> None:
    first = run(tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    assert any("parallel=True" in p.read_text() for p in tmp_path.glob("gen-*/popjit_gen/k_*.py")), \
        "the program has no parallel codelet: the test would prove nothing"
    engines = engine_machine_code(tmp_path)
    assert engines
    for path in engines:  # the next process compiles the engine again, over the cached codelets
        path.unlink()
    second = run(tmp_path)
    assert second.returncode == 0, second.stderr[-3000:]
    assert engine_machine_code(tmp_path)
    third = run(tmp_path)  # loads that engine from the cache
    assert third.returncode == 0, f"exit {third.returncode}: {third.stderr[-3000:]}"
    assert third.stdout == second.stdout == first.stdout
