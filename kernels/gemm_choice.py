"""Which matmuls run on popjit's own gemm (:mod:`popjit.kernels.gemm`) and which on the system BLAS.

``POPJIT_MATMUL=rules`` (the default) follows :func:`own_gemm_wins`: the own gemm for the products
where it was measured faster, on the hosts where it was measured; ``blas`` always uses the system
BLAS and ``popjit`` always the own gemm; ``POPJIT_MATMUL=auto`` measures: the first time a product
of a given shape is compiled on a machine, both ways run it on this process's threads (popjit's
gemm split into as many ranges as the engine would split it, BLAS as ``matmul_f32`` calls it) and the
faster one is kept, in
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
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple

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
#: ``k`` is cut into equal slices of at most this (a slice x NR panel of B stays in L1): 288 as one
#: slice, not 256 + a short 32 that reads and writes C again for little work (a convolution's 3x3x32
#: product on two threads: 65 -> 79 GFLOP/s).
KC_MAX = 384


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


#: A task of a product's packing (:func:`own_split`) packs at least this many elements.
PACKED_PER_TASK = 1 << 16


class OwnSplit(NamedTuple):
    """How the engine runs a product on the own gemm: ``codelet`` over ``units`` panels, at least
    ``per_task`` a task, after ``packs`` has packed the operand every task reads, over its ``pack_units``
    panels (``pack_per_task`` a task), into ``space`` elements of the engine's scratch."""

    codelet: str
    units: int
    per_task: int
    packs: str
    pack_units: int
    pack_per_task: int
    space: int


#: Rows, columns and depth a product needs, each, to run on the own gemm by :func:`own_gemm_wins`.
OWN_MIN_SIDE = 64
#: ... and it runs there only if its depth is at most this many times its longer side.
OWN_MAX_DEPTH_RATIO = 4


def own_gemm_wins(batch: int, m: int, n: int, k: int) -> bool:
    """Whether a product runs on the own gemm under ``POPJIT_MATMUL=rules``: on a host with AVX-512 (the
    4-vector kernel, :func:`panel_vectors`) when its rows, columns and depth are each at least
    :data:`OWN_MIN_SIDE`, and its depth at most :data:`OWN_MAX_DEPTH_RATIO` times its longer side or enough
    more to be cut across it (:func:`splits_depth`). Fixed rules, not measurement, so that a program's
    results do not depend on what a machine measured.

    why, measured on a 2-core Ice Lake (AVX-512) in an engine, each product's two programs interleaved,
    median GFLOP/s on the own gemm against OpenBLAS: W2's 256x1024x784, 256x1024x1024 (``B`` transposed
    too), 1024x1024x256 and 784x1024x256 (``A`` transposed) 159-190 against 130-141; 1024^3 248 against
    220; the Keras CNN's 3872x64x288 and 3872x288x64 (``B`` transposed) 117 and 134 against 96 and 106.
    Not: products 10 wide or deep (W2's last layer: 18-23 against 18-40), an MLP's 32-row batches (W1:
    37-40 ms a call against 32-34), and AVX2 hosts, where its 12-accumulator kernel ran at 0.83-0.95x
    OpenBLAS on a 2-core Zen 3. The filter gradient 288x64x3872 (deep and narrow) ran at 82 against 115
    cut by rows; cut across its depth, on a 2-core Emerald Rapids (AVX-512), the two kernels' calls
    alternated 300 times in one process, median (best) GFLOP/s: 108 (122) against OpenBLAS split by rows 96
    (107); 576x64x25088 94 (127) against 84 (127); 576x128x6272 114 (161) against 110 (167)."""
    return panel_vectors() == 4 and min(m, n, k) >= OWN_MIN_SIDE and (k <= OWN_MAX_DEPTH_RATIO * max(m, n)
                                                                      or splits_depth(m, n, k))


#: A deep product is cut into at most this many chunks of its depth (:func:`depth_chunks`): its partial
#: sums take this many times the space of ``C``.
DEPTH_CHUNKS_MAX = 16


def depth_slices(k: int) -> int:
    """How many slices :func:`~.gemm.gemm_block` cuts a depth ``k`` into (equal ones of at most ``KC_MAX``)."""
    step = -(-k // max(1, -(-k // KC_MAX)))
    return -(-k // step)


#: ... and into a multiple of this many. why: the chunks are the tasks, one a thread at a time; a 576x128x6272
#: filter gradient in three ran at 139-163 GFLOP/s on two threads (one of them doing two), OpenBLAS split by
#: rows at 151-197.
DEPTH_CHUNKS_STEP = 4


def depth_chunks(m: int, n: int, k: int) -> int:
    """Chunks of whole slices the depth of a product deeper than :data:`OWN_MAX_DEPTH_RATIO` times its
    longer side is cut into (1: it is not): each about that deep, as many as a multiple of
    :data:`DEPTH_CHUNKS_STEP` needs, at most :data:`DEPTH_CHUNKS_MAX`. Fixed by the shape, not by the
    threads, so that a program's sums are the same on any number of them."""
    if k <= OWN_MAX_DEPTH_RATIO * max(m, n):
        return 1
    deep = -(-k // (OWN_MAX_DEPTH_RATIO * max(m, n)))
    return min(depth_slices(k), DEPTH_CHUNKS_MAX, -(-deep // DEPTH_CHUNKS_STEP) * DEPTH_CHUNKS_STEP)


def splits_depth(m: int, n: int, k: int) -> bool:
    """Whether the own gemm runs the product over chunks of its depth (:class:`DepthSplit`)."""
    return depth_chunks(m, n, k) > 1


def own_split(itemsize: int, batch: int, m: int, n: int, k: int) -> OwnSplit | DepthSplit:
    """How the engine splits a product on the own gemm over its threads (:class:`OwnSplit`): across the
    longer side of ``C`` (``gemm`` over ``MR``-row panels, ``gemm_columns`` over ``NR``-column panels).
    why: each task packs what it cuts of one operand and reads all of the other; cut by rows, W2's
    ``[256, 784] @ [784, 1024]`` read all of ``B`` in every one of its eight chunks. That other operand
    is packed once, before the tasks, when there are several (``gemm_packed_b``, ``gemm_columns_packed_a``):
    each task packing it again cost 10-25% of one-task speed at eight tasks (W2's products on one
    Ice Lake core, 115-118 against 128-132 GFLOP/s at 1024 columns, 90-106 at 1024 in sixteen). A
    product of one task runs the same way, packing the same once: two drivers fewer for Numba to
    compile the first time a machine uses them (each takes it 3-9 s). A product deeper than
    :data:`OWN_MAX_DEPTH_RATIO` times its longer side is cut across its depth instead (:func:`depth_split`)."""
    if splits_depth(m, n, k):
        return depth_split(batch, m, n, k)
    if m >= n:
        return packed_b_split(itemsize, batch, m, n, k)
    width = panel_width(itemsize)
    return OwnSplit("gemm_columns_packed_a", batch * -(-n // width), _panels_per_task(width * m * k), "pack_a_panels",
                    panels(batch, m), _pack_grain(MR * k), panels(batch, m) * MR * k)


def packed_b_split(itemsize: int, batch: int, m: int, n: int, k: int, codelet: str = "gemm_packed_b") -> OwnSplit:
    """The product split across ``MR``-row panels of ``C``, ``B`` packed once first (``pack_b_panels``):
    :func:`own_split`'s plan for products at least as tall as wide, and every implicit product's
    (``codelet``: the product's own, :mod:`popjit.codegen.implicit`)."""
    width = panel_width(itemsize)
    column_panels = batch * -(-n // width)
    return OwnSplit(codelet, panels(batch, m), grain(n, k), "pack_b_panels", column_panels, _pack_grain(width * k),
                    column_panels * width * k)


def _pack_grain(panel_elements: int) -> int:
    return max(1, -(-PACKED_PER_TASK // panel_elements))


class DepthSplit(NamedTuple):
    """How the engine runs a deep product on the own gemm: ``gemm_depth`` over its ``units`` (``chunks``
    chunks of the depth of each product of the batch), one a task, each into partial sums of its own in
    ``space`` elements of the engine's scratch; then ``sum_depth`` adds them over the ``sum_units`` rows of
    ``C``, ``sum_per_task`` a task."""

    chunks: int
    units: int
    sum_units: int
    sum_per_task: int
    space: int


def depth_split(batch: int, m: int, n: int, k: int) -> DepthSplit:
    """The plan of a product cut across its depth (:func:`depth_chunks`). why: a deep, narrow product cut
    by rows, as :func:`packed_b_split` cuts it, packs a few rows of ``A`` at a time: a convolution's filter
    gradient (``patchesᵀ @ dy``, 288x64x3872 in the Keras CNN) gathered a few of each patch row's elements
    per panel, and ran on two threads at about the speed of one (2-core Emerald Rapids, in an engine:
    91-112 GFLOP/s against 74 on one thread; OpenBLAS split by rows 116-123). Each chunk reads its own rows
    of ``patches`` and ``dy`` whole instead."""
    chunks = depth_chunks(m, n, k)
    return DepthSplit(chunks, batch * chunks, batch * m, _pack_grain(n * chunks), batch * chunks * m * n)


def own_calls(plan: OwnSplit | DepthSplit, product: list[Any], space: Any,
              number: Callable[[int], Any] = lambda v: v) -> list[tuple[str, list[Any], tuple[int, int]]]:
    """The calls that run a product as ``plan`` says, in order: each codelet of :mod:`.gemm`, its
    arguments before its range of panels, and its (units, units per task). ``product``: the arguments
    of :func:`~.gemm.gemm` (``out, a, b, batch, m, n, k, ta, tb, a_bs, b_bs, alpha, beta``), values or
    the engine's text of them; ``space``: the scratch the packing (or a depth split's partial sums) writes;
    ``number``: how a count of the plan is given (the engine's text of it)."""
    out, a, b, batch, m, n, k, ta, tb, a_bs, b_bs, alpha, beta = product
    if isinstance(plan, DepthSplit):
        chunks = number(plan.chunks)
        return [("gemm_depth", [space, a, b, batch, m, n, k, ta, tb, a_bs, b_bs, alpha, chunks], (plan.units, 1)),
                depth_sum_call(plan, out, space, [batch, m, n, chunks], beta)]
    run = (plan.units, plan.per_task)
    if plan.packs == "pack_a_panels":
        return [packing_call(plan, space, a, batch, m, k, ta, a_bs),
                (plan.codelet, [out, space, b, batch, m, n, k, tb, b_bs, alpha, beta], run)]
    return [packing_call(plan, space, b, batch, n, k, tb, b_bs),
            (plan.codelet, [out, a, space, batch, m, n, k, ta, a_bs, alpha, beta], run)]


def depth_sum_call(plan: DepthSplit, out: Any, space: Any, sizes: list[Any],
                   beta: Any) -> tuple[str, list[Any], tuple[int, int]]:
    """The call adding a depth split's partial sums (in ``space``) into ``out``: ``sum_depth``, its arguments
    before its range of rows (``sizes``: the batch, ``m``, ``n`` and the chunks, values or the engine's text
    of them), and its (units, units per task)."""
    return "sum_depth", [out, space, *sizes, beta], (plan.sum_units, plan.sum_per_task)


def packing_call(plan: OwnSplit, space: Any, operand: Any, batch: Any, lines: Any, k: Any, transposed: Any,
                 batch_stride: Any) -> tuple[str, list[Any], tuple[int, int]]:
    """The call packing the operand every task of ``plan`` reads (``A``'s ``lines`` rows or ``B``'s columns,
    each ``k`` deep) into ``space``: ``plan.packs``, its arguments before its range of panels, and its
    (units, units per task)."""
    return plan.packs, [space, operand, batch, lines, k, transposed, batch_stride], (plan.pack_units,
                                                                                   plan.pack_per_task)


def uses_own_gemm(dtype: np.dtype, batch: int, m: int, n: int, k: int, ta: bool, tb: bool) -> bool:
    """Whether the product runs on popjit's gemm (see the module docstring)."""
    if config.get("DISABLE_NUMBA") or np.dtype(dtype) not in (np.float32, np.float64):
        return False
    if not HAVE_CBLAS:
        return True
    setting = config.get("MATMUL")
    if setting == "rules":
        return own_gemm_wins(batch, m, n, k)
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


def _split_over_threads(kernel: Any, arguments: list[Any], units: int, per_task: int) -> None:
    """``kernel(*arguments, lo, hi)`` over ``units`` in as many ranges as threads (at most one a ``per_task``)."""
    tasks = max(1, min(threads_to_use(), -(-units // per_task)))
    cuts = [units * t // tasks for t in range(tasks + 1)]
    rest = [_pool().submit(kernel, *arguments, cuts[t], cuts[t + 1]) for t in range(1, tasks)]
    kernel(*arguments, cuts[0], cuts[1])
    for task in rest:
        task.result()


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
    plan = own_split(dtype.itemsize, batch, m, n, k)
    calls = own_calls(plan, list(args), np.empty(plan.space, dtype))

    def own() -> None:
        for name, arguments, (units, per_task) in calls:
            _split_over_threads(getattr(gemm, name), arguments, units, per_task)

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
