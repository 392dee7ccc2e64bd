"""Which matmuls run on popjit's own gemm (:mod:`popjit.kernels.gemm`) and which on the system BLAS.

``POPJIT_MATMUL=blas`` (the default) always uses the system BLAS and ``popjit`` always the own gemm;
``POPJIT_MATMUL=auto`` measures: the first time a product of a given shape is compiled
on a machine, both ways run it on this process's threads (popjit's gemm split into as many ranges
as the engine would split it, BLAS as ``matmul_f32`` calls it) and the faster one is kept, in
``gemm-choice-<cpu>-<threads>.json`` in the cache generation directory, for every later compile
on this machine (products below :data:`MEASURED_MACS` multiply-adds are not measured: BLAS). The
own kernel must be at least :data:`MARGIN` faster to be chosen: on a tie the
system BLAS stays (never slower than before). Products too large to time quickly are measured at
a capped size. Measurement is not the default because it is not reproducible: near the margin
a choice measured again (a new machine, an emptied cache) can differ, and the two kernels' sums
round differently, so a seeded run would change in its last bits.

Without a usable CBLAS (NumPy built against another BLAS) the own kernel is the only compiled one;
with ``POPJIT_DISABLE_NUMBA=1`` it cannot run (it is LLVM IR), and BLAS through NumPy is used.
"""

from __future__ import annotations

import functools
import json
import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import llvmlite.binding as llvm
import numpy as np

from popjit import config

from .blas import HAVE_CBLAS, SERIAL_GEMM_MACS
from .jit import atomic_write, generation_dir, usable_dir
from .threads import threads_to_use

#: How much faster (a ratio of times) the own kernel must be to be chosen.
MARGIN = 1.05
#: Products below this many multiply-adds stay on the system BLAS unmeasured: at that size a call's
#: fixed costs decide, and BLAS's serial path has fewer (measured on Zen 3: 0.7x for 32x10x256).
MEASURED_MACS = 1 << 18
#: Products above this many multiply-adds are timed with m, n and k capped at :data:`CAP`.
TIMED_MACS, CAP = 1 << 27, 512
_TRIALS = 3
#: How long NumPy's OpenBLAS keeps its worker spinning after a call (about 100 ms, measured as the
#: process's CPU time while it sleeps): each trial of the own kernel waits this long first. why: right
#: after the BLAS's trial the spinning worker held a core the own kernel's second thread needed, and
#: W2's products all measured slower on the own kernel, which ran them 10-30% faster on free cores.
BLAS_SPIN_S = 0.12

_lock = threading.Lock()


#: Rows of C in one of popjit's gemm micro-kernel blocks (its unit of work; see :mod:`.gemm`).
MR = 6


@functools.lru_cache(maxsize=1)
def vector_bits() -> int:
    """The width of the host's widest float vector registers in bits (512 AVX-512, 256 AVX, 128 else)."""
    llvm.initialize_native_target()
    features = llvm.get_host_cpu_features()
    if features.get("avx512f"):
        return 512
    if features.get("avx"):
        return 256
    return 128


def lanes(itemsize: int) -> int:
    """Elements of ``itemsize`` bytes in one vector register."""
    return vector_bits() // (8 * itemsize)


@functools.lru_cache(maxsize=1)
def panel_vectors() -> int:
    """Vectors per row of a micro-kernel block: four with AVX-512's 32 registers (24 accumulators),
    two with AVX2's or NEON's (12 accumulators, beside the loads of B and a broadcast of A). why four:
    a rank-1 update then loads four vectors of ``B`` and six of ``A`` for 24 fused multiply-adds, not
    two and six for twelve (1024^3 on one Ice Lake core: 102 -> 128 GFLOP/s; OpenBLAS 119)."""
    return 4 if vector_bits() == 512 else 2


def panel_width(itemsize: int) -> int:
    """``NR``: columns of C in a micro-kernel block (:func:`panel_vectors` vectors)."""
    return panel_vectors() * lanes(itemsize)


def panels(batch: int, m: int) -> int:
    """How many ``MR``-row panels a product of ``batch`` ``m``-row matrices is split into."""
    return batch * -(-m // MR)


def grain(n: int, k: int) -> int:
    """Row panels per task when the engine splits a product with ``n`` columns and depth ``k``:
    at least :data:`~popjit.kernels.blas.SERIAL_GEMM_MACS` multiply-adds each."""
    return _panels_per_task(MR * n * k)


def _panels_per_task(panel_macs: int) -> int:
    """Panels of ``panel_macs`` multiply-adds each per task: at least ``SERIAL_GEMM_MACS`` in all."""
    return max(1, -(-SERIAL_GEMM_MACS // panel_macs))


def own_split(itemsize: int, batch: int, m: int, n: int, k: int) -> tuple[str, int, int]:
    """How the engine splits a product on the own gemm over its threads: the codelet (``gemm`` over
    ``MR``-row panels, ``gemm_columns`` over ``NR``-column panels), its units and the units per task.
    Each task packs the whole of the operand it does not cut, so the cut goes across the longer side
    of ``C``. why: cut by rows, W2's ``[256, 784] @ [784, 1024]`` packed all of ``B`` in every one of
    its eight chunks, and its step took twice as long as on the system BLAS."""
    if m >= n:
        return "gemm", panels(batch, m), grain(n, k)
    width = panel_width(itemsize)
    return "gemm_columns", batch * -(-n // width), _panels_per_task(width * m * k)


def uses_own_gemm(dtype: np.dtype, batch: int, m: int, n: int, k: int, ta: bool, tb: bool) -> bool:
    """Whether the product runs on popjit's gemm (see the module docstring)."""
    if config.get("DISABLE_NUMBA") or np.dtype(dtype) not in (np.float32, np.float64):
        return False
    if not HAVE_CBLAS:
        return True
    setting = config.get("MATMUL")
    if setting != "auto":
        return setting == "popjit"
    if batch * m * n * k < MEASURED_MACS:
        return False
    key = _key(np.dtype(dtype), batch, m, n, k, ta, tb)
    with _lock:
        table = _table()
        if key not in table:
            table[key] = _measure(np.dtype(dtype), *_timed_shape(batch, m, n, k), ta, tb)
            _save(table)
        return table[key]


def _key(dtype: np.dtype, batch: int, m: int, n: int, k: int, ta: bool, tb: bool) -> str:
    return f"{dtype.name} {batch}x{m}x{n}x{k} {'T' if ta else 'N'}{'T' if tb else 'N'}"


def _timed_shape(batch: int, m: int, n: int, k: int) -> tuple[int, int, int, int]:
    if batch * m * n * k <= TIMED_MACS:
        return batch, m, n, k
    m, n, k = min(m, CAP), min(n, CAP), min(k, CAP)
    return max(1, min(batch, TIMED_MACS // (m * n * k))), m, n, k


def choice_path() -> Path | None:
    """The file of this machine's measured choices (None without a usable cache directory)."""
    directory = generation_dir()
    if not usable_dir(directory):
        return None
    return directory / f"gemm-choice-{llvm.get_host_cpu_name()}-{threads_to_use()}.json"


@functools.lru_cache(maxsize=8)
def _loaded(path: Path | None) -> dict[str, bool]:
    if path is None:
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in data.items() if isinstance(v, bool)} if isinstance(data, dict) else {}


def _table() -> dict[str, bool]:
    return _loaded(choice_path())


def _save(table: dict[str, bool]) -> None:
    path = choice_path()
    if path is not None:
        try:
            on_disk = json.loads(path.read_text()) if path.exists() else {}
        except (OSError, ValueError):
            on_disk = {}
        merged = {**(on_disk if isinstance(on_disk, dict) else {}), **table}  # why: other processes add theirs
        atomic_write(path, json.dumps(merged, indent=0, sort_keys=True).encode())


@functools.lru_cache(maxsize=1)
def _pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max(1, threads_to_use() - 1), thread_name_prefix="popjit-gemm-choice")


def _measure(dtype: np.dtype, batch: int, m: int, n: int, k: int, ta: bool, tb: bool) -> bool:
    """Time both ways on random operands, best of a few interleaved trials; True if the own one wins."""
    # why: the kernels (and Numba behind them) load only when a product is measured; the engine
    # imports this module to decide, and a decision by setting or from the table needs neither
    from . import gemm, matmul

    rng = np.random.default_rng(0)
    a = rng.standard_normal(batch * m * k).astype(dtype)
    b = rng.standard_normal(batch * k * n).astype(dtype)
    out = np.zeros(batch * m * n, dtype)
    blas = matmul.matmul_f32 if dtype == np.float32 else matmul.matmul_f64
    args = (out, a, b, batch, m, n, k, ta, tb, m * k, k * n, 1.0, 0.0)
    name, units, per_task = own_split(dtype.itemsize, batch, m, n, k)
    kernel = getattr(gemm, name)
    tasks = max(1, min(threads_to_use(), -(-units // per_task)))
    cuts = [units * t // tasks for t in range(tasks + 1)]

    def own() -> None:
        rest = [_pool().submit(kernel, *args, cuts[t], cuts[t + 1]) for t in range(1, tasks)]
        kernel(*args, cuts[0], cuts[1])
        for task in rest:
            task.result()

    def system() -> None:
        blas(*args)

    own(), system()  # compiled (or loaded) and warm
    reps = max(1, math.ceil(5e7 / (batch * m * n * k)))  # a millisecond or more a trial
    best = {own: math.inf, system: math.inf}
    for _ in range(_TRIALS):
        for way in best:
            if way is own:
                time.sleep(BLAS_SPIN_S)
            start = time.perf_counter()
            for _ in range(reps):
                way()
            best[way] = min(best[way], time.perf_counter() - start)
    return best[system] >= MARGIN * best[own]
