"""The float32/float64 matmul codelets: equal NumPy's product for small gemms (run on the calling
thread alone) and large ones (OpenBLAS's threads), and leave the thread's BLAS thread count as
they found it."""

from __future__ import annotations

import os
import subprocess
import sys

import numba
import numpy as np
import pytest

from popjit.kernels import blas, matmul
from popjit.kernels.jit import host_is_quiet, start_parallel_runtime
from tests.helpers import thread_local_count

pytestmark = pytest.mark.skipif(not blas.HAVE_CBLAS, reason="NumPy's OpenBLAS is not available")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("m,n,k", [(32, 512, 128), (3, 5, 7), (512, 256, 256)])  # below and above the bound
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True)])
def test__gemm__equals_numpy_and_restores_the_thread_count(dtype, m, n, k, ta, tb) -> None:
    rng = np.random.default_rng(m * n + k)
    a = rng.uniform(-1, 1, (k, m) if ta else (m, k)).astype(dtype)
    b = rng.uniform(-1, 1, (n, k) if tb else (k, n)).astype(dtype)
    out = rng.uniform(-1, 1, (m, n)).astype(dtype)
    want = 0.5 * ((a.T if ta else a) @ (b.T if tb else b)) + 2.0 * out
    fn = matmul.matmul_f32 if dtype == np.float32 else matmul.matmul_f64
    before = thread_local_count(2)
    try:
        fn(out.reshape(-1), a.reshape(-1), b.reshape(-1), 1, m, n, k, ta, tb, 0, 0, 0.5, 2.0)
        assert thread_local_count(2) == 2, "the gemm left this thread's BLAS thread count changed"
    finally:
        thread_local_count(before)
    np.testing.assert_allclose(out, want, rtol=1e-4 if dtype == np.float32 else 1e-12, atol=1e-4)
    assert (m * n * k < blas.SERIAL_GEMM_MACS) == (m * n * k <= 32 * 512 * 128)


#: A program whose one product runs on OpenBLAS's own threads under ``workqueue`` (at least
#: ``BLAS_THREADS_MACS``), the count of Numba's pool threads read by the codelet itself.
LARGE_PRODUCT = """
import numba
import numpy as np
import popjit.tensorflow as tf
from popjit.kernels import blas, matmul
from popjit.kernels.jit import host_is_quiet, start_parallel_runtime
a = np.random.default_rng(0).uniform(-1, 1, (512, 512)).astype(np.float32)
assert 512 ** 3 >= blas.BLAS_THREADS_MACS and not blas.POOL_SPINS
got = tf.function(lambda x: tf.matmul(x, x), jit_compile=True)(a).numpy()
print(float(np.max(np.abs(got - a.astype(np.float64) @ a))), matmul.matmul_f32.stats.cache_misses.total())
"""


def assert_runs_twice_from_one_cache(script: str, tmp_path, **settings: str) -> None:
    """Run ``script`` in two fresh processes sharing popjit's and Numba's caches (with the environment
    ``settings``): both print an error below 1e-3 and how many times the matmul codelet compiled, which for
    the second must be 0 (it loads the first one's machine code)."""
    env = {**os.environ, **settings, "POPJIT_CACHE_DIR": str(tmp_path / "cache"),
           "NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    env.pop("TF_POPLAR_FLAGS", None)
    runs = [subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=600)
            for _ in range(2)]
    for run in runs:
        assert run.returncode == 0, run.stderr[-3000:]
        assert float(run.stdout.split()[0]) < 1e-3
    assert runs[1].stdout.split()[1] == "0", "the later process compiled the matmul codelet again"


@pytest.mark.slow
def test__a_product_on_openblas_threads__runs_from_the_cache_in_a_later_process(tmp_path) -> None:
    """The codelet that gives a large product OpenBLAS's threads reads the pool's thread count by the
    runtime's symbol: read through Numba's ``get_num_threads``, the address of a ctypes pointer was
    compiled into the cached program, and the next process crashed calling it; Numba would not cache
    the matmul codelets either (so the later process compiles none of them)."""
    assert_runs_twice_from_one_cache(LARGE_PRODUCT, tmp_path, NUMBA_THREADING_LAYER="workqueue")


#: Calls the float32 BLAS codelet straight from Python, before anything else of popjit's has run.
DIRECT_CALL = """
import numpy as np
from popjit.kernels import matmul
a = np.arange(32 * 64, dtype=np.float32).reshape(32, 64) / 100
b = np.arange(64 * 16, dtype=np.float32).reshape(64, 16) / 100
out = np.zeros(32 * 16, np.float32)
matmul.matmul_f32(out, a.reshape(-1), b.reshape(-1), 1, 32, 16, 64, False, False, 0, 0, 1.0, 0.0)
print(float(np.max(np.abs(out.reshape(32, 16) - a.astype(np.float64) @ b) / np.abs(a.astype(np.float64) @ b).max())),
      matmul.matmul_f32.stats.cache_misses.total())
"""


@pytest.mark.slow
def test__the_blas_codelet__runs_from_python_when_loaded_from_numbas_cache(tmp_path) -> None:
    """The codelet calls Numba's parallel runtime by symbol. Loaded from Numba's cache it is not typed (typing
    started the runtime), so a caller from Python before any engine, the second process here, crashed."""
    assert_runs_twice_from_one_cache(DIRECT_CALL, tmp_path)


@pytest.mark.parametrize("m,n,k", [(1024, 1024, 128), (1024, 1024, 127), (64, 64, 64)])
def test__which_gemms_take_openblas_threads(m, n, k) -> None:
    """The products of ``BLAS_THREADS_FROM`` multiply-adds or more that run as one call get OpenBLAS's
    threads, as many as popjit's pool has (the codelet reads the bound at run time), the others none."""
    least = blas.BLAS_THREADS_FROM
    assert least == blas.openblas_threads_from(blas.POOL_SPINS, blas._LIB is not blas._NUMPY_LIB)
    assert (least if host_is_quiet() or not blas.POOL_SPINS else blas.NEVER) == blas.PLANNED_THREADS_FROM
    start_parallel_runtime()  # as an engine does before it runs
    before = thread_local_count(1)
    try:
        previous = matmul._threads_for(m, n, k)
        count = thread_local_count(1)
        matmul._restore_threads(previous)
    finally:
        thread_local_count(before)
    if m * n * k >= least:
        assert (previous, count) == (1, numba.get_num_threads())
    else:
        assert (previous, count) == (0, 1)


def test__openblas_threads_are_used_from_a_bound_that_depends_on_the_pool_and_the_host() -> None:
    assert blas.openblas_threads_from(False, False) == blas.SERIAL_GEMM_MACS, "a sleeping pool"
    assert blas.openblas_threads_from(False, True) == blas.SERIAL_GEMM_MACS
    assert blas.openblas_threads_from(True, True) == blas.SPINNING_BLAS_THREADS_MACS, "popjit's own copy"
    assert blas.openblas_threads_from(True, False) == blas.NEVER, "NumPy's threads spin 0.1 s after a call"
