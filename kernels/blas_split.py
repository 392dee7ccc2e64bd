"""Mid-sized float32/float64 matmuls on the system BLAS, split over popjit's thread pool.

With ``NUMBA_THREADING_LAYER=workqueue``, a pool whose workers sleep when idle: a product of
:data:`~popjit.kernels.blas.SERIAL_GEMM_MACS` multiply-adds or more, below
:data:`~popjit.kernels.blas.BLAS_THREADS_MACS`, with at least :data:`SPLIT_MIN_ROWS` rows or a depth of at least
:data:`SPLIT_MIN_DEPTH`, does not run on OpenBLAS's own threads. why not:
they busy-wait, on each other inside a call and for ~0.1 s after it, so on a machine whose cores
are shared (with other processes, or with popjit's own workers on the next parallel codelet) a call
waits for a descheduled spinner (the numbers are at ``BLAS_THREADS_MACS``). Larger products keep
OpenBLAS's threads, which share packed panels and are faster there on a quiet host.

With a pool whose workers spin when idle (OpenMP's, popjit's default, or TBB's), every product of
:data:`SPLIT_SPINNING_MACS` or more is split, except, when popjit compiles on a quiet host, products of
:data:`~popjit.kernels.blas.SPINNING_BLAS_THREADS_MACS` or more: they run on the threads of popjit's own
copy of OpenBLAS, which sleep as soon as a product is done (:data:`~popjit.kernels.blas.PLANNED_THREADS_FROM`).

Instead the engine splits the product like any parallel codelet (:mod:`popjit.codegen.native`):
``C`` is cut into blocks of :data:`BLOCK` rows (when it has at least as many rows as columns) or
columns, and each task runs a serial BLAS call on a range of blocks. Every multiply-add is still
OpenBLAS's, but a call's sums round differently with its shape (its edge kernels take the last rows
and columns), so the engine cuts a split product as planned when it compiles, whatever threads the
pool has when it runs (``Invoke.planned``): a program gives the same bits on one thread as on all.
"""

from __future__ import annotations

from .blas import (
    BLAS_THREADS_MACS,
    HAVE_CBLAS,
    PLANNED_THREADS_FROM,
    POOL_SPINS,
    SERIAL_GEMM_MACS,
)
from .jit import codelet

#: Rows or columns of ``C`` per unit of a split product.
BLOCK = 16
#: A split product of at least :data:`FEW_CHUNKS_MACS` multiply-adds is cut into about this many chunks
#: per thread, not the engine's usual 4 (:data:`popjit.codegen.native.CHUNKS_PER_THREAD`). why: each chunk
#: is a BLAS call that packs its own copy of the operand it does not cut (all of B when cut by rows), so
#: fewer, larger calls pack less. On a 2-core Zen 3, 4 alternating runs: 256x784x256 took 1.05-1.12 ms
#: (best of 300 calls) against 1.10-1.29 ms with 4. Smaller products keep 4: with 2 for every product the
#: MLP W1 (6.4M each) ran 1546-2315 steps/s against 1972-2675, a late-waking thread leaving more to the other.
FEW_CHUNKS_PER_THREAD = 2
FEW_CHUNKS_MACS = 1 << 25

#: Only products of at least this many rows are split. why: on a quiet host OpenBLAS's threads run a
#: short product faster than separate calls on its slices (the MLP W1's 32-row products: 100 steps in
#: 40-42 ms with them, 67 ms split), while a tall one (a convolution's rows of output positions) splits
#: as well as they run it.
SPLIT_MIN_ROWS = 1024
#: ... or at least this deep: a convolution's filter gradient (a few hundred rows, summed over every output
#: position). The Keras CNN K1 on a 2-core Zen 3, three alternating rounds of 5 epochs: median epoch
#: 1.71-1.85 s split against 1.79-1.98 s on OpenBLAS's threads (the LSTM K2 and W1 unchanged).
SPLIT_MIN_DEPTH = 2048
#: With a pool whose workers spin when idle (:data:`~popjit.kernels.blas.POOL_SPINS`), every product of
#: at least this many multiply-adds is split over it, in tasks of at least as many, and none runs on
#: OpenBLAS's threads. why: waking a spinning worker costs about a microsecond, so even a recurrent
#: layer's per-step products (2M) gain from a second core (the Keras LSTM K2 on a 2-core Zen 3: 3.16 s
#: an epoch with workqueue and its rules, 2.31 s with OpenMP and this one). 2^19, not 2^20: the MLP W1's
#: three 1M products per step then run on both cores instead of one, and its 100 steps took 30.6-33.3 ms
#: (best calls of four runs) against 33.3-43.3 ms in five, on a 2-core Ice Lake VM; the Keras CNN's and
#: LSTM's epochs were the same within that host's noise, and so was W1 beside a busy process.
SPLIT_SPINNING_MACS = 1 << 19


def splits_by_rows(m: int, n: int) -> bool:
    """Whether a split product is cut along its rows (else its columns)."""
    return m >= n


def chunks_per_thread(batch: int, m: int, n: int, k: int) -> int | None:
    """How many chunks per thread a split product is cut into: :data:`FEW_CHUNKS_PER_THREAD` for a large
    one, None (the engine's usual number) for the rest."""
    return FEW_CHUNKS_PER_THREAD if batch * m * n * k >= FEW_CHUNKS_MACS else None


def blas_split(batch: int, m: int, n: int, k: int, spins: bool = POOL_SPINS,
               threads_from: int = PLANNED_THREADS_FROM) -> tuple[int, int] | None:
    """``(units, units per task)`` of a product the engine splits over its threads, or None for one
    that runs as one BLAS call. With a pool whose workers sleep when idle: products from
    ``SERIAL_GEMM_MACS`` to ``BLAS_THREADS_MACS``, tall or deep, are split; smaller ones run serially,
    larger ones and short shallow ones on OpenBLAS's threads. With one whose workers spin (``spins``,
    :data:`~popjit.kernels.blas.POOL_SPINS`): every product of ``SPLIT_SPINNING_MACS`` or more is split,
    smaller ones run serially, and those whose entries have ``threads_from`` or more
    (:data:`~popjit.kernels.blas.PLANNED_THREADS_FROM`) on OpenBLAS's threads. Each task gets at least that
    threshold's multiply-adds."""
    macs = batch * m * n * k
    if spins:
        least = SPLIT_SPINNING_MACS
        split = least <= macs and m * n * k < threads_from  # why m*n*k: matmul decides per entry
    else:
        least = SERIAL_GEMM_MACS
        split = SERIAL_GEMM_MACS <= macs < BLAS_THREADS_MACS and (m >= SPLIT_MIN_ROWS or k >= SPLIT_MIN_DEPTH)
    if not HAVE_CBLAS or not split:
        return None
    cut, other = (m, n) if splits_by_rows(m, n) else (n, m)
    units = batch * -(-cut // BLOCK)
    grain = max(1, -(-least // (BLOCK * other * k)))
    return units, grain


if HAVE_CBLAS:
    from .matmul import blas_gemm  # why: defined only where a CBLAS is bound

    @codelet
    def matmul_split(out, a, b, batch, m, n, k, ta, tb, a_bs, b_bs, alpha, beta, lo, hi):
        """Units ``[lo, hi)`` of a product split by :func:`blas_split` (the arguments of
        :func:`popjit.kernels.matmul.matmul_f32`, then the range), a BLAS call per batch entry. Serial
        calls: the engine runs with OpenBLAS's thread count at 1, and this leaves it alone. why: the
        count is the process's (:data:`~popjit.kernels.blas.set_threads_local`); each piece setting it
        to 1 and back, on every thread at once, left some pieces on OpenBLAS's threads (their spinners
        then held a core of popjit's), and the count at 1 or not after the split, as the race went."""
        lda = m if ta else k
        ldb = k if tb else n
        by_rows = m >= n
        cut = m if by_rows else n
        per = (cut + BLOCK - 1) // BLOCK
        for i in range(lo // per, (hi - 1) // per + 1 if hi > lo else 0):
            first = max(lo - i * per, 0) * BLOCK
            last = min(min(hi - i * per, per) * BLOCK, cut)
            if by_rows:
                a_at = i * a_bs + (first if ta else first * k)
                blas_gemm(out, a, b, a_at, i * b_bs, i * m * n + first * n, last - first, n, k, ta, tb, lda, ldb, n,
                      alpha, beta)
            else:
                b_at = i * b_bs + (first * k if tb else first)
                blas_gemm(out, a, b, i * a_bs, b_at, i * m * n + first, m, last - first, k, ta, tb, lda, ldb, n,
                      alpha, beta)
        return 0
