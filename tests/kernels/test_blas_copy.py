"""popjit's products run on the CPU's own OpenBLAS kernels whatever the user's ``OPENBLAS_CORETYPE``
forces on NumPy (issue 9: no user variable may cost popjit its speed): under it popjit loads a private
copy of NumPy's OpenBLAS, kept in the cache directory, and ``POPJIT_OPENBLAS_CORETYPE`` chooses
otherwise. Each case runs in a fresh process, as OpenBLAS reads the variable once, when it loads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

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

def corename(lib):
    f = lib.scipy_openblas_get_corename64_
    f.restype = ctypes.c_char_p
    return f().decode()

a = np.random.default_rng(0).uniform(-1, 1, (64, 300)).astype(np.float32)
b = np.random.default_rng(1).uniform(-1, 1, (300, 70)).astype(np.float32)
got = tf.function(lambda x, y: tf.matmul(x, y), jit_compile=True)(a, b).numpy()
print(json.dumps({"numpy": corename(blas._NUMPY_LIB), "popjit": corename(blas._LIB),
                  "own_copy": blas._LIB is not blas._NUMPY_LIB, "description": blas.blas_description(),
                  "error": float(np.max(np.abs(got - a.astype(np.float64) @ b)))}))
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


def test__without_openblas_coretype__popjit_calls_numpys_own_library(tmp_path, cpu_kernels) -> None:
    got = report(tmp_path, OPENBLAS_CORETYPE=None, POPJIT_OPENBLAS_CORETYPE=None)
    assert got["numpy"] == got["popjit"] == cpu_kernels
    assert not got["own_copy"] and "own copy" not in got["description"]
    assert got["error"] < 1e-4
    assert not list((tmp_path / "cache").glob("gen-*/openblas"))


def test__a_forced_coretype__stays_numpys_while_popjits_products_run_the_cpus_kernels(tmp_path, cpu_kernels) -> None:
    user = forced(cpu_kernels)
    got = report(tmp_path, OPENBLAS_CORETYPE=user, POPJIT_OPENBLAS_CORETYPE=None)
    assert got["numpy"] == user and got["popjit"] == cpu_kernels and got["own_copy"]
    assert f"{cpu_kernels} kernels" in got["description"] and f"NumPy's runs {user} kernels" in got["description"]
    assert got["error"] < 1e-4
    (directory,) = (tmp_path / "cache").glob("gen-*/openblas")
    (copy,) = directory.iterdir()
    assert copy.stat().st_size == Path(blas._numpy_openblas_path()).stat().st_size
    before = copy.stat().st_mtime_ns
    assert report(tmp_path, OPENBLAS_CORETYPE=user, POPJIT_OPENBLAS_CORETYPE=None)["popjit"] == cpu_kernels
    assert copy.stat().st_mtime_ns == before, "a later process copied the library again"


def test__popjit_openblas_coretype_numpy__follows_the_users_setting(tmp_path, cpu_kernels) -> None:
    user = forced(cpu_kernels)
    got = report(tmp_path, OPENBLAS_CORETYPE=user, POPJIT_OPENBLAS_CORETYPE="numpy")
    assert got["numpy"] == got["popjit"] == user and not got["own_copy"]
    assert got["error"] < 1e-4


def test__popjit_openblas_coretype_names_popjits_kernels_and_leaves_numpys(tmp_path, cpu_kernels) -> None:
    chosen = forced(cpu_kernels)
    got = report(tmp_path, OPENBLAS_CORETYPE=None, POPJIT_OPENBLAS_CORETYPE=chosen)
    assert got["numpy"] == cpu_kernels and got["popjit"] == chosen and got["own_copy"]
    assert got["error"] < 1e-4


def test__without_a_writable_cache__the_copy_is_made_in_memory(tmp_path, cpu_kernels) -> None:
    (tmp_path / "file").write_text("")
    got = report(tmp_path, OPENBLAS_CORETYPE=forced(cpu_kernels), POPJIT_OPENBLAS_CORETYPE=None,
                 POPJIT_CACHE_DIR=str(tmp_path / "file" / "cache"))
    assert got["popjit"] == cpu_kernels and got["own_copy"] and got["error"] < 1e-4


@pytest.mark.parametrize("raw,value", [("", None), ("numpy", "numpy"), (" NumPy ", "numpy"), ("SkylakeX", "SkylakeX")])
def test__popjit_openblas_coretype__parses(raw, value) -> None:
    assert config.SETTINGS["OPENBLAS_CORETYPE"].parse(raw) == value


def test__popjit_openblas_coretype__rejects_what_cannot_be_a_kernel_name() -> None:
    with pytest.raises(ValueError, match=r"POPJIT_OPENBLAS_CORETYPE='a b'.*numpy or an OpenBLAS kernel name"):
        config.SETTINGS["OPENBLAS_CORETYPE"].parse("a b")
