"""The one Numba decorator every codelet uses.

Options that make Numba code vectorise (see DESIGN §4): ``error_model='numpy'`` (no Python
zero-division checks), fastmath flags that keep NaN/Inf semantics (never ``nnan``/``ninf``),
no bounds checks. ``POPJIT_DISABLE_NUMBA=1`` returns the plain Python function.

Every codelet is compiled with Numba's on-disk cache, kept in popjit's cache directory under a name
that hashes all of ``kernels/`` and the code generator (:func:`machine_code_dir`), so machine code
compiled once is loaded by later processes and never outlives an edit to the kernels it was built
from (Numba itself only watches the function's own file).

The cache never stops a program: an entry that cannot be read (truncated, empty, foreign, corrupt)
is reported once as a :class:`CacheWarning` naming its file, deleted and compiled again; a cache
directory popjit cannot write is reported once and everything compiles in memory. So is one that
other users can write to (:func:`untrusted_reason`): cache entries are pickled data and generated
modules are run, so popjit only reads them from directories that only this user can change, and
never unpickles a file another user owns.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import grp
import hashlib
import importlib
import logging
import os
import pickle
import pwd
import stat
import tempfile
import threading
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numba
from numba.core import caching
from numba.core import config as numba_config
from numba.np.ufunc import parallel

import popjit
from popjit import config
from popjit.flags import poplar_flags

from .threads import ContentionWatch, cores_to_spare, runnable_elsewhere, threads_to_use

# why: no ``arcp``. It lets LLVM turn ``x / y`` into ``x * (1 / y)`` (not correctly rounded:
# ``floordiv`` by a broadcast scalar came out off by one), ``1 / sqrt(x)`` into the rsqrt estimate
# (NaN at 0 and inf), and a float16 quotient into a half-precision reciprocal that overflows.
FASTMATH = frozenset({"contract", "afn", "reassoc"})
OPTIONS: dict[str, Any] = {"fastmath": set(FASTMATH), "error_model": "numpy", "boundscheck": False, "nogil": True,
                           "cache": True}


#: How long (``GOMP_SPINCOUNT``, in spins) an idle OpenMP worker spins before it sleeps, unless the
#: user's environment sets it (:func:`openmp_spins`). A spin took 17 ns on a 2-core Ice Lake VM, so
#: about 170 us and 17 us. why long: on that host a worker that slept between a training step's parallel
#: codelets took so long to wake that the Keras LSTM's epoch took 3.5-4.0 s with 1,000 spins against
#: 2.0-2.2 s with 10,000, the CNN's 1.28-1.86 s against 0.93-0.98 s. why short on a pinned pool: beside
#: one busy process it is the other way round (the LSTM 3.9-4.1 s against 8.1-8.9 s, the spinner holding
#: the core the other process needs); an unpinned pool is left alone there (:func:`threads_for_host`).
#: docs/pipeline.md has the tables.
OPENMP_SPINS_QUIET = 10_000
OPENMP_SPINS_SHARED = 1_000


def openmp_spins() -> int:
    """``GOMP_SPINCOUNT`` for popjit's pool: :data:`OPENMP_SPINS_QUIET`, unless ``POPJIT_NUM_THREADS``
    pins the pool's count and its threads do not each have a core that no other process's runnable thread
    needs as popjit starts (:func:`host_is_quiet`): then :data:`OPENMP_SPINS_SHARED`. Decided once, when
    the pool's layer is (libgomp reads it when it loads).

    why not by the load unless pinned: an unpinned pool is not used while other processes need the cores
    (:func:`threads_for_host` runs engines on one thread), so its spin only matters once they are free.
    Started beside a busy process that then left, W1 took 36-37 ms a call (median) with the long spin
    against 43-45 ms with the short, the Keras CNN 0.94-1.03 s an epoch against 1.10-1.24 s."""
    pinned = config.get("NUM_THREADS") is not None
    return OPENMP_SPINS_SHARED if pinned and not host_is_quiet() else OPENMP_SPINS_QUIET


@functools.lru_cache(maxsize=1)
def host_is_quiet() -> bool:
    """Whether popjit's threads each have a core that no other process's runnable thread needs, as popjit
    starts (:func:`~popjit.kernels.threads.runnable_elsewhere`, sampled for a few milliseconds). Decided
    once per process: it sets how long a pinned pool's idle workers spin (:func:`openmp_spins`) and whether
    large products are planned on OpenBLAS's threads beside them (:data:`popjit.kernels.blas.PLANNED_THREADS_FROM`)."""
    return cores_to_spare(threads_to_use(), runnable_elsewhere())


@functools.lru_cache(maxsize=1)
def threading_layer() -> str:
    """The Numba threading layer parallel codelets run on: ``NUMBA_THREADING_LAYER`` when set, else
    ``omp`` (GNU OpenMP) where Numba's OpenMP pool loads with popjit's settings (:func:`_openmp_loads`),
    else ``workqueue``. Decided once per process.

    why ``omp``: its idle workers spin for a while before they sleep, so a parallel codelet or a split
    product wakes them in about a microsecond, where workqueue's sleeping workers took about 60 us on a
    2-core VM, too long to split a recurrent layer's per-step products. OpenBLAS's own threads, which
    spin too and would fight them over the cores, are not used beside a spinning pool
    (:func:`pool_spins`, :mod:`popjit.kernels.blas_split`). Measured on a 2-core Zen 3 against
    workqueue, in one benchmark run each: Keras CNN 1.34 -> 1.02 s an epoch, LSTM 3.16 -> 2.31 s, MLP W2
    44 -> 51 steps/s (docs/pipeline.md). GNU OpenMP is not fork-safe: a child forked after the pool
    started runs its codelets inline (:func:`_inline_after_fork`). Machine code is built for one layer,
    so the layer is part of the cache's fingerprint (loading code compiled for another one crashes).
    """
    if parallel._is_initialized:  # something ran parallel code before popjit: that layer it is
        return parallel.threading_layer()
    chosen = os.environ.get("NUMBA_THREADING_LAYER")
    if chosen in (None, "", "omp") and "GOMP_SPINCOUNT" not in os.environ:
        os.environ["GOMP_SPINCOUNT"] = str(openmp_spins())  # why: read when libgomp loads
    if not chosen:
        chosen = "omp" if _openmp_loads() else "workqueue"
        numba_config.THREADING_LAYER = chosen
    elif chosen == "omp":
        _openmp_loads()  # why: so that libgomp loads without the user's settings for other programs
    if chosen == "omp":
        os.register_at_fork(after_in_child=_inline_after_fork)
    return chosen


#: The user's GNU OpenMP settings popjit's pool loads without: they are for other programs, and each
#: slowed the pool (W1 on a 2-core Ice Lake VM, 26-30 ms a call without them): ``OMP_DYNAMIC=true``
#: (libgomp may give a parallel region fewer threads) 48 ms; ``OMP_PROC_BIND=master``, ``OMP_PLACES={0}``
#: or ``GOMP_CPU_AFFINITY=0`` (every thread on one core) 207-211 ms; ``OMP_THREAD_LIMIT=1`` put the
#: element-wise chain on one core (150-167 ms a call against 77 ms).
OPENMP_SETTINGS_LEFT_OUT = ("OMP_DYNAMIC", "OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY", "OMP_THREAD_LIMIT")


def _openmp_loads() -> bool:
    """Whether Numba's OpenMP pool loads (it needs the GNU OpenMP runtime, ``libgomp``) with popjit's
    settings: libgomp, which reads them once as it loads, loads now without the user's
    :data:`OPENMP_SETTINGS_LEFT_OUT`; or another library loaded it before, with none of them in the way."""
    if _libgomp_loaded():
        return not _openmp_settings_in_the_way() and _import_omppool()
    with environment(**dict.fromkeys(OPENMP_SETTINGS_LEFT_OUT)):
        return _import_omppool()


def _import_omppool() -> bool:
    try:
        importlib.import_module("numba.np.ufunc.omppool")
    except (ImportError, OSError):
        return False
    return True


def _libgomp_loaded() -> bool:
    """Whether GNU OpenMP's runtime is loaded in this process already."""
    try:
        ctypes.CDLL("libgomp.so.1", mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
    except (OSError, AttributeError):  # why AttributeError: no RTLD_NOLOAD (not Linux or macOS)
        return False
    return True


def _openmp_settings_in_the_way() -> bool:
    """Whether the user's environment holds one of :data:`OPENMP_SETTINGS_LEFT_OUT` that would slow
    popjit's pool: any of them but ``OMP_THREAD_LIMIT``, which only does when it allows OpenMP fewer
    threads than popjit uses."""
    try:
        capped = int(os.environ.get("OMP_THREAD_LIMIT", "")) < threads_to_use()
    except ValueError:
        capped = False
    return capped or any(os.environ.get(name) for name in OPENMP_SETTINGS_LEFT_OUT if name != "OMP_THREAD_LIMIT")


@contextlib.contextmanager
def environment(**values: str | None) -> Iterator[None]:
    """The block runs with the environment variables ``values`` set (None: unset), restored after."""
    saved = {name: os.environ.pop(name, None) for name in values}
    os.environ.update({name: value for name, value in values.items() if value is not None})
    try:
        yield
    finally:
        for name, value in saved.items():
            os.environ.pop(name, None)
            if value is not None:
                os.environ[name] = value


def _inline_after_fork() -> None:
    """In a process forked from one whose OpenMP pool started: run parallel codelets inline (one
    thread). why: GNU OpenMP is not fork-safe, and Numba terminates a forked child that starts a
    parallel region of its parent's pool."""
    if parallel._is_initialized:
        numba.set_num_threads(1)


def pool_spins() -> bool:
    """Whether the workers of popjit's thread pool spin for a while when idle before they sleep: every
    threading layer but ``workqueue`` (OpenMP's and TBB's workers, and what Numba's ``default``,
    ``safe``, ``threadsafe`` and ``forksafe`` choose where one of them is installed). It decides how
    matmuls use the cores (:mod:`popjit.kernels.blas_split`)."""
    return threading_layer() != "workqueue"


def size_thread_pool() -> None:
    """Give Numba's thread pool :func:`~popjit.kernels.threads.threads_to_use` threads, unless
    ``NUMBA_NUM_THREADS`` is set or the pool already runs. why: Numba sizes it by the machine's
    cores, and starts it when it compiles (not only runs) the first parallel function, so this
    happens when popjit's kernels are imported."""
    if "NUMBA_NUM_THREADS" not in os.environ and not parallel._is_initialized:
        numba_config.NUMBA_NUM_THREADS = parallel.NUM_THREADS = threads_to_use()  # the pool launches with the latter


size_thread_pool()


def start_parallel_runtime() -> None:
    """Start Numba's parallel runtime (its thread pool on :func:`threading_layer`) if it is not running.

    why: a function's cached machine code starts the runtime on load only when its parallel callees
    were compiled in the same process as it (Numba issue 8578). An engine compiled over parallel
    codelets taken from the cache, then itself loaded from the cache by a later process, would call
    into a pool nobody started and crash. Engines are loaded after this has run.
    """
    if not parallel._is_initialized:
        threading_layer()
        parallel._launch_threads()


@contextlib.contextmanager
def single_threaded() -> Iterator[None]:
    """Run the engines the calling thread starts inside the block on that thread alone: Numba's
    (thread-local) thread count 1, so split codelets run inline and launch nothing on the pool, and
    every gemm serial (:func:`popjit.kernels.matmul._threads_for`). why: each replica of a replicated
    program runs on its own thread, and the workqueue layer aborts when two threads launch parallel
    work at once."""
    start_parallel_runtime()
    before = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        yield
    finally:
        numba.set_num_threads(before)


#: Whether other processes need the cores now (looked at again every half second, between engine runs).
CONTENTION = ContentionWatch()
_contended_before = False


@contextlib.contextmanager
def threads_for_host() -> Iterator[None]:
    """Run the engines the calling thread starts inside the block on one thread while other processes'
    runnable threads need the cores popjit's pool would run on (:data:`CONTENTION`), else on the pool as
    sized. The results are the same bits either way (:func:`single_threaded`). ``POPJIT_NUM_THREADS``
    pins the count: set, the pool is used whatever the load.

    why: the pool's idle workers spin before they sleep (:func:`openmp_spins`, chosen once at start).
    Beside a busy process that started after a quiet start, each spin holds the core the other process
    needs: W1's 100 steps took 140-181 ms a call (median) against 49-50 ms on one thread and 34 ms on two
    threads with the host quiet (2-core VM; TF-XLA beside the same process 76-91 ms)."""
    if (not parallel._is_initialized or config.get("NUM_THREADS") is not None
            or not _switch_to_one_thread(numba.get_num_threads())):
        yield
        return
    with single_threaded():
        yield


def _switch_to_one_thread(threads: int) -> bool:
    """Whether an engine that would run on ``threads`` threads should run on one instead (and log each change)."""
    global _contended_before
    if threads <= 1:
        return False
    contended = CONTENTION.contended(threads)
    if contended != _contended_before:
        _contended_before = contended
        logging.getLogger("popjit").info(
            f"{CONTENTION.others:g} runnable threads of other processes need the cores: engines run on one "
            "thread while they do" if contended else f"The cores are free again: engines run on {threads} threads")
    return contended


def cache_root() -> Path:
    """popjit's persistent cache: ``TF_POPLAR_FLAGS=--executable_cache_path=DIR`` if given (as in Graphcore's
    SDK, created if missing), else ``POPJIT_CACHE_DIR``. Its ``gen-<fingerprint>`` directory holds the
    machine code of the kernels and the generated codelet modules, and without the flag the compiled
    programs; with it each program is one file directly in ``DIR`` (:func:`executable_cache_dir`)."""
    return executable_cache_dir() or Path(config.get("CACHE_DIR")).expanduser()


def executable_cache_dir() -> Path | None:
    """``TF_POPLAR_FLAGS=--executable_cache_path=DIR``: the directory holding one ``<key>.poplar_exec``
    file per compiled program (created if missing, as in Graphcore's SDK), or None without the flag."""
    path = poplar_flags().executable_cache_path
    return Path(path).expanduser() if path else None


#: The sources whose text decides the machine code of codelets: this package and the code generator.
_CODEGEN_DIR = Path(popjit.__file__).parent / "codegen"


def fingerprint_sources() -> list[Path]:
    """The files :func:`fingerprint` hashes: the kernels and the whole code generator. why all of it:
    how a program library is built and stored (its parts, the passes, the file's layout) lives there
    too, and a library built another way must not be loaded."""
    return sorted(Path(__file__).parent.glob("*.py")) + sorted(_CODEGEN_DIR.glob("*.py"))


@functools.lru_cache(maxsize=1)
def fingerprint() -> str:
    """A hash of the kernel and code-generator sources, the Numba version and the threading layer."""
    h = hashlib.sha256(f"{numba.__version__} {threading_layer()}".encode())
    for path in fingerprint_sources():
        h.update(path.read_bytes())
    return h.hexdigest()[:12]


def generation_dir() -> Path:
    """The cache directory of this popjit and Numba version (``gen-<fingerprint>``): every kept file whose
    meaning depends on the code generator lives under it, and ``popjit cache clear`` removes it whole."""
    return cache_root() / f"gen-{fingerprint()}"


def machine_code_dir() -> Path:
    """Where Numba keeps compiled machine code for popjit's codelets (this popjit/Numba version)."""
    return generation_dir() / "numba"


class CacheWarning(UserWarning):
    """A cache entry popjit could not use (it is rebuilt), or a cache directory it cannot write."""


_warned: set[str] = set()
_warned_lock = threading.Lock()


def warn_once(key: str, message: str) -> None:
    """Issue ``message`` as a :class:`CacheWarning`, once per process for ``key``."""
    with _warned_lock:
        if key in _warned:
            return
        _warned.add(key)
    warnings.warn(message, CacheWarning, stacklevel=3)


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same directory and a rename, so a
    reader (another thread or process) sees the old file or the whole new one, never half of it."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def discard_entry(path: Path, error: Exception) -> None:
    """Delete the damaged cache file ``path`` (``error`` came reading it), with one warning; the
    program it held is compiled again."""
    with contextlib.suppress(OSError):
        path.unlink()
    warn_once(f"damaged:{path}", f"popjit's cache entry {path} could not be read ({type(error).__name__}: {error}); "
              "it was deleted and the program is compiled again.")


def keep_entry(path: Path, magic: str, key: str, *fields: Any) -> None:
    """Write the cache file ``path`` (:func:`atomic_write`): ``fields`` pickled after the tag ``magic``
    and the entry's ``key``, which :func:`read_entry` checks. A directory that cannot take it is warned
    about once and the program compiles again in the next process; fields that cannot be pickled
    raise (nothing is written)."""
    data = pickle.dumps((magic, key, *fields), protocol=pickle.HIGHEST_PROTOCOL)
    try:
        atomic_write(path, data)
    except OSError as e:
        warn_once(f"unwritable:{path.parent}", f"popjit could not save {path} ({e.strerror or e}); this program "
                  "compiles again in the next process.")


def read_entry(path: Path, magic: str, key: str) -> tuple | None:
    """The fields :func:`keep_entry` wrote to ``path`` for ``key``, or None: no such file, or a damaged
    or foreign one (then it is discarded, :func:`discard_entry`)."""
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            mine = st.st_uid == os.geteuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
            data = f.read() if mine else b""
    except FileNotFoundError:
        return None
    except OSError as e:
        return discard_entry(path, e)
    if not mine:  # why: unpickling runs code; only files no one else could have written are read
        warn_once(f"foreign:{path}", f"popjit does not read the cache entry {path}: it belongs to another user or "
                  f"others can write to it (uid {st.st_uid}, mode {stat.filemode(st.st_mode)}); the program is "
                  "compiled instead.")
        return None
    try:
        entry = pickle.loads(data)
        if not (isinstance(entry, tuple) and entry[:2] == (magic, key)):
            raise ValueError("it is not this entry's file")
    except Exception as e:  # why: pickle and format errors of every kind mean the file is damaged
        return discard_entry(path, e)
    return entry[2:]


def usable_dir(path: Path, root: Path | None = None) -> bool:
    """Whether popjit can create ``path`` (a directory under the cache directory ``root``, by default
    :func:`cache_root`) and write files in it, and may trust what it reads there; if not, one warning
    says that those programs compile in memory this run.

    Trusted: ``path`` and every directory between it and ``root`` belong to this user and no other
    user can write to them (:func:`untrusted_reason`), since cache entries are unpickled and
    generated modules run."""
    return _usable(str(path), str(root if root is not None else cache_root()))


@functools.lru_cache(maxsize=64)
def _usable(path: str, root: str) -> bool:
    chain = _chain(Path(path), Path(root))
    if not _trusted([d for d in chain if d.is_dir()], root):  # why first: create nothing in such a directory
        return False
    try:
        _make(chain)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as e:
        warn_once(f"unusable:{root}", f"popjit cannot write its cache directory {root} ({path}: {e.strerror or e}); "
                  "compiling in memory this run, so nothing is kept for the next one. Set POPJIT_CACHE_DIR (or "
                  "--executable_cache_path in TF_POPLAR_FLAGS) to a writable directory.")
        return False
    return _trusted(chain, root)


def _trusted(directories: list[Path], root: str) -> bool:
    """Whether every one of ``directories`` (under the cache directory ``root``) may be trusted; if not,
    one warning says why."""
    reason = next(filter(None, map(untrusted_reason, directories)), None)
    if reason is not None:
        warn_once(f"untrusted:{root}", f"popjit does not use the cache directory {root}: {reason}. Cache entries "
                  "are code and pickled data, so only a directory no other user can write to is used; compiling "
                  "in memory this run. Fix the directory's owner or mode (chmod go-w), or choose another one.")
    return reason is None


def _make(chain: list[Path]) -> None:
    """Create the directories of ``chain`` that are missing, writable by this user only (whatever the
    umask: popjit would not trust them otherwise), and the parents of the first as the umask says."""
    os.makedirs(chain[0].parent, exist_ok=True)
    for directory in chain:
        with contextlib.suppress(FileExistsError):
            os.mkdir(directory, 0o755)


def _chain(path: Path, root: Path) -> list[Path]:
    """``path`` and its parents down to ``root`` (only ``path`` when it is not under ``root``)."""
    try:
        parts = path.relative_to(root).parts
    except ValueError:
        return [path]
    return [root.joinpath(*parts[:i]) for i in range(len(parts) + 1)]


def untrusted_reason(directory: Path) -> str | None:
    """Why ``directory`` cannot be trusted with cache entries, or None: it must belong to this user, and
    neither others nor its group may write to it (a group-writable directory is accepted when its group
    is this user's own private group, as a umask of 002 makes them)."""
    st = os.stat(directory)
    mode = stat.filemode(st.st_mode)
    if st.st_uid != os.geteuid():
        return f"{directory} belongs to another user (uid {st.st_uid}, mode {mode})"
    if st.st_mode & stat.S_IWOTH:
        return f"every user can write to {directory} (mode {mode})"
    if st.st_mode & stat.S_IWGRP and not _private_group(st.st_gid):
        return f"the members of group {st.st_gid} can write to {directory} (mode {mode})"
    return None


def _private_group(gid: int) -> bool:
    """Whether ``gid`` is this user's primary group with no other members (a user private group)."""
    try:
        user = pwd.getpwuid(os.geteuid())
        return user.pw_gid == gid and grp.getgrgid(gid).gr_mem in ([], [user.pw_name])
    except KeyError:
        return False


class _PopjitCacheImpl(caching.CompileResultCacheImpl):
    """Numba's cache implementation, kept to popjit's directory (never a fallback location)."""

    # why: Numba renamed it (it was private before 0.57)
    _locator_classes = [getattr(caching, "UserProvidedCacheLocator", None) or caching._UserProvidedCacheLocator]


class _ForeignEntry(Exception):
    """A data file that holds another function's machine code."""


class _CheckedCacheFile(caching.IndexDataCacheFile):
    """Numba's index and data files, with each data file naming the entry it belongs to: a data file
    copied or left over from another function is refused instead of run."""

    def save(self, key: Any, data: Any) -> None:
        super().save(key, (self._index_name, key, data))

    def load(self, key: Any) -> Any:
        entry = super().load(key)
        if entry is None:
            return None
        if not (isinstance(entry, tuple) and len(entry) == 3 and entry[0] == self._index_name and entry[1] == key):
            raise _ForeignEntry("its data file belongs to another function")
        return entry[2]


class SafeFunctionCache(caching.FunctionCache):
    """Numba's per-function machine-code cache, made robust: a damaged entry is a cache miss (warned
    about once, its files deleted, the code compiled and saved again), never an exception."""

    _impl_class = _PopjitCacheImpl

    def __init__(self, py_func: Callable) -> None:
        super().__init__(py_func)
        self._cache_file = _CheckedCacheFile(cache_path=self._cache_path, filename_base=self._impl.filename_base,
                                             source_stamp=self._impl.locator.get_source_stamp())

    def load_overload(self, sig: Any, target_context: Any) -> Any:
        try:
            return super().load_overload(sig, target_context)
        except Exception as e:  # why: pickle and file errors of every kind mean the entry is damaged
            self._discard(e)
            return None

    def save_overload(self, sig: Any, data: Any) -> None:
        try:
            super().save_overload(sig, data)
        except OSError as e:  # why: a full disk or a directory that became read-only: keep the code in memory
            warn_once(f"unwritable:{self._cache_path}", f"popjit could not save machine code in {self._cache_path} "
                      f"({e.strerror or e}); this function compiles in memory from now on.")
            self.disable()
        except Exception as e:  # why: a damaged index (saving reads it first): start the entry again
            self._discard(e)
            with contextlib.suppress(Exception):
                super().save_overload(sig, data)

    def _discard(self, error: Exception) -> None:
        """Delete this function's index and data files after ``error`` reading or writing them."""
        index = Path(self._cache_file._index_path)
        stem = index.name[: -len(".nbi")]
        for path in [index, *index.parent.glob(f"{stem}.*.nbc")]:
            with contextlib.suppress(OSError):
                path.unlink()
        warn_once(f"damaged:{index}", f"popjit's cache entry {index} (or its data files) could not be read "
                  f"({type(error).__name__}: {error}); it was deleted and the code is compiled again.")


_cache_dir_lock = threading.Lock()  # why: Numba's locator reads a process-wide setting


def _attach_cache(dispatcher: Any) -> None:
    """Give ``dispatcher`` popjit's robust on-disk cache in :func:`machine_code_dir`, if it is usable."""
    directory = machine_code_dir()
    if not usable_dir(directory):
        return
    with _cache_dir_lock:
        saved = numba_config.CACHE_DIR
        numba_config.CACHE_DIR = str(directory)
        try:
            dispatcher._cache = SafeFunctionCache(dispatcher.py_func)
        except RuntimeError:  # why: Numba found no locator (a function without a source file): stay in memory
            pass
        finally:
            numba_config.CACHE_DIR = saved


def codelet(fn: Callable | None = None, **extra: Any) -> Any:
    """``@codelet``: compile ``fn`` with popjit's Numba options (or leave it Python when disabled)."""

    def wrap(f: Callable) -> Any:
        if config.get("DISABLE_NUMBA"):
            return f
        options = {**OPTIONS, **extra}
        cache = options.pop("cache")
        dispatcher = numba.njit(**options)(f)
        if cache:
            _attach_cache(dispatcher)
        return dispatcher

    return wrap(fn) if fn is not None else wrap


#: The symbols of kernel entry points (:func:`entry_called`) start with this. why here: the code library
#: looks for it in every part it loads, and importing the kernels to learn it added 20-40 ms to a cached
#: program's start.
ENTRY_PREFIX = "popjit.entry."


def entry_called(symbol: str) -> None:
    """Told, as code calling the kernel entry point ``symbol`` is lowered, to have it loaded before that
    code is (the JIT resolves the call as it loads the caller): by the code library, which keeps entry
    points in the kernel library (:mod:`popjit.codegen.library`)."""
    # why here, a layer up: a kernel's Python callers (the tests, POPJIT_MATMUL=auto's measurements) compile
    # it without an engine, and only the code library builds and keeps machine code per machine
    from popjit.codegen.library import load_entry

    load_entry(symbol)
