"""BLAS ``sgemm``/``dgemm`` for matmul codelets, callable from nopython code.

We bind the CBLAS entry points of the OpenBLAS that NumPy itself ships (so a popjit matmul runs
exactly as fast as ``numpy.matmul``), and register them with LLVM as named symbols: codelets
call them through ``numba.types.ExternalFunction``, which keeps compiled engines cacheable on
disk. ``HAVE_CBLAS`` is False when NumPy was built against another BLAS; matmul then falls back
to Numba's ``np.dot``.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import os
import threading
from collections.abc import Iterator

import numpy as np

from popjit import config

from .jit import pool_spins

ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112


def _numpy_openblas() -> ctypes.CDLL | None:
    libs = os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs")
    for path in sorted(glob.glob(os.path.join(libs, "libscipy_openblas64*"))):
        try:
            return ctypes.CDLL(path)
        except OSError:
            continue
    return None


_LIB = _numpy_openblas()


def blas_description() -> str:
    """NumPy's BLAS as it runs in this process: OpenBLAS's build configuration, the kernels it chose for
    this CPU (``OPENBLAS_CORETYPE`` can force others) and its thread count."""
    if _LIB is None or not hasattr(_LIB, "scipy_openblas_get_corename64_"):
        return "unknown: NumPy is not built on its bundled OpenBLAS (scipy-openblas)"
    text = {}
    for name in ("config", "corename"):
        function = getattr(_LIB, f"scipy_openblas_get_{name}64_")
        function.restype = ctypes.c_char_p
        text[name] = function().decode()
    threads = _LIB.scipy_openblas_get_num_threads64_()
    return f"{text['config']}; {text['corename']} kernels; {threads} threads"


def _bind() -> tuple[object, object, object] | None:
    lib = _LIB
    if lib is None or not hasattr(lib, "scipy_cblas_sgemm64_") or not hasattr(lib, "openblas_set_num_threads_local"):
        return None
    import llvmlite.binding as llvm
    from numba import types

    i32, i64, ptr = types.int32, types.int64, types.uintp
    fns = []
    for sym, real in (("scipy_cblas_sgemm64_", types.float32), ("scipy_cblas_dgemm64_", types.float64)):
        name = f"popjit_{sym}"
        llvm.add_symbol(name, ctypes.cast(getattr(lib, sym), ctypes.c_void_p).value)
        sig = types.void(i32, i32, i32, i64, i64, i64, real, ptr, i64, ptr, i64, real, ptr, i64)
        fns.append(types.ExternalFunction(name, sig))
    llvm.add_symbol("popjit_blas_threads_local", ctypes.cast(lib.openblas_set_num_threads_local, ctypes.c_void_p).value)
    fns.append(types.ExternalFunction("popjit_blas_threads_local", i32(i32)))
    return fns[0], fns[1], fns[2]


_bound = None
if not config.get("DISABLE_NUMBA"):
    try:
        _bound = _bind()
    except Exception:
        _bound = None

HAVE_CBLAS = _bound is not None
cblas_sgemm, cblas_dgemm, set_threads_local = _bound if _bound else (None, None, None)
"""``set_threads_local(n)``: OpenBLAS's thread count until changed; returns the previous one
(OpenBLAS's ``openblas_set_num_threads_local``). The count is the process's, not the calling
thread's: the pthreads build NumPy ships keeps one, whatever the function's name says (set to 1 on
another thread, it made the main thread's 1024^3 product serial: 32.6 ms against 16.1). So only
code that no other thread runs at the same time may change it; see :func:`blas_threads`."""


_HOLD_LOCK = threading.Lock()
_holders = 0
_count_before = 0


@contextlib.contextmanager
def blas_threads(count: int) -> Iterator[None]:
    """Run the block with OpenBLAS's thread count set to ``count``, and the count the process had
    before the first such block restored when the last one running leaves (blocks on several threads
    at once, as replicas' engines run, share the setting).

    why: popjit decides how its products use the cores (serial calls on its own threads beside a
    spinning pool, :data:`POOL_SPINS`), whatever ``OPENBLAS_NUM_THREADS`` the user's environment
    holds for other programs. The count is the process's (:data:`set_threads_local`): NumPy's own
    products on other threads run with it while the block runs."""
    global _holders, _count_before
    if _LIB is None or not hasattr(_LIB, "openblas_set_num_threads_local"):
        yield
        return
    with _HOLD_LOCK:
        previous = _LIB.openblas_set_num_threads_local(count)
        if _holders == 0:
            _count_before = previous
        _holders += 1
    try:
        yield
    finally:
        with _HOLD_LOCK:
            _holders -= 1
            if _holders == 0:
                _LIB.openblas_set_num_threads_local(_count_before)


#: Whether popjit's pool's workers spin when idle (:func:`~popjit.kernels.jit.pool_spins`: OpenMP's,
#: the default, or TBB's; not ``NUMBA_THREADING_LAYER=workqueue``). Then every gemm call runs on its
#: calling thread alone, and the engine splits every product of
#: :data:`~popjit.kernels.blas_split.SPLIT_SPINNING_MACS` or more over the pool. why: OpenBLAS's own
#: threads busy-wait too, and the two pools' spinners fight over the cores (a training step alternates
#: them about ten times: 4.5x slower on 2 cores).
POOL_SPINS = pool_spins()

#: Below this many multiply-adds a gemm runs on the calling thread alone. why: OpenBLAS splits
#: gemms from about 2^18 multiply-adds, and on small ones (a recurrent layer's [32,128]@[128,512]
#: per time step) waking and syncing its other threads costs more than it saves; when another
#: process or popjit's own workers hold a core, a split [128,32]@[32,512] took 14x longer.
SERIAL_GEMM_MACS = 1 << 22

#: From this many multiply-adds a gemm runs on OpenBLAS's own threads; between
#: :data:`SERIAL_GEMM_MACS` and this the engine splits a tall or deep one over popjit's pool
#: (:mod:`popjit.kernels.blas_split`). why: OpenBLAS's threads busy-wait, on each other inside a call
#: and for ~0.1 s after it, so on a host whose cores are shared (another process, or popjit's own
#: workers on the next codelet) a call waits for a descheduled spinner: on a 2-core AMD EPYC beside one
#: busy process the Keras CNN (K1, 71M-multiply-add convolutions) took 3.3-4.0 s an epoch with them and
#: 2.4-2.5 s split (2.2-2.4 s either way when quiet; beside a two-threaded process 29-60 s against 2.6 s).
#: Above this, OpenBLAS's threads sharing packed panels are 30% faster than separate calls on a
#: quiet host (the MLP W2's 200M-268M products: 1.75 s against 2.3-2.7 s for 100 steps).
BLAS_THREADS_MACS = 1 << 27
