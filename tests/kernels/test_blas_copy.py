"""popjit's products run on the CPU's own OpenBLAS kernels whatever the user's ``OPENBLAS_CORETYPE``
forces on NumPy (issue 9: no user variable may cost popjit its speed): under it popjit loads a private
copy of NumPy's OpenBLAS (made in memory), and ``POPJIT_OPENBLAS_CORETYPE`` chooses otherwise. The
copy also runs popjit's products beside its spinning pool, its threads sleeping as soon as a product
is done. Each case runs in a fresh process, as OpenBLAS reads the variable once, when it loads."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from popjit import config
from popjit.kernels import blas

BUNDLED = blas._NUMPY_LIB is not None and hasattr(blas._NUMPY_LIB, "scipy_openblas_get_corename64_")
pytestmark = pytest.mark.skipif(not BUNDLED, reason="NumPy is not built on its bundled OpenBLAS (scipy-openblas)")

#: Reports NumPy's and popjit's kernels and checks a popjit product against NumPy's.
REPORT = """
import ctypes, json
import numpy as np
import popjit.tensorflow as tf
from popjit.kernels import blas
from popjit.kernels.jit import host_is_quiet

def corename(lib):
    f = lib.scipy_openblas_get_corename64_
    f.restype = ctypes.c_char_p
    return f().decode()

a = np.random.default_rng(0).uniform(-1, 1, (64, 300)).astype(np.float32)
b = np.random.default_rng(1).uniform(-1, 1, (300, 70)).astype(np.float32)
got = tf.function(lambda x, y: tf.matmul(x, y), jit_compile=True)(a, b).numpy()
print(json.dumps({"numpy": corename(blas._NUMPY_LIB), "popjit": corename(blas._LIB),
                  "own_copy": blas._LIB is not blas._NUMPY_LIB, "description": blas.blas_description(),
                  "error": float(np.max(np.abs(got - a.astype(np.float64) @ b))),
                  "spins": blas.POOL_SPINS, "quiet": host_is_quiet(), "threads_from": blas.BLAS_THREADS_FROM,
                  "planned": blas.PLANNED_THREADS_FROM}))
"""


def report(tmp_path: Path, **env: str | None) -> dict:
    """What :data:`REPORT` prints in a fresh process with ``env`` set (None: unset) over the caller's."""
    env = {"POPJIT_CACHE_DIR": str(tmp_path / "cache"), "TF_POPLAR_FLAGS": None, **env}
    full = {k: v for k, v in os.environ.items() if k not in env}
    full.update({k: v for k, v in env.items() if v is not None})
    out = subprocess.run([sys.executable, "-c", REPORT], capture_output=True, text=True, env=full, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def cpu_kernels(tmp_path_factory) -> str:
    """The kernels OpenBLAS picks for this CPU when nothing forces them."""
    return report(tmp_path_factory.mktemp("free"), OPENBLAS_CORETYPE=None, POPJIT_OPENBLAS_CORETYPE=None)["popjit"]


def forced(cpu_kernels: str) -> str:
    """A kernel family other than the CPU's, as a user's ``OPENBLAS_CORETYPE`` would force."""
    return "Nehalem" if cpu_kernels == "Haswell" else "Haswell"


def test__beside_a_sleeping_pool_without_openblas_coretype__popjit_calls_numpys_own_library(tmp_path,
                                                                                            cpu_kernels) -> None:
    got = report(tmp_path, OPENBLAS_CORETYPE=None, POPJIT_OPENBLAS_CORETYPE=None, NUMBA_THREADING_LAYER="workqueue")
    assert got["numpy"] == got["popjit"] == cpu_kernels
    assert not got["own_copy"] and "own copy" not in got["description"]
    assert got["error"] < 1e-4 and got["threads_from"] == blas.SERIAL_GEMM_MACS


def test__beside_a_spinning_pool__popjit_runs_its_own_copy(tmp_path, cpu_kernels) -> None:
    """Its copy's threads sleep as soon as a product is done, so the largest products can use them; a
    process started on a busy host compiles them split."""
    got = report(tmp_path, OPENBLAS_CORETYPE=None, POPJIT_OPENBLAS_CORETYPE=None, NUMBA_THREADING_LAYER="omp")
    assert got["spins"] and got["numpy"] == got["popjit"] == cpu_kernels and got["own_copy"]
    assert got["threads_from"] == blas.SPINNING_BLAS_THREADS_MACS
    assert got["planned"] == (blas.SPINNING_BLAS_THREADS_MACS if got["quiet"] else blas.NEVER)
    assert got["error"] < 1e-4


def test__a_forced_coretype__stays_numpys_while_popjits_products_run_the_cpus_kernels(tmp_path, cpu_kernels) -> None:
    user = forced(cpu_kernels)
    got = report(tmp_path, OPENBLAS_CORETYPE=user, POPJIT_OPENBLAS_CORETYPE=None)
    assert got["numpy"] == user and got["popjit"] == cpu_kernels and got["own_copy"]
    assert f"{cpu_kernels} kernels" in got["description"] and f"NumPy's runs {user} kernels" in got["description"]
    assert got["error"] < 1e-4
    assert not list((tmp_path / "cache").rglob("*openblas*")), "the copy is made in memory, not in the cache"


def test__popjit_openblas_coretype_numpy__follows_the_users_setting(tmp_path, cpu_kernels) -> None:
    user = forced(cpu_kernels)
    got = report(tmp_path, OPENBLAS_CORETYPE=user, POPJIT_OPENBLAS_CORETYPE="numpy", NUMBA_THREADING_LAYER="workqueue")
    assert got["numpy"] == got["popjit"] == user and not got["own_copy"]
    assert got["error"] < 1e-4


def test__popjit_openblas_coretype_names_popjits_kernels_and_leaves_numpys(tmp_path, cpu_kernels) -> None:
    chosen = forced(cpu_kernels)
    got = report(tmp_path, OPENBLAS_CORETYPE=None, POPJIT_OPENBLAS_CORETYPE=chosen)
    assert got["numpy"] == cpu_kernels and got["popjit"] == chosen and got["own_copy"]
    assert got["error"] < 1e-4


@pytest.mark.parametrize("raw,value", [("", None), ("numpy", "numpy"), (" NumPy ", "numpy"), ("SkylakeX", "SkylakeX")])
def test__popjit_openblas_coretype__parses(raw, value) -> None:
    assert config.SETTINGS["OPENBLAS_CORETYPE"].parse(raw) == value


def test__popjit_openblas_coretype__naming_no_kernels_of_openblas_is_an_error(tmp_path) -> None:
    env = {**os.environ, "POPJIT_OPENBLAS_CORETYPE": "NoSuchCore", "POPJIT_CACHE_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", "import popjit.kernels.blas"], capture_output=True, text=True,
                         env=env, timeout=300)
    assert out.returncode != 0
    assert "ValueError: POPJIT_OPENBLAS_CORETYPE=NoSuchCore: OpenBLAS has no kernels of that name" in out.stderr


def test__popjit_openblas_coretype__rejects_what_cannot_be_a_kernel_name() -> None:
    with pytest.raises(ValueError, match=r"POPJIT_OPENBLAS_CORETYPE='a b'.*numpy or an OpenBLAS kernel name"):
        config.SETTINGS["OPENBLAS_CORETYPE"].parse("a b")


def _threads() -> set[int]:
    return {int(t) for t in os.listdir("/proc/self/task")}


def _running(tids: set[int]) -> set[int]:
    """Those of ``tids`` the kernel counts as running or runnable."""
    states = {}
    for tid in tids:
        with open(f"/proc/self/task/{tid}/stat") as f:
            states[tid] = f.read().rsplit(")", 1)[1].split()[0]
    return {tid for tid, state in states.items() if state == "R"}


def _product_then_running_threads(lib: ctypes.CDLL, threads: set[int]) -> set[int]:
    """Which of ``threads`` (``lib``'s own) still run 20 ms after a threaded 512^3 product on ``lib``."""
    a = np.ones((512, 512), np.float32)
    out = np.empty_like(a)
    lib.openblas_set_num_threads_local(2)
    sgemm = lib.scipy_cblas_sgemm64_
    sgemm.argtypes = [ctypes.c_int] * 3 + [ctypes.c_int64] * 3 + [ctypes.c_float, ctypes.c_void_p, ctypes.c_int64,
                                                                  ctypes.c_void_p, ctypes.c_int64, ctypes.c_float,
                                                                  ctypes.c_void_p, ctypes.c_int64]
    sgemm(101, 111, 111, 512, 512, 512, 1.0, a.ctypes.data, 512, a.ctypes.data, 512, 0.0, out.ctypes.data, 512)
    assert out[0, 0] == 512
    time.sleep(0.02)
    return _running(threads)


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="OpenBLAS starts no thread of its own on one core")
def test__the_own_copys_threads_sleep_as_soon_as_a_product_is_done() -> None:
    """OPENBLAS_THREAD_TIMEOUT reaches popjit's copy: its threads sleep right after a product, where a
    copy loaded with OpenBLAS's default timeout still spins 20 ms later (for about 0.1 s)."""
    running = {}
    for timeout in (blas.OWN_THREAD_TIMEOUT, None):
        before = _threads()
        lib = blas._private_openblas(blas._numpy_openblas_path(), None, timeout)
        threads = _threads() - before
        assert threads, "the copy started no thread of its own"
        running[timeout] = _product_then_running_threads(lib, threads)
    assert not running[blas.OWN_THREAD_TIMEOUT], "the own copy's threads still run after the product"
    assert running[None], "with OpenBLAS's default timeout its threads spin after a product"


@pytest.mark.skipif(blas._LIB is blas._NUMPY_LIB, reason="popjit runs NumPy's own library here (workqueue)")
def test__with_its_own_copy__popjit_leaves_numpys_thread_count_alone() -> None:
    """An engine runs with OpenBLAS's count at 1 (``blas_threads``): the count of popjit's copy, so NumPy's
    products on other threads keep theirs."""
    before = blas._NUMPY_LIB.openblas_set_num_threads_local(2)
    try:
        with blas.blas_threads(1):
            assert blas._LIB.scipy_openblas_get_num_threads64_() == 1
            assert blas._NUMPY_LIB.scipy_openblas_get_num_threads64_() == 2
    finally:
        blas._NUMPY_LIB.openblas_set_num_threads_local(before)
