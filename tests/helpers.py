"""Helpers shared by the tests: run a function compiled, eagerly on the CPU and eagerly on an IPU,
compare against NumPy with per-dtype tolerances, and run a program in a fresh Python process."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import popjit.tensorflow as tf
from popjit import dtypes

# Tolerances for comparing with a float64-computed NumPy reference rounded to the dtype.
TOLERANCE = {
    "float32": {"rtol": 2e-5, "atol": 1e-6},
    "float16": {"rtol": 2e-3, "atol": 2e-3},
    "float64": {"rtol": 1e-12, "atol": 1e-12},
}


def as_numpy(x: Any) -> Any:
    if isinstance(x, (list, tuple)):
        return type(x)(as_numpy(v) for v in x)
    if isinstance(x, dict):
        return {k: as_numpy(v) for k, v in x.items()}
    return x.numpy() if hasattr(x, "numpy") else np.asarray(x)


def run_compiled(fn: Callable, *args: Any) -> Any:
    """``fn`` traced by ``tf.function(jit_compile=True)`` and run natively on the host."""
    return as_numpy(tf.function(fn, jit_compile=True)(*args))


def run_eager(fn: Callable, *args: Any) -> Any:
    """``fn`` run op by op on the CPU (each op's NumPy reference)."""
    return as_numpy(fn(*[tf.constant(a) for a in args]))


def run_on_ipu(fn: Callable, *args: Any) -> Any:
    """``fn`` run op by op on ``/device:IPU:0`` (each op compiled through the whole pipeline)."""
    with tf.device("/device:IPU:0"):
        return as_numpy(fn(*[tf.constant(a) for a in args]))


def assert_close(actual: Any, expected: Any, dtype: Any = None, **tol: Any) -> None:
    """Equal shapes and dtypes, values equal (ints, bools) or close (floats, NaN == NaN)."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape, f"shape {actual.shape} != {expected.shape}"
    assert actual.dtype == expected.dtype, f"dtype {actual.dtype} != {expected.dtype}"
    if actual.dtype.kind == "f":
        t = {**TOLERANCE.get(str(dtype or actual.dtype), TOLERANCE["float32"]), **tol}
        np.testing.assert_allclose(actual.astype(np.float64), expected.astype(np.float64), equal_nan=True, **t)
    else:
        np.testing.assert_array_equal(actual, expected)


def dtype_of(name: str) -> dtypes.DType:
    return dtypes.as_dtype(name)


def run_program(source: str, cache: Path, check: bool = True, **env: str) -> subprocess.CompletedProcess:
    """``source`` run by a fresh Python with ``POPJIT_CACHE_DIR=cache`` (and ``env``); with ``check``
    it must exit 0."""
    out = subprocess.run([sys.executable, "-c", source], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "POPJIT_CACHE_DIR": str(cache), **env})
    if check:
        assert out.returncode == 0, out.stderr[-3000:]
    return out


def sigint_as_at_a_terminal() -> None:
    """A child process's SIGINT handling as at a terminal (``preexec_fn`` of a test that interrupts it)."""
    # why: a shell without job control starts background jobs with SIGINT ignored, the child
    # inherits that, and Python then never raises KeyboardInterrupt (CI runs that ran the suite
    # with `&` waited out the whole loop); a user's terminal process has the default disposition
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def device_of(ipus: int, trap_div0: bool = False) -> Any:
    """Configure a system of one device of ``ipus`` IPUs (trapping divisions by zero if ``trap_div0``); an
    ``IPUStrategy`` on it."""
    # why: the tests import helpers before popjit.ipu is needed elsewhere
    from popjit import ipu

    cfg = ipu.config.IPUConfig()
    cfg.auto_select_ipus = ipus
    cfg.floating_point_behaviour.div0 = trap_div0
    cfg.configure_ipu_system()
    return ipu.ipu_strategy.IPUStrategy()


def thread_local_count(n: int) -> int:
    """Set the OpenBLAS thread count of the library popjit's products call to ``n``; the previous count."""
    from popjit.kernels import blas

    assert blas._LIB is not None
    return int(ctypes.c_int(blas._LIB.openblas_set_num_threads_local(n)).value)
