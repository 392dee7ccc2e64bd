"""Matmul codelets: batched ``out[b] = op(a[b]) @ op(b[b])`` on flat row-major buffers.

On the virtual IPU a matmul is many partial-product vertices (the schedule accounts for them);
they form one regular block, so the engine runs them as one call: BLAS for float32/float64
(the same OpenBLAS NumPy uses), a plain triple loop for integers, float32 BLAS with widening
for float16 (``matmul_f16_rounded`` rounds its results as ``IPUConfig.floating_point_behaviour``
asks: NaN on overflow, stochastically).
"""

from __future__ import annotations

import numpy as np

from .bits import f16_to_f32, f32_to_f16
from .blas import (
    HAVE_CBLAS,
    NO_TRANS,
    ROW_MAJOR,
    THREADS_FROM_SYMBOL,
    TRANS,
    cblas_dgemm,
    cblas_sgemm,
    set_threads_local,
)
from .jit import codelet, start_parallel_runtime
from .rounding import f32_to_f16_nanoo, f32_to_f16_sr, f32_to_f16_sr_nanoo, sr_base, sr_bits

if HAVE_CBLAS:
    from llvmlite import ir
    from numba import types
    from numba.core import cgutils
    from numba.extending import intrinsic

    # why at import: the codelets below call Numba's parallel runtime by symbol (pool_threads). Typing them
    # would start it, but machine code loaded from Numba's cache is not typed, and a caller from Python (the
    # gemm choice's measurement, a test) reached a runtime nobody had started: a segmentation fault
    start_parallel_runtime()

    @intrinsic
    def pool_threads(typingctx):
        """The calling thread's count of popjit's pool threads (Numba's ``get_num_threads``), called by the
        runtime's symbol name. why not ``numba.get_num_threads()``: its nopython form calls the runtime
        through a ctypes pointer whose address is compiled in as a constant, so machine code kept in
        popjit's cache called a stale address in the next process (a segmentation fault), and Numba
        refused to cache the codelets that use it. The runtime is started as this module is imported."""

        def codegen(context, builder, signature, args):
            function = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.IntType(32), []),
                                                      "get_num_threads")
            return builder.call(function, [])

        return types.int32(), codegen

    @intrinsic
    def blas_threads_from(typingctx):
        """:data:`~popjit.kernels.blas.BLAS_THREADS_FROM` of the running process, loaded from its symbol
        (:data:`~popjit.kernels.blas.THREADS_FROM_SYMBOL`): codelets kept on disk serve processes that
        decided it differently."""

        def codegen(context, builder, signature, args):
            value = builder.module.globals.get(THREADS_FROM_SYMBOL)
            if value is None:
                value = ir.GlobalVariable(builder.module, ir.IntType(64), THREADS_FROM_SYMBOL)
                value.linkage = "external"
            return builder.load(value)

        return types.int64(), codegen

    @codelet
    def _threads_for(m, n, k):
        """Put a gemm of ``m*n*k`` multiply-adds on OpenBLAS's own threads if it belongs there: from
        :data:`~popjit.kernels.blas.BLAS_THREADS_FROM` (:func:`blas_threads_from`). Returns the count to
        restore after it (0: nothing changed).

        An engine runs with OpenBLAS's count at 1 (:func:`popjit.codegen.compile.Engine.__call__`), so
        every other gemm is serial, as the pieces of a split product on popjit's threads must be. The
        count is the process's (:data:`~popjit.kernels.blas.set_threads_local`), so only the engine's
        own thread changes it, here, while no split product runs."""
        if m * n * k < blas_threads_from():
            return 0
        return set_threads_local(pool_threads())

    @codelet
    def _restore_threads(previous):
        if previous > 0:
            set_threads_local(previous)

    @codelet(inline="always")
    def blas_gemm(out, a, b, a_at, b_at, c_at, m, n, k, ta, tb, lda, ldb, ldc, alpha, beta):
        """One BLAS gemm (``sgemm`` or ``dgemm`` by ``out``'s type) on element offsets of the flat operands."""
        if out.itemsize == 4:
            cblas_sgemm(ROW_MAJOR, TRANS if ta else NO_TRANS, TRANS if tb else NO_TRANS, m, n, k, np.float32(alpha),
                        a[a_at:].ctypes.data, lda, b[b_at:].ctypes.data, ldb, np.float32(beta),
                        out[c_at:].ctypes.data, ldc)
        else:
            cblas_dgemm(ROW_MAJOR, TRANS if ta else NO_TRANS, TRANS if tb else NO_TRANS, m, n, k, alpha,
                        a[a_at:].ctypes.data, lda, b[b_at:].ctypes.data, ldb, beta, out[c_at:].ctypes.data, ldc)

    @codelet(inline="always")
    def _blas_batch(out, a, b, batch, m, n, k, ta, tb, a_bs, b_bs, alpha, beta):
        """Each batch entry's product as one BLAS call (on OpenBLAS's threads or not, see :func:`_threads_for`)."""
        lda = m if ta else k
        ldb = k if tb else n
        previous = _threads_for(m, n, k)
        for i in range(batch):
            blas_gemm(out, a, b, i * a_bs, i * b_bs, i * m * n, m, n, k, ta, tb, lda, ldb, n, alpha, beta)
        _restore_threads(previous)
        return 0

    @codelet
    def matmul_f32(out, a, b, batch, m, n, k, ta, tb, a_bs, b_bs, alpha, beta):
        """Batched float32 ``out[i] = alpha * op(a[i]) @ op(b[i]) + beta * out[i]`` on the system BLAS."""
        return _blas_batch(out, a, b, batch, m, n, k, ta, tb, a_bs, b_bs, alpha, beta)

    @codelet
    def matmul_f64(out, a, b, batch, m, n, k, ta, tb, a_bs, b_bs, alpha, beta):
        """:func:`matmul_f32` in float64."""
        return _blas_batch(out, a, b, batch, m, n, k, ta, tb, a_bs, b_bs, alpha, beta)

else:

    @codelet
    def _mm_dot(out, a, b, batch, m, n, k, ta, tb, a_bs, b_bs, alpha, beta):
        for i in range(batch):
            am = a[i * a_bs:i * a_bs + m * k]
            bm = b[i * b_bs:i * b_bs + k * n]
            A = np.ascontiguousarray(am.reshape((k, m)).T) if ta else am.reshape((m, k))
            B = np.ascontiguousarray(bm.reshape((n, k)).T) if tb else bm.reshape((k, n))
            rows = out[i * m * n:(i + 1) * m * n]
            rows[:] = alpha * np.dot(A, B).reshape(m * n) + beta * rows
        return 0

    matmul_f32 = matmul_f64 = _mm_dot


@codelet
def matmul_int(out, a, b, batch, m, n, k, ta, tb, a_bs, b_bs, alpha, beta):
    # alpha/beta: always 1 and 0 here (updates are folded into float matmuls only)
    for bi in range(batch):
        ao, bo, oo = bi * a_bs, bi * b_bs, bi * m * n
        for i in range(m):
            for j in range(n):
                acc = 0
                for p in range(k):
                    x = a[ao + (p * m + i if ta else i * k + p)]
                    y = b[bo + (j * k + p if tb else p * n + j)]
                    acc += x * y
                out[oo + i * n + j] = acc
    return 0


@codelet
def _matmul_f16_wide(a, b, size, batch, m, n, k, ta, tb, a_bs, b_bs):
    """The float32 products of float16 operands (as the AMP accumulates them), ``size`` values."""
    aw = np.empty(a.size, np.float32)
    bw = np.empty(b.size, np.float32)
    ow = np.empty(size, np.float32)
    for i in range(a.size):
        aw[i] = f16_to_f32(a[i])
    for i in range(b.size):
        bw[i] = f16_to_f32(b[i])
    matmul_f32(ow, aw, bw, batch, m, n, k, ta, tb, a_bs, b_bs, np.float32(1.0), np.float32(0.0))
    return ow


@codelet
def matmul_f16(out, a, b, batch, m, n, k, ta, tb, a_bs, b_bs, alpha, beta):
    # alpha/beta: always 1 and 0 here (updates are folded into float32/float64 matmuls only)
    ow = _matmul_f16_wide(a, b, out.size, batch, m, n, k, ta, tb, a_bs, b_bs)
    for i in range(out.size):
        out[i] = f32_to_f16(ow[i])
    return 0


@codelet
def matmul_f16_rounded(out, a, b, batch, m, n, k, ta, tb, a_bs, b_bs, alpha, beta, nanoo, sr, k0, k1, call):
    """:func:`matmul_f16` with results rounded to float16 with NaN on overflow (``nanoo``) and/or
    stochastically (``sr``, with the rounding key ``k0, k1`` and call number ``call``)."""
    ow = _matmul_f16_wide(a, b, out.size, batch, m, n, k, ta, tb, a_bs, b_bs)
    base = sr_base(k0, k1, call, 0)
    for i in range(out.size):
        if sr:
            bits = sr_bits(base, i)
            out[i] = f32_to_f16_sr_nanoo(ow[i], bits) if nanoo else f32_to_f16_sr(ow[i], bits)
        else:
            out[i] = f32_to_f16_nanoo(ow[i])
    return 0
