"""The threads popjit runs on follow the cores the process may use (affinity, cgroup quota)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from popjit.kernels import blas
from popjit.kernels.threads import cgroup_cpu_limit


def test__cgroup_v2_quota__in_cores(tmp_path: Path):
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert cgroup_cpu_limit(tmp_path) == 1.5
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert cgroup_cpu_limit(tmp_path) is None


def test__cgroup_v1_quota__in_cores(tmp_path: Path):
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("300000\n")
    assert cgroup_cpu_limit(tmp_path) == 3.0
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    assert cgroup_cpu_limit(tmp_path) is None


def test__no_cgroup_files__no_limit(tmp_path: Path):
    assert cgroup_cpu_limit(tmp_path) is None


@pytest.mark.skipif(blas._LIB is None, reason="NumPy is not built on its bundled OpenBLAS")
def test__blas_threads__set_for_the_block_then_restored():
    get = blas._LIB.scipy_openblas_get_num_threads64_
    before = get()
    with blas.blas_threads(before + 2):
        assert get() == before + 2
    assert get() == before


THREADS = textwrap.dedent("""
    import os, sys
    if sys.argv[1] == "one-core":
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    import numba, numpy as np
    import popjit.tensorflow as tf
    from popjit import config
    with config.context(PARALLEL_MIN_ELEMENTS=1):
        out = tf.function(lambda x: tf.tanh(x) * 2.0, jit_compile=True)(np.ones(64, np.float32)).numpy()
    print(numba.get_num_threads(), float(out.sum()))
""")


def _threads(mode: str, **env: str) -> int:
    environment = {k: v for k, v in os.environ.items() if k not in ("NUMBA_NUM_THREADS", "POPJIT_NUM_THREADS")}
    proc = subprocess.run([sys.executable, "-c", THREADS, mode], capture_output=True, text=True, timeout=300,
                          env={**environment, **env})
    assert proc.returncode == 0, proc.stderr[-2000:]
    count, total = proc.stdout.split()
    assert float(total) == pytest.approx(64 * 2 * 0.7615942, rel=1e-5)
    return int(count)


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs a process that may run on two cores or more")
def test__parallel_pool__sized_by_the_cores_the_process_may_use():
    assert _threads("all-cores") == len(os.sched_getaffinity(0))
    assert _threads("one-core") == 1, "an affinity of one core: one thread"
    assert _threads("all-cores", POPJIT_NUM_THREADS="1") == 1, "POPJIT_NUM_THREADS sets it"
    assert _threads("all-cores", NUMBA_NUM_THREADS="1") == 1, "Numba's own variable still wins"
