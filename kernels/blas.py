"""BLAS ``sgemm``/``dgemm`` for matmul codelets, callable from nopython code.

We bind the CBLAS entry points of the OpenBLAS that NumPy itself ships (so a popjit matmul runs
exactly as fast as ``numpy.matmul``), and register them with LLVM as named symbols: codelets
call them through ``numba.types.ExternalFunction``, which keeps compiled engines cacheable on
disk. ``HAVE_CBLAS`` is False when NumPy was built against another BLAS; matmul then falls back
to Numba's ``np.dot``.

popjit loads a private copy of that OpenBLAS (:func:`_private_openblas`) when the user's
``OPENBLAS_CORETYPE`` forces kernels other than the ones popjit's products should run
(``POPJIT_OPENBLAS_CORETYPE``: by default the CPU's own), so that NumPy keeps the kernels the user
chose and popjit's products do not lose a quarter of their speed to them; and beside popjit's spinning
pool, so that its largest products can use OpenBLAS's threads with a timeout that puts them to sleep
as soon as a product is done (:data:`BLAS_THREADS_FROM`, :data:`PLANNED_THREADS_FROM`).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import glob
import os
import tempfile
import threading
import warnings
from collections.abc import Iterator

import numpy as np

from popjit import config

from .jit import environment, host_is_quiet, pool_spins

ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112


def _numpy_openblas_path() -> str | None:
    libs = os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs")
    found = sorted(glob.glob(os.path.join(libs, "libscipy_openblas64*")))
    return found[0] if found else None


def _numpy_openblas() -> ctypes.CDLL | None:
    """NumPy's own OpenBLAS (loaded already: NumPy links it), or None when NumPy is built on another BLAS."""
    path = _numpy_openblas_path()
    try:
        return ctypes.CDLL(path) if path else None
    except OSError:
        return None


def _coretype_wanted(user: str | None) -> str | None:
    """The ``OPENBLAS_CORETYPE`` popjit's products should run under (None: OpenBLAS's choice from the
    CPU), or ``user``'s own setting when NumPy's library already runs them that way."""
    wanted = config.get("OPENBLAS_CORETYPE")
    if wanted == "numpy":
        return user
    return wanted


def _private_openblas(path: str, coretype: str | None, thread_timeout: int | None) -> ctypes.CDLL:
    """A second copy of the OpenBLAS at ``path``, loaded with ``OPENBLAS_CORETYPE`` set to ``coretype``
    and ``OPENBLAS_THREAD_TIMEOUT`` to ``thread_timeout`` (None: unset). why a copy: OpenBLAS reads them
    once, when it is loaded, and the dynamic loader gives the same library back for the same file; a
    copy is a library of its own, with its own kernels, threads and thread count, and NumPy's keeps the
    user's settings. The copy is made in memory (:func:`_memory_copy`)."""
    with environment(OPENBLAS_CORETYPE=coretype,
                     OPENBLAS_THREAD_TIMEOUT=None if thread_timeout is None else str(thread_timeout)):
        return ctypes.CDLL(_memory_copy(path))


def _memory_copy(path: str) -> str:
    """A copy of the library at ``path`` in an anonymous in-memory file (a temporary file, deleted when
    the process ends, where there are none), as a path the loader can open. why not a file in popjit's
    cache: the copy is made as popjit's kernels are imported, which every ``popjit`` command does, so it
    would come back right after ``popjit cache clear``; copying from the page cache takes 15-30 ms."""
    with open(path, "rb") as f:
        data = f.read()
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create(os.path.basename(path))
        with os.fdopen(fd, "wb", closefd=False) as copy:
            copy.write(data)
        return f"/proc/self/fd/{fd}"
    with tempfile.NamedTemporaryFile(suffix=os.path.basename(path), delete=False) as copy:
        copy.write(data)
    atexit.register(os.unlink, copy.name)
    return copy.name


def _describe(lib: ctypes.CDLL) -> dict[str, str]:
    text = {}
    for name in ("config", "corename"):
        function = getattr(lib, f"scipy_openblas_get_{name}64_")
        function.restype = ctypes.c_char_p
        text[name] = function().decode()
    return text


def _popjit_openblas(numpy_lib: ctypes.CDLL | None, thread_timeout: int | None) -> ctypes.CDLL | None:
    """The OpenBLAS popjit's products call: NumPy's own (``numpy_lib``), unless the kernels it runs are
    not the ones ``POPJIT_OPENBLAS_CORETYPE`` asks for (by default the CPU's, whatever
    ``OPENBLAS_CORETYPE`` says) or its threads should sleep after ``thread_timeout`` (a power of two of
    cycles, :data:`OWN_THREAD_TIMEOUT`); then a private copy (:func:`_private_openblas`)."""
    if numpy_lib is None or config.get("DISABLE_NUMBA"):
        return numpy_lib
    user = os.environ.get("OPENBLAS_CORETYPE") or None
    wanted = _coretype_wanted(user)
    if wanted == user and thread_timeout is None:
        return numpy_lib
    try:
        lib = _private_openblas(_numpy_openblas_path(), wanted, thread_timeout)
    except OSError as e:
        kernels = f"with OPENBLAS_CORETYPE={user}'s kernels" if user else "whose threads spin after each product"
        warnings.warn(f"popjit could not load its own copy of NumPy's OpenBLAS ({e}); its products run on NumPy's, "
                      f"{kernels}", RuntimeWarning, stacklevel=2)
        return numpy_lib
    if config.get("OPENBLAS_CORETYPE") not in (None, "numpy") and hasattr(lib, "scipy_openblas_get_corename64_"):
        ran = _describe(lib)["corename"]
        if ran.lower() != wanted.lower():  # why: OpenBLAS falls back to the CPU's kernels on a name it does not know
            raise ValueError(f"POPJIT_OPENBLAS_CORETYPE={wanted}: OpenBLAS has no kernels of that name (it ran its "
                             f"{ran} kernels); use one of its core names, such as Haswell or SkylakeX, or unset it")
    return lib


#: Whether popjit's pool's workers spin when idle (:func:`~popjit.kernels.jit.pool_spins`: OpenMP's,
#: the default, or TBB's; not ``NUMBA_THREADING_LAYER=workqueue``). Then a gemm call runs on its
#: calling thread alone (below :data:`BLAS_THREADS_FROM`), and the engine splits every product
#: of :data:`~popjit.kernels.blas_split.SPLIT_SPINNING_MACS` or more over the pool. why: OpenBLAS's own
#: threads busy-wait too, and the two pools' spinners fight over the cores (a training step alternates
#: them about ten times: 4.5x slower on 2 cores).
POOL_SPINS = pool_spins()

#: ``OPENBLAS_THREAD_TIMEOUT`` of popjit's own copy of OpenBLAS beside a spinning pool: its threads sleep
#: as soon as a product is done (2^4 cycles; OpenBLAS's default is 2^28, about 0.1 s of spinning), so
#: they do not spin while popjit's pool works. Waking them costs tens of microseconds, little beside the
#: products of :data:`SPINNING_BLAS_THREADS_MACS` or more that use them.
OWN_THREAD_TIMEOUT = 4

_NUMPY_LIB = _numpy_openblas()
_LIB = _popjit_openblas(_NUMPY_LIB, OWN_THREAD_TIMEOUT if POOL_SPINS else None)


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

#: Beside a spinning pool, a gemm of at least this many multiply-adds that is not split runs on the
#: threads of popjit's own copy of OpenBLAS (:data:`OWN_THREAD_TIMEOUT`), not split over popjit's pool.
#: why: its threads share one packed copy of the operand a split does not cut, where each of a split's
#: serial pieces packs all of it (the 1024^3 product's ``sgemm_itcopy``/``sgemm_oncopy``, ~8% of its time
#: split). With OpenBLAS's default timeout its threads spun for 0.1 s after each product and fought the
#: pool's: on a 2-core Ice Lake VM the MLP W2 (products of 205M-268M) took 1.87 s for 100 steps against
#: 1.41-1.53 s split. With its threads sleeping at once, five alternating runs: 1.30-1.68 s against
#: 1.44-2.09 s split (best calls), each run faster; the 1024^3 product 0.92-0.95x NumPy's (median calls)
#: against 0.72-0.88x split. Beside a busy process the split wins (W2 2.9 s against 3.1-3.8 s), so a
#: process that starts there splits them when it compiles (:data:`PLANNED_THREADS_FROM`).
SPINNING_BLAS_THREADS_MACS = 1 << 27

#: "Never": more multiply-adds than any product has.
NEVER = 1 << 62


def openblas_threads_from(spins: bool, own_copy: bool) -> int:
    """From how many multiply-adds a gemm that runs as one call runs on OpenBLAS's threads: beside a pool
    that sleeps when idle, from :data:`SERIAL_GEMM_MACS`; beside a spinning one, from
    :data:`SPINNING_BLAS_THREADS_MACS` when popjit runs its ``own_copy`` of OpenBLAS (whose threads sleep at
    once), else never."""
    if not spins:
        return SERIAL_GEMM_MACS
    return SPINNING_BLAS_THREADS_MACS if own_copy else NEVER


#: :func:`openblas_threads_from` for this process. Codelets read it at run time
#: (:func:`popjit.kernels.matmul.blas_threads_from`): it holds for the products a program runs as one
#: call, whichever process compiled it.
BLAS_THREADS_FROM = openblas_threads_from(POOL_SPINS, _LIB is not _NUMPY_LIB)

#: Beside a spinning pool, from how many multiply-adds the products this process compiles run as one
#: call on OpenBLAS's threads instead of being split over the pool (:func:`~popjit.kernels.blas_split.blas_split`):
#: :data:`BLAS_THREADS_FROM` on a host that was quiet as popjit started (:func:`~popjit.kernels.jit.host_is_quiet`,
#: as for the spin count), else never; beside a sleeping pool, :data:`BLAS_THREADS_FROM` (where
#: :mod:`~popjit.kernels.blas_split` has its own rule). why not a key of the cached programs: a host's load changes from
#: one process to the next, and a program compiled either way runs well enough the other way (one
#: compiled quiet, loaded beside a busy process, runs them on OpenBLAS's threads: W2 10-30% slower).
PLANNED_THREADS_FROM = BLAS_THREADS_FROM if not POOL_SPINS or host_is_quiet() else NEVER

#: The symbol of :data:`BLAS_THREADS_FROM`'s value in memory, which codelets load at run time. why not a
#: constant: compiled codelets are kept on disk and shared by processes that decided differently.
THREADS_FROM_SYMBOL = "popjit_blas_threads_from"
_THREADS_FROM = ctypes.c_int64(BLAS_THREADS_FROM)


def blas_description() -> str:
    """The BLAS popjit's products call, as it runs in this process: OpenBLAS's build configuration, the
    kernels it chose for this CPU, its thread count, whether it is popjit's own copy (and NumPy's kernels
    then), and from how many multiply-adds a product runs on its threads."""
    if _LIB is None or not hasattr(_LIB, "scipy_openblas_get_corename64_"):
        return "unknown: NumPy is not built on its bundled OpenBLAS (scipy-openblas)"
    text = _describe(_LIB)
    threads = _LIB.scipy_openblas_get_num_threads64_()
    line = f"{text['config']}; {text['corename']} kernels; {threads} threads"
    if _LIB is not _NUMPY_LIB:
        line += f" (popjit's own copy; NumPy's runs {_describe(_NUMPY_LIB)['corename']} kernels)"
    planned = PLANNED_THREADS_FROM
    share = "never" if planned == NEVER else f"from 2^{planned.bit_length() - 1} multiply-adds"
    return f"{line}; products on its threads: {share}"


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
    llvm.add_symbol(THREADS_FROM_SYMBOL, ctypes.addressof(_THREADS_FROM))
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
    holds for other programs. The count is the library's, for the whole process (:data:`set_threads_local`):
    when popjit runs NumPy's own library (no private copy, :func:`_popjit_openblas`), NumPy's products on
    other threads run with it while the block runs."""
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
