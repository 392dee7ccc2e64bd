"""popjit's own matrix multiply: packed panels and a register-blocked micro-kernel in LLVM IR.

``C = alpha * A @ B + beta * C`` for float32/float64, as BLIS structures it:

- the micro-kernel keeps an ``MR x NR`` block of ``C`` in vector registers (``MR = 6`` rows, ``NR``
  :func:`panel_vectors` vectors of the host's width: 6x16 float32 with AVX2, 6x64 with AVX-512,
  6x8 with NEON) and adds one rank-1 update per step of ``k``: a vector load of ``B`` per vector,
  six broadcasts of ``A``, a fused multiply-add per accumulator. It is written with llvmlite
  (Numba's typed code cannot name vector registers) and reaches Numba code as an intrinsic;
- the driver (:func:`gemm_block`, Numba; compiled once per machine behind an entry point, which the
  functions below call, :func:`call_gemm_block`) cuts ``k`` into equal slices of at most ``KC_MAX`` and
  rows into ``MC`` blocks, packs ``A`` and ``B`` into contiguous micro-panels (zero-padded at the
  edges, 64-byte aligned) and leaves operands unpacked where packing would cost more than it saves
  (few rows: ``B`` is read in place; a narrow ``C``: ``A`` is). With ``B`` packed, each ``MR``-row
  micro-panel of ``A`` stays in L1 while the kernel streams ``NC`` columns of ``B``'s panels from L2;
- every operand is addressed by strides, so transposed operands need no copy;
- :func:`gemm` runs a range ``[lo, hi)`` of ``MR``-row panels of a batch of products (:func:`gemm_columns`
  of column panels), so the engine splits a large product over its thread pool like any parallel
  codelet (no BLAS threads); every task reads all of the other operand, which the engine packs once
  first, split too (:func:`pack_a_panels`, :func:`pack_b_panels`), for :func:`gemm_columns_packed_a`
  and :func:`gemm_packed_b` (:func:`~.gemm_choice.own_split`).

Whether a product runs here or in the system BLAS is measured once per machine
(:mod:`popjit.kernels.gemm_choice`).
"""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from popjit import config

from .gemm_choice import KC_MAX, MR, lanes, panel_vectors, panel_width
from .jit import ENTRY_PREFIX, codelet, entry_called

#: Rows per packed block of A (in L2).
MC = 96
#: With ``B`` packed, a micro-panel of ``A`` is multiplied by this many columns of ``B`` (a slice of at
#: most ``KC_MAX x NC``, 384 KB of float32, stays in L2) before the next.
NC = 256
#: Packing space is aligned to this many bytes (a cache line): a 64-byte vector load that straddles
#: two lines costs two (1024^3 on one Ice Lake core: 75 -> 91 GFLOP/s).
ALIGNMENT = 64
#: The k-loop of the micro-kernel is unrolled this many times.
UNROLL = 4

_I32, _I64 = ir.IntType(32), ir.IntType(64)


class _IR:
    """Helpers for writing vector IR of one element type into one module."""

    def __init__(self, module: ir.Module, element: ir.Type, width: int) -> None:
        self.module, self.element, self.width = module, element, width
        self.vector = ir.VectorType(element, width)
        self.pointer = element.as_pointer()

    def intrinsic(self, name: str, returns: ir.Type, arguments: list[ir.Type]) -> ir.Function:
        suffix = f"v{self.width}{'f32' if isinstance(self.element, ir.FloatType) else 'f64'}"
        full = f"{name}.{suffix}" + (".p0" if "masked" in name else "")
        existing = self.module.globals.get(full)
        return existing or ir.Function(self.module, ir.FunctionType(returns, arguments), full)

    @property
    def mask_type(self) -> ir.VectorType:
        return ir.VectorType(ir.IntType(1), self.width)

    def masked_load(self) -> ir.Function:
        """``llvm.masked.load`` of one vector (pointer, alignment, mask, value of the lanes left out)."""
        return self.intrinsic("llvm.masked.load", self.vector, [self.vector.as_pointer(), _I32, self.mask_type,
                                                                 self.vector])

    def masked_store(self) -> ir.Function:
        """``llvm.masked.store`` of one vector (value, pointer, alignment, mask)."""
        return self.intrinsic("llvm.masked.store", ir.VoidType(), [self.vector, self.vector.as_pointer(), _I32,
                                                                    self.mask_type])

    def splat(self, builder: ir.IRBuilder, value: ir.Value) -> ir.Value:
        vector_type = ir.VectorType(value.type, self.width)
        one = builder.insert_element(ir.Constant(vector_type, ir.Undefined), value, _I32(0))
        return builder.shuffle_vector(one, ir.Constant(vector_type, ir.Undefined),
                                      ir.Constant(ir.VectorType(_I32, self.width), [0] * self.width))

    def vector_at(self, builder: ir.IRBuilder, base: ir.Value, offset: int) -> ir.Value:
        return builder.bitcast(builder.gep(base, [_I64(offset)]), self.vector.as_pointer())


def _element(dtype: types.Type) -> ir.Type:
    return ir.FloatType() if dtype == types.float32 else ir.DoubleType()


def _micro_kernel(module: ir.Module, element: ir.Type, width: int, packed: bool, vectors: int) -> ir.Function:
    """``kernel(kc, a, rsa, csa, b, rsb, c, ldc, alpha, beta, mr, nr)``: the ``mr x nr`` block
    ``C[i, j] = alpha * sum_p A[i, p] B[p, j] + beta * C[i, j]`` (``beta == 0``: C is not read), with
    ``A[i, p] = a[i*rsa + p*csa]``, ``B[p, j] = b[p*rsb + j]`` (``nr <= vectors * width`` columns of
    a panel padded to whole vectors), ``C[i, j] = c[i*ldc + j]``. ``packed``: the strides are those of
    packed panels (``rsa = 1``, ``csa = MR``, ``rsb = NR``), constants the loop's addressing folds in."""
    g = _IR(module, element, width)
    name = f"popjit.gemm.kernel{'.packed' if packed else ''}.{MR}x{vectors * width}.{element}"
    if name in module.globals:
        return module.globals[name]
    ptr = g.pointer
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [_I64, ptr, _I64, _I64, ptr, _I64, ptr, _I64,
                                                             element, element, _I64, _I64]), name)
    fn.linkage = "internal"
    kc, a, rsa, csa, b, rsb, c, ldc, alpha, beta, mr, nr = fn.args
    if packed:
        rsa, csa, rsb = _I64(1), _I64(MR), _I64(vectors * width)
    fma = g.intrinsic("llvm.fma", g.vector, [g.vector] * 3)
    builder = ir.IRBuilder(fn.append_basic_block("entry"))
    zero = ir.Constant(g.vector, [0.0] * width)
    # why: rows past ``mr`` (an edge block) are computed but never stored; they read row 0 again,
    # since in an unpacked A they lie past the operand's end
    rows = [builder.gep(a, [builder.select(builder.icmp_signed(">", mr, _I64(r)), builder.mul(rsa, _I64(r)), _I64(0))])
            for r in range(MR)]

    def steps(count: ir.Value, unroll: int, sums: list[ir.Value], a_offset: ir.Value, b_at: ir.Value):
        """A loop of ``count`` iterations of ``unroll`` rank-1 updates each; the sums, A offset and B
        pointer after it."""
        head = builder.block
        body, after = fn.append_basic_block("steps"), fn.append_basic_block("after")
        builder.cbranch(builder.icmp_signed(">", count, _I64(0)), body, after)
        builder.position_at_end(body)
        i, offset, at = builder.phi(_I64), builder.phi(_I64), builder.phi(ptr)
        carried = [builder.phi(g.vector) for _ in sums]
        new, o, q = list(carried), offset, at
        for _ in range(unroll):
            panel = [builder.load(g.vector_at(builder, q, v * width), align=1) for v in range(vectors)]
            for r in range(MR):
                broadcast = g.splat(builder, builder.load(builder.gep(rows[r], [o])))
                for v in range(vectors):
                    new[r * vectors + v] = builder.call(fma, [broadcast, panel[v], new[r * vectors + v]])
            o, q = builder.add(o, csa), builder.gep(q, [rsb])
        i_next = builder.add(i, _I64(1))
        builder.cbranch(builder.icmp_signed("<", i_next, count), body, after)
        for phi, first, then in [(i, _I64(0), i_next), (offset, a_offset, o), (at, b_at, q),
                                 *zip(carried, sums, new)]:
            phi.add_incoming(first, head)
            phi.add_incoming(then, body)
        builder.position_at_end(after)
        out = []
        for first, then in [*zip(sums, new), (a_offset, o), (b_at, q)]:
            merged = builder.phi(first.type)
            merged.add_incoming(first, head)
            merged.add_incoming(then, body)
            out.append(merged)
        return out[:-2], out[-2], out[-1]

    sums, a_offset, b_at = steps(builder.sdiv(kc, _I64(UNROLL)), UNROLL, [zero] * (MR * vectors), _I64(0), b)
    sums, _, _ = steps(builder.srem(kc, _I64(UNROLL)), 1, sums, a_offset, b_at)
    _store_block(builder, g, fma, c, ldc, alpha, beta, mr, nr, sums)
    builder.ret_void()
    return fn


def _store_block(builder: ir.IRBuilder, g: _IR, fma: ir.Function, c: ir.Value, ldc: ir.Value, alpha: ir.Value,
                 beta: ir.Value, mr: ir.Value, nr: ir.Value, sums: list[ir.Value]) -> None:
    """``C = alpha * sums + beta * C`` for the block's ``mr x nr`` elements: whole vectors when the
    block is full, else masked loads and stores of the rows that exist."""
    width, vectors = g.width, len(sums) // MR
    masked_load, masked_store = g.masked_load(), g.masked_store()
    zero = ir.Constant(g.vector, [0.0] * width)
    lane = ir.Constant(ir.VectorType(_I64, width), list(range(width)))
    scale, keep = g.splat(builder, alpha), g.splat(builder, beta)

    def rows(masked: bool, reads_c: bool) -> None:
        for r in range(MR):
            guard = builder.if_then(builder.icmp_signed(">", mr, _I64(r))) if masked else None
            if guard is not None:
                guard.__enter__()
            row = builder.gep(c, [builder.mul(ldc, _I64(r))])
            for v in range(vectors):
                at = g.vector_at(builder, row, v * width)
                value = builder.fmul(scale, sums[r * vectors + v])
                if masked:
                    mask = builder.icmp_signed("<", lane, g.splat(builder, builder.sub(nr, _I64(v * width))))
                    if reads_c:
                        old = builder.call(masked_load, [at, _I32(1), mask, zero])
                        value = builder.call(fma, [keep, old, value])
                    builder.call(masked_store, [value, at, _I32(1), mask])
                else:
                    if reads_c:
                        value = builder.call(fma, [keep, builder.load(at, align=1), value])
                    builder.store(value, at, align=1)
            if guard is not None:
                guard.__exit__(None, None, None)

    full = builder.and_(builder.icmp_signed("==", mr, _I64(MR)), builder.icmp_signed("==", nr, _I64(vectors * width)))
    overwrite = builder.fcmp_ordered("==", beta, ir.Constant(beta.type, 0.0))
    with builder.if_else(full) as (whole, edge):
        for masked, branch in ((False, whole), (True, edge)):
            with branch, builder.if_else(overwrite) as (fresh, accumulate):
                with fresh:
                    rows(masked, False)
                with accumulate:
                    rows(masked, True)


def _pack_panel(module: ir.Module, element: ir.Type, width: int, count: int) -> ir.Function:
    """``pack(dst, src, stride, step, kc)``: ``dst[p*count + r] = src[r*stride + p*step]`` for
    ``r < count``, ``p < kc`` (a full panel). Vector copies when ``stride == 1`` (the last ``count % width``
    elements of a step by one masked load and store: a transposed ``A``'s 6-row panels, whose packing
    took 1024x256 in 194-228 us on one Ice Lake core element by element, 160-187 masked); for a panel of
    at least ``width`` lines each contiguous (``step == 1``: the columns of a transposed ``B``), vector
    loads of ``width`` elements of ``width`` lines at a time, transposed in registers
    (:func:`_transposed_block`), with a scalar loop for the last ``kc % width``; else element by
    element. why: ``256x1024x1024`` with ``B`` transposed ran at 95 GFLOP/s on one Ice Lake core
    packed element by element, 115 transposed. why not for ``A``'s 6-row panels: transposed, K1's
    convolution ``3872x64x288`` fell from 105 to 91 GFLOP/s."""
    g = _IR(module, element, width)
    name = f"popjit.gemm.pack{count}.{element}"
    if name in module.globals:
        return module.globals[name]
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [g.pointer, g.pointer, _I64, _I64, _I64]), name)
    fn.linkage = "internal"
    dst, src, stride, step, kc = fn.args
    builder = ir.IRBuilder(fn.append_basic_block("entry"))
    start = _I64(0)  # where the element-by-element loop begins
    if count >= width:
        blocked = builder.mul(builder.sdiv(kc, _I64(width)), _I64(width))
        lines_contiguous = builder.and_(builder.icmp_signed("==", step, _I64(1)),
                                        builder.icmp_signed("!=", stride, _I64(1)))
        with builder.if_then(lines_contiguous), _counted(builder, fn, _I64(0), blocked, _I64(width)) as p:
            for first in range(0, count, width):  # count is NR here, whole vectors
                lines = [builder.gep(src, [builder.add(builder.mul(stride, _I64(r)), p)])
                         for r in range(first, first + width)]
                rows = [builder.load(g.vector_at(builder, at, 0), align=1) for at in lines]
                for q, column in enumerate(_transposed_block(builder, rows)):
                    at = builder.gep(dst, [builder.add(builder.mul(builder.add(p, _I64(q)), _I64(count)),
                                                       _I64(first))])
                    builder.store(column, builder.bitcast(at, column.type.as_pointer()), align=1)
        start = builder.select(lines_contiguous, blocked, start)
    contiguous = builder.icmp_signed("==", stride, _I64(1))
    with _counted(builder, fn, start, kc, _I64(1)) as p:
        source = builder.gep(src, [builder.mul(p, step)])
        target = builder.gep(dst, [builder.mul(p, _I64(count))])
        with builder.if_else(contiguous) as (vectors, scalars):
            with vectors:
                for v in range(count // width):
                    builder.store(builder.load(g.vector_at(builder, source, v * width), align=1),
                                  g.vector_at(builder, target, v * width), align=1)
                _copy_masked(builder, g, source, target, count // width * width, count % width)
            with scalars:
                for r in range(count):
                    builder.store(builder.load(builder.gep(source, [builder.mul(stride, _I64(r))])),
                                  builder.gep(target, [_I64(r)]))
    builder.ret_void()
    return fn


def _copy_masked(builder: ir.IRBuilder, g: _IR, source: ir.Value, target: ir.Value, at: int, count: int) -> None:
    """Copy the ``count < width`` contiguous elements from ``at`` on by one masked vector load and store."""
    if count == 0:
        return
    mask = ir.Constant(g.mask_type, [int(lane < count) for lane in range(g.width)])
    values = builder.call(g.masked_load(), [g.vector_at(builder, source, at), _I32(1), mask,
                                            ir.Constant(g.vector, ir.Undefined)])
    builder.call(g.masked_store(), [values, g.vector_at(builder, target, at), _I32(1), mask])


def _transposed_block(builder: ir.IRBuilder, rows: list[ir.Value]) -> list[ir.Value]:
    """The columns of the square block whose rows are the ``width`` vectors ``rows`` (``width``, a vector's
    lanes, a power of two): column ``q``'s element ``r`` is ``rows[r][q]``. ``log2(width)`` rounds, each
    interleaving vector ``i`` with vector ``i + width/2``, their low halves into vector ``2i`` and their high
    halves into ``2i + 1``: ``width`` two-source shuffles a round (one ``vpermt2ps`` each on AVX-512). why:
    joining the rows into one long vector and picking each column out of it, LLVM made about 700 shuffles
    and moves of the 256 a 64-column panel needs; packing a transposed 1024x1024 ``B`` on one Ice Lake core
    took 546-636 us that way, 410-471 us this way (non-transposed: 404 us)."""
    width = len(rows)
    assert rows[0].type.count == width and width & (width - 1) == 0, "a square block, a power of two wide"
    half = width // 2
    lanes = ir.VectorType(_I32, width)
    low = ir.Constant(lanes, [j // 2 + (j % 2) * width for j in range(width)])
    high = ir.Constant(lanes, [half + j // 2 + (j % 2) * width for j in range(width)])
    for _ in range(width.bit_length() - 1):
        rows = [builder.shuffle_vector(rows[i // 2], rows[i // 2 + half], high if i % 2 else low) for i in range(width)]
    return rows


@contextlib.contextmanager
def _counted(builder: ir.IRBuilder, fn: ir.Function, start: ir.Value, stop: ir.Value, step: ir.Value):
    """``for i in range(start, stop, step)`` around the block's body (``i`` yielded); the builder is after
    the loop when the block ends."""
    head = builder.block
    body, done = fn.append_basic_block("body"), fn.append_basic_block("done")
    builder.cbranch(builder.icmp_signed("<", start, stop), body, done)
    builder.position_at_end(body)
    i = builder.phi(_I64)
    yield i
    i_next = builder.add(i, step)
    i.add_incoming(start, head)
    i.add_incoming(i_next, builder.block)
    builder.cbranch(builder.icmp_signed("<", i_next, stop), body, done)
    builder.position_at_end(done)


def _address(context, builder, array_type, array, offset):
    return builder.gep(context.make_array(array_type)(context, builder, array).data, [offset])


@intrinsic
def micro_kernel(typingctx, kc, a, a_at, rsa, csa, b, b_at, rsb, c, c_at, ldc, alpha, beta, mr, nr):
    """Numba's handle on :func:`_micro_kernel`; arrays with element offsets instead of pointers."""
    signature = types.void(kc, a, a_at, rsa, csa, b, b_at, rsb, c, c_at, ldc, alpha, beta, mr, nr)

    def codegen(context, builder, sig, args):
        kc_, a_, a_at_, rsa_, csa_, b_, b_at_, rsb_, c_, c_at_, ldc_, alpha_, beta_, mr_, nr_ = args
        dtype = sig.args[8].dtype
        width = lanes(dtype.bitwidth // 8)
        alpha_ = context.cast(builder, alpha_, sig.args[11], dtype)
        beta_ = context.cast(builder, beta_, sig.args[12], dtype)
        arguments = [kc_, _address(context, builder, sig.args[1], a_, a_at_), rsa_, csa_,
                     _address(context, builder, sig.args[5], b_, b_at_), rsb_,
                     _address(context, builder, sig.args[8], c_, c_at_), ldc_, alpha_, beta_, mr_, nr_]
        vectors = panel_vectors()
        packed = builder.and_(builder.and_(builder.icmp_signed("==", rsa_, _I64(1)),
                                           builder.icmp_signed("==", csa_, _I64(MR))),
                              builder.icmp_signed("==", rsb_, _I64(vectors * width)))
        with builder.if_else(builder.icmp_signed(">", nr_, _I64((vectors - 1) * width))) as (wide, narrow):
            with wide, builder.if_else(packed) as (both_packed, other):
                for variant, branch in ((True, both_packed), (False, other)):
                    with branch:
                        builder.call(_micro_kernel(builder.module, _element(dtype), width, variant, vectors), arguments)
            with narrow:  # why: a panel's last few columns (W1's 10 logits) on as many vectors as they fill
                for used in range(1, vectors):
                    fills = builder.and_(builder.icmp_signed(">", nr_, _I64((used - 1) * width)),
                                         builder.icmp_signed("<=", nr_, _I64(used * width)))
                    with builder.if_then(fills):
                        builder.call(_micro_kernel(builder.module, _element(dtype), width, False, used), arguments)
        return context.get_dummy_value()

    return signature, codegen


def _packer(rows: bool):
    @intrinsic
    def pack(typingctx, dst, dst_at, src, src_at, stride, step, kc):
        signature = types.void(dst, dst_at, src, src_at, stride, step, kc)

        def codegen(context, builder, sig, args):
            dst_, dst_at_, src_, src_at_, stride_, step_, kc_ = args
            dtype = sig.args[0].dtype
            width = lanes(dtype.bitwidth // 8)
            fn = _pack_panel(builder.module, _element(dtype), width, MR if rows else panel_vectors() * width)
            builder.call(fn, [_address(context, builder, sig.args[0], dst_, dst_at_),
                              _address(context, builder, sig.args[2], src_, src_at_), stride_, step_, kc_])
            return context.get_dummy_value()

        return signature, codegen

    return pack


#: NR of float32 and float64 on this host (constants of the compiled code).
NR32, NR64 = panel_width(4), panel_width(8)

#: Pack a full panel of MR rows of A / NR columns of B (see :func:`_pack_panel`).
pack_rows, pack_columns = _packer(True), _packer(False)


def _entry_types(dtype: types.Type, count: int, arrays: tuple[int, ...], floats: tuple[int, ...] = ()) -> tuple:
    """The types a kernel entry point of ``count`` parameters is compiled for: 1-D C-contiguous arrays of
    ``dtype`` at ``arrays``, float64 at ``floats``, int64 elsewhere."""
    array = types.Array(dtype, 1, "C")
    return tuple(array if i in arrays else types.float64 if i in floats else types.int64 for i in range(count))


def _entry_call(given: tuple, entry: Any, arrays: tuple[int, ...]) -> Any:
    """The typing and code of an intrinsic calling a kernel entry point (``entry(dtype)``: its symbol and
    types) with the arguments ``given``, declared in the caller, not linked into it (the code library loads
    the entry point before the code calling it, :func:`~.jit.entry_called`), in the engine's calling
    convention (arrays by pointer); None (no match) unless the arrays are 1-D of one dtype."""
    dtype = given[arrays[0]].dtype if isinstance(given[arrays[0]], types.Array) else None
    if any(not isinstance(given[i], types.Array) or given[i].ndim != 1 or given[i].dtype != dtype for i in arrays):
        return None
    symbol, expected = entry(dtype)

    def codegen(context, builder, sig, args):
        entry_called(symbol)
        passed, parameters = [], []
        for value, had, wanted in zip(args, sig.args, expected):
            if isinstance(wanted, types.Array):  # why by pointer: the engine's convention (popjit.codegen.abi)
                parameters.append(context.get_value_type(wanted).as_pointer())
                # why as it is: every 1-D array's structure is alike, whatever its layout
                passed.append(builder.bitcast(cgutils.alloca_once_value(builder, value), parameters[-1]))
            else:
                parameters.append(context.get_value_type(wanted))
                passed.append(context.cast(builder, value, had, wanted))
        function = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_I64, parameters), symbol)
        return builder.call(function, passed)

    return types.int64(*given), codegen


#: The symbol of :func:`_pack`'s entry point for an element type (``…float32``), through which
#: :func:`gemm_block` and the packing kernels call it (:func:`call_pack`).
PACK_ENTRY = f"{ENTRY_PREFIX}pack."
_PACK_ARRAYS = (0, 2)


def pack_entry(dtype: types.Type) -> tuple[str, tuple]:
    """The entry point of :func:`_pack` for elements of ``dtype``: its symbol and the types it is compiled for."""
    return f"{PACK_ENTRY}{dtype}", _entry_types(dtype, 9, _PACK_ARRAYS)


@intrinsic
def _call_pack_entry(typingctx, dst, dst_at, src, at, stride, step, lines, width, kc):
    """:func:`_pack` called through its entry point in the kernel library (:func:`_entry_call`)."""
    return _entry_call((dst, dst_at, src, at, stride, step, lines, width, kc), pack_entry, _PACK_ARRAYS)


@codelet(inline="always")
def _pack_edge(dst, at, src, src_at, stride, step, count, width, kc):
    """A panel with fewer than ``width`` lines (``count``): the lines there are, zeros after."""
    for p in range(kc):
        for r in range(width):
            dst[at + p * width + r] = src[src_at + r * stride + p * step] if r < count else 0


@codelet
def _pack(dst, dst_at, src, at, stride, step, lines, width, kc):
    """Pack ``lines`` lines (rows of A: ``width == MR``; columns of B: ``width == NR``), line ``r`` at
    ``src[at + r*stride]`` with its ``kc`` elements ``step`` apart, into panels of ``width`` lines from
    ``dst[dst_at]`` on. Returns 0 (it is the kernel library's entry point :data:`PACK_ENTRY`)."""
    for first in range(0, lines, width):
        count = min(width, lines - first)
        start = at + first * stride
        if count < width:
            _pack_edge(dst, dst_at + first * kc, src, start, stride, step, count, width, kc)
        elif width == MR:
            pack_rows(dst, dst_at + first * kc, src, start, stride, step, kc)
        else:
            pack_columns(dst, dst_at + first * kc, src, start, stride, step, kc)
    return 0


#: :func:`_pack` as the own gemm's kernels call it: through its entry point, compiled once per machine. why:
#: its packers are large; each kernel calling it typed it through its dispatcher, whose machine code the
#: kernel library never uses (1.1 s the first time a machine used the own gemm), and linked a copy of it
#: that LLVM optimised again. Its callers are not kept in Numba's cache (see :data:`call_gemm_block`).
call_pack = _pack if config.get("DISABLE_NUMBA") else _call_pack_entry


@codelet(inline="always")
def padded(lines, width):
    """``lines`` rounded up to whole panels of ``width``."""
    return (lines + width - 1) // width * width


@codelet(inline="always")
def aligned_space(count, like):
    """Uninitialised space for ``count`` elements of ``like``'s type, starting on an :data:`ALIGNMENT` boundary."""
    spare = ALIGNMENT // like.itemsize
    space = np.empty(count + spare, like.dtype)
    return space[(-space.ctypes.data) % ALIGNMENT // like.itemsize:]


@codelet(inline="always")
def slice_depth(k):
    """The depth of each of the equal slices ``k`` is cut into (at most :data:`KC_MAX`)."""
    slices = max(1, (k + KC_MAX - 1) // KC_MAX)
    return max(1, (k + slices - 1) // slices)


@codelet(inline="always")
def packs_b(m, csb):
    """Whether B is packed: when its columns are not contiguous, or when enough rows reuse it."""
    return csb != 1 or m >= 4 * MR


@codelet(inline="always")
def _row_block(c, c_at, ldc, a, a_at, a_panel, rsa, csa, b, b_at, rsb, csb, pack_b, pb, pb_at, mc, n, kc, alpha, beta):
    """``C = alpha * A @ B + beta * C`` for a block of ``mc`` rows and a slice of ``kc`` of the depth:
    ``A[i, p] = a[a_at + (i // MR)*a_panel + (i % MR)*rsa + p*csa]`` (packed: ``a_panel = MR*kc``; in
    place: ``MR*rsa``), ``B[p, j] = b[b_at + p*rsb + j*csb]`` (``pack_b``: packed in ``pb`` already)."""
    nr = NR32 if c.itemsize == 4 else NR64
    if pack_b:
        for n0 in range(0, n, NC):
            for r0 in range(0, mc, MR):
                for j0 in range(n0, min(n0 + NC, n), nr):
                    micro_kernel(kc, a, a_at + (r0 // MR) * a_panel, rsa, csa, pb, pb_at + j0 * kc, nr,
                                 c, c_at + r0 * ldc + j0, ldc, alpha, beta, min(MR, mc - r0), min(nr, n - j0))
    else:
        for j0 in range(0, n, nr):
            cols = min(nr, n - j0)
            if cols < nr:
                call_pack(pb, np.int64(0), b, b_at + j0 * csb, csb, rsb, cols, np.int64(nr), kc)
                panel, panel_at, panel_step = pb, 0, nr
            else:
                panel, panel_at, panel_step = b, b_at + j0, rsb
            for r0 in range(0, mc, MR):
                micro_kernel(kc, a, a_at + (r0 // MR) * a_panel, rsa, csa, panel, panel_at, panel_step,
                             c, c_at + r0 * ldc + j0, ldc, alpha, beta, min(MR, mc - r0), cols)


@codelet(cache=False)  # why: it calls _pack's entry point (call_pack)
def gemm_block(c, c_at, ldc, a, a_at, rsa, csa, b, b_at, rsb, csb, m, n, k, alpha, beta, pa, pb, pa_at, pb_at):
    """One thread's ``C = alpha * A @ B + beta * C`` of an ``m x n`` block, with ``A[i, p] =
    a[a_at + i*rsa + p*csa]``, ``B[p, j] = b[b_at + p*rsb + j*csb]``, ``C[i, j] = c[c_at + i*ldc + j]``;
    ``pa``/``pb``: packing space of ``MC*KC_MAX`` and ``KC_MAX*round_up(n, NR)`` elements, or, with
    ``pa_at``/``pb_at`` not negative, the whole operand packed already from there on (as
    :func:`pack_a_panels`/:func:`pack_b_panels` pack a matrix; ``A``'s ``m`` rows are then all its rows).
    Returns 0, as every function the engine calls does (it is the kernel library's entry point
    :data:`GEMM_BLOCK_ENTRY`)."""
    nr = NR32 if c.itemsize == 4 else NR64
    pack_a = pa_at >= 0 or 2 * n > nr  # why: A is read once per column panel; packed, its micro-panel stays in L1
    pack_b = pb_at >= 0 or packs_b(m, csb)
    step = slice_depth(k)
    for p0 in range(0, k, step):
        kc = min(step, k - p0)
        scale_c = beta if p0 == 0 else 1.0
        b_slice = pb_at + p0 * padded(n, nr)
        if pb_at < 0:
            b_slice = 0
            if pack_b:
                call_pack(pb, np.int64(0), b, b_at + p0 * rsb, csb, rsb, n, np.int64(nr), kc)
        for i0 in range(0, m, MC):
            mc = min(MC, m - i0)
            at = a_at + i0 * rsa + p0 * csa
            # why one call of _row_block, its operand chosen first: each call is inlined (3.4 s of Numba's
            # lowering with three)
            src, src_at, panel, rs, cs = pa, pa_at + p0 * padded(m, MR) + i0 * kc, MR * kc, np.int64(1), np.int64(MR)
            if pa_at < 0 and pack_a:
                call_pack(pa, np.int64(0), a, at, rsa, csa, mc, np.int64(MR), kc)
                src_at = np.int64(0)
            elif pa_at < 0:
                src, src_at, panel, rs, cs = a, at, MR * rsa, rsa, csa
            _row_block(c, c_at + i0 * ldc, ldc, src, src_at, panel, rs, cs, b, b_at + p0 * rsb, rsb, csb, pack_b, pb,
                       b_slice, mc, n, kc, alpha, scale_c)
    return 0


#: The symbol of :func:`gemm_block`'s entry point for an element type (``…float32``), through which the
#: drivers below and a computed product's codelet call it (:func:`call_gemm_block`).
GEMM_BLOCK_ENTRY = f"{ENTRY_PREFIX}gemm_block."
#: Where :func:`gemm_block`'s parameters are arrays (the others are int64, bar ``alpha`` and ``beta``).
_BLOCK_ARRAYS, _BLOCK_FLOATS = (0, 3, 7, 16, 17), (14, 15)


def gemm_block_entry(dtype: types.Type) -> tuple[str, tuple]:
    """The entry point of :func:`gemm_block` for elements of ``dtype``: its symbol and the types it is
    compiled for (1-D C-contiguous arrays, int64 and float64), as :func:`call_gemm_block` calls it."""
    return f"{GEMM_BLOCK_ENTRY}{dtype}", _entry_types(dtype, 20, _BLOCK_ARRAYS, _BLOCK_FLOATS)


@intrinsic
def _call_gemm_block_entry(typingctx, c, c_at, ldc, a, a_at, rsa, csa, b, b_at, rsb, csb, m, n, k, alpha, beta, pa,
                           pb, pa_at, pb_at):
    """:func:`gemm_block` called through its entry point in the kernel library (:func:`_entry_call`)."""
    given = (c, c_at, ldc, a, a_at, rsa, csa, b, b_at, rsb, csb, m, n, k, alpha, beta, pa, pb, pa_at, pb_at)
    return _entry_call(given, gemm_block_entry, _BLOCK_ARRAYS)


#: :func:`gemm_block` as the drivers and computed products call it: through its entry point, compiled once
#: per machine. why: each function that called it compiled a copy into its own machine code, 1.3 s of LLVM
#: time each (the two packed drivers, every convolution a machine first met) besides Numba's 2-4 s.
#: A function calling it is not kept in Numba's cache (``cache=False``; a call from Python compiles it once
#: per process, and the engine links it from the kernel library): Numba's cache would load its machine
#: code without loading the entry point first.
call_gemm_block = gemm_block if config.get("DISABLE_NUMBA") else _call_gemm_block_entry


def entry_kernel(symbol: str) -> tuple[Any, tuple]:
    """The kernel behind the entry point ``symbol`` (:data:`GEMM_BLOCK_ENTRY` or :data:`PACK_ENTRY` and an
    element type) and the types it is compiled for."""
    for prefix, kernel, entry in ((GEMM_BLOCK_ENTRY, gemm_block, gemm_block_entry), (PACK_ENTRY, _pack, pack_entry)):
        if symbol.startswith(prefix):
            return kernel, entry(getattr(types, symbol.removeprefix(prefix)))[1]
    raise KeyError(f"no kernel entry point {symbol!r}")


@codelet(inline="always")
def operand_strides(rows, cols, transposed):
    """(row stride, column stride) of a row-major ``rows x cols`` operand, stored transposed or not, as
    int64 values, never literals. why: Numba compiles :func:`gemm_block` anew for each literal it is
    called with (a packed driver's ``False`` transposes made its strides ``Literal[int](1)``), 3-4 s each
    time a machine first uses the own gemm."""
    return (np.int64(1), np.int64(rows)) if transposed else (np.int64(cols), np.int64(1))


@codelet(inline="always")
def panel_span(i, panels, lo, hi, width, extent):
    """The lines (rows or columns) ``[first, last)`` of matrix ``i`` among the ``width``-line panels
    ``[lo, hi)`` of a batch of ``panels`` panels per matrix, each ``extent`` lines long."""
    first = max(lo - i * panels, 0) * width
    return first, min(min(hi - i * panels, panels) * width, extent)


@codelet(inline="always")
def _row_panels(out, a, b, m, n, k, ta, tb, a_bs, b_bs, alpha, beta, lo, hi, pb, b_packed):
    """The ``MR``-row panels ``[lo, hi)`` of a batch of products; ``b_packed``: each ``B`` is in ``pb``
    already (:func:`pack_b_panels`), else ``pb`` is space to pack a slice of it in."""
    nr = NR32 if out.itemsize == 4 else NR64
    pa = aligned_space(MC * KC_MAX, out)
    rsa, csa = operand_strides(m, k, ta)
    rsb, csb = operand_strides(k, n, tb)
    panels = (m + MR - 1) // MR
    for i in range(lo // panels, (hi - 1) // panels + 1 if hi > lo else 0):
        first, last = panel_span(i, panels, lo, hi, MR, m)
        b_at = np.int64(i * padded(n, nr) * k if b_packed else -1)  # why int64: see operand_strides
        call_gemm_block(out, i * m * n + first * n, n, a, i * a_bs + first * rsa, rsa, csa, b, i * b_bs, rsb, csb,
                        last - first, n, k, alpha, beta, pa, pb, np.int64(-1), b_at)


@codelet(inline="always")
def _column_panels(out, a, b, m, n, k, ta, tb, a_bs, b_bs, alpha, beta, lo, hi, pa, a_packed):
    """The ``NR``-column panels ``[lo, hi)`` of a batch of products; ``a_packed``: each ``A`` is in ``pa``
    already (:func:`pack_a_panels`), else ``pa`` is space to pack a block of it in."""
    nr = NR32 if out.itemsize == 4 else NR64
    pb = aligned_space(KC_MAX * min((n + nr - 1) // nr, hi - lo) * nr, out)
    rsa, csa = operand_strides(m, k, ta)
    rsb, csb = operand_strides(k, n, tb)
    column_panels = (n + nr - 1) // nr
    for i in range(lo // column_panels, (hi - 1) // column_panels + 1 if hi > lo else 0):
        first, last = panel_span(i, column_panels, lo, hi, nr, n)
        a_at = np.int64(i * padded(m, MR) * k if a_packed else -1)  # why int64: see operand_strides
        call_gemm_block(out, i * m * n + first, n, a, i * a_bs, rsa, csa, b, i * b_bs + first * csb, rsb, csb,
                        m, last - first, k, alpha, beta, pa, pb, a_at, np.int64(-1))


@codelet(cache=False)  # why: it calls gemm_block's entry point (call_gemm_block)
def gemm(out, a, b, batch, m, n, k, ta, tb, a_bs, b_bs, alpha, beta, lo, hi):
    """Batched ``out[i] = alpha * op(a[i]) @ op(b[i]) + beta * out[i]`` (the signature of
    :func:`popjit.kernels.matmul.matmul_f32`) for the ``MR``-row panels ``[lo, hi)`` of the
    ``batch * ceil(m / MR)`` there are, on the calling thread."""
    nr = NR32 if out.itemsize == 4 else NR64
    _row_panels(out, a, b, m, n, k, ta, tb, a_bs, b_bs, alpha, beta, lo, hi, aligned_space(KC_MAX * padded(n, nr), out),
                False)
    return 0


@codelet(cache=False)  # why: it calls gemm_block's entry point (call_gemm_block)
def gemm_columns(out, a, b, batch, m, n, k, ta, tb, a_bs, b_bs, alpha, beta, lo, hi):
    """:func:`gemm` for the ``NR``-column panels ``[lo, hi)`` of the ``batch * ceil(n / NR)`` there are
    (each element's sum is the same whichever way a product is cut)."""
    _column_panels(out, a, b, m, n, k, ta, tb, a_bs, b_bs, alpha, beta, lo, hi, aligned_space(MC * KC_MAX, out), False)
    return 0


@codelet(inline="always")
def _pack_panels(space, src, lines, k, stride, step, bs, width, lo, hi):
    """Pack the ``width``-line panels ``[lo, hi)`` of a batch of operands with ``lines`` lines each (line
    ``r`` of operand ``i`` at ``src[i*bs + r*stride]``, its ``k`` elements ``step`` apart): operand after
    operand, each a slice of the depth after the other (as :func:`gemm_block` cuts it), each slice's
    panels together, so that a task finds a packed operand where it would have packed it itself."""
    panels = (lines + width - 1) // width
    depth = slice_depth(k)
    for q in range(lo, hi):
        i, first = q // panels, q % panels * width
        for p0 in range(0, k, depth):
            kc = min(depth, k - p0)
            at, source = i * panels * width * k + p0 * panels * width + first * kc, i * bs + first * stride + p0 * step
            call_pack(space, at, src, source, stride, step, min(width, lines - first), np.int64(width), kc)


@codelet(cache=False)  # why: it calls _pack's entry point (call_pack)
def pack_a_panels(pa, a, batch, m, k, ta, a_bs, lo, hi):
    """Pack the ``MR``-row panels ``[lo, hi)`` of the ``batch * ceil(m / MR)`` of ``op(a)`` into ``pa``
    (``batch * padded(m, MR) * k`` elements), for :func:`gemm_columns_packed_a`."""
    rsa, csa = operand_strides(m, k, ta)
    _pack_panels(pa, a, m, k, rsa, csa, a_bs, MR, lo, hi)
    return 0


@codelet(cache=False)  # why: it calls _pack's entry point (call_pack)
def pack_b_panels(pb, b, batch, n, k, tb, b_bs, lo, hi):
    """Pack the ``NR``-column panels ``[lo, hi)`` of the ``batch * ceil(n / NR)`` of ``op(b)`` into ``pb``
    (``batch * padded(n, NR) * k`` elements), for :func:`gemm_packed_b`."""
    rsb, csb = operand_strides(k, n, tb)
    _pack_panels(pb, b, n, k, csb, rsb, b_bs, NR32 if pb.itemsize == 4 else NR64, lo, hi)
    return 0


@codelet(cache=False)  # why: it calls gemm_block's entry point (call_gemm_block)
def gemm_columns_packed_a(out, pa, b, batch, m, n, k, tb, b_bs, alpha, beta, lo, hi):
    """:func:`gemm_columns` with every ``A`` packed already in ``pa`` (:func:`pack_a_panels`): the tasks
    of a split product share one packing of the operand they all read."""
    _column_panels(out, pa, b, m, n, k, False, tb, 0, b_bs, alpha, beta, lo, hi, pa, True)
    return 0


@codelet(cache=False)  # why: it calls gemm_block's entry point (call_gemm_block)
def gemm_packed_b(out, a, pb, batch, m, n, k, ta, a_bs, alpha, beta, lo, hi):
    """:func:`gemm` with every ``B`` packed already in ``pb`` (:func:`pack_b_panels`)."""
    _row_panels(out, a, pb, m, n, k, ta, False, a_bs, 0, alpha, beta, lo, hi, pb, True)
    return 0


@codelet(inline="always")
def chunk_slices(u, chunks, k):
    """The slices ``[first, last)`` of a depth ``k`` (as :func:`slice_depth` cuts it) in chunk ``u`` of ``chunks``."""
    step = slice_depth(k)
    slices = (k + step - 1) // step
    return u * slices // chunks, (u + 1) * slices // chunks


@codelet(cache=False)  # why: it calls gemm_block's entry point (call_gemm_block)
def gemm_depth(parts, a, b, batch, m, n, k, ta, tb, a_bs, b_bs, alpha, chunks, lo, hi):
    """A deep product's partial sums: for each of the chunks ``[lo, hi)`` of the ``batch * chunks`` there
    are (product ``q // chunks``'s chunk ``q % chunks`` of whole slices of its depth, :func:`chunk_slices`),
    ``parts[q*m*n:]`` = ``alpha * op(a) @ op(b)`` over that range of the depth; :func:`sum_depth` adds them.
    Each slice is one :func:`gemm_block` call, so a chunk sums its slices as :func:`gemm` sums a product's."""
    nr = NR32 if parts.itemsize == 4 else NR64
    pa = aligned_space(MC * KC_MAX, parts)
    pb = aligned_space(KC_MAX * padded(n, nr), parts)
    rsa, csa = operand_strides(m, k, ta)
    rsb, csb = operand_strides(k, n, tb)
    step = slice_depth(k)
    for q in range(lo, hi):
        i = q // chunks
        first, last = chunk_slices(q % chunks, chunks, k)
        for s in range(first, last):
            p0 = s * step
            call_gemm_block(parts, q * m * n, n, a, i * a_bs + p0 * csa, rsa, csa, b, i * b_bs + p0 * rsb, rsb, csb,
                            m, n, min(step, k - p0), alpha, 0.0 if s == first else 1.0, pa, pb, np.int64(-1),
                            np.int64(-1))
    return 0


@codelet
def sum_depth(out, parts, batch, m, n, chunks, beta, lo, hi):
    """Rows ``[lo, hi)`` of the ``batch * m`` rows of a deep product's ``C``: ``beta * C`` (``beta == 0``: ``C``
    is not read) plus its chunks' partial sums (:func:`gemm_depth`), added in chunk order."""
    size = m * n
    for r in range(lo, hi):
        at = (r // m * chunks * m + r % m) * n
        row = out[r * n:(r + 1) * n]
        if beta == 0:
            row[:] = parts[at:at + n]
        else:
            for j in range(n):
                row[j] = beta * row[j] + parts[at + j]
        for u in range(1, chunks):  # why a row of C at a time, in place: vector loops (3x a sum per element)
            chunk = parts[at + u * size:at + u * size + n]
            for j in range(n):
                row[j] += chunk[j]
    return 0


#: The codelet of a product whose ``A`` is computed, never stored (the engine's implicit products,
#: :mod:`popjit.codegen.implicit`, such as a convolution's, whose patches are never stored): the ``MR``-row
#: panels ``[lo, hi)`` of ``C``, ``B`` packed in ``pb`` already (:func:`pack_b_panels`). Each block of at most
#: ``MC`` rows and one slice of the depth of ``A`` (from ``q_d0``; the template's own names start ``q_``, apart
#: from the rendered code's ``p0, p1…``) is computed into a small buffer (``{fill}``: lines writing
#: element ``(o, e)`` of the operand's matrix, ``o`` in ``[q_o0, q_o1)`` of its outer flat index and ``e`` in
#: ``[q_e0, q_e1)`` of its inner one, at ``q_blk[(o - q_o0) * q_ld + e - q_e0]``; ``{block}``: lines setting
#: those bounds, and ``{rsa}``/``{csa}`` the block's strides as ``A``) and multiplied by :func:`gemm_block`:
#: the same sums in the same order as :func:`gemm_packed_b` on the stored operand, so the same bits.
#: why text, not a function taking the computing routine: Numba compiles a function per routine it is
#: given; as one generated function calling the compiled :func:`gemm_block` it is typed in a fraction of it.
#: why ``np.empty``, not :func:`aligned_space`: the block and ``A``'s packed panels are read by scalar loads and
#: broadcasts, which no alignment speeds up, and typing and lowering the aligned slices took Numba about 0.2 s of
#: such a codelet's compile (a 3x3 convolution's machine code, its units emptied, seven alternating fresh
#: processes on the 2-core Ice Lake: median 1.59 against 2.09 s, mean paired difference -0.18 s).
COMPUTED_GEMM = """
def {name}(c, pb, {operands}batch, m, n, k, pob, alpha, beta, lo, hi):
    nr = kg.NR32 if c.itemsize == 4 else kg.NR64
    q_blk = np.empty(kg.MC * kg.KC_MAX, c.dtype)
    pa = np.empty(kg.MC * kg.KC_MAX, c.dtype)
    panels = (m + kg.MR - 1) // kg.MR
    step = kg.slice_depth(k)
    b_width = kg.padded(n, nr)
    for pmat in range(lo // panels, (hi - 1) // panels + 1 if hi > lo else 0):
        first, last = kg.panel_span(pmat, panels, lo, hi, kg.MR, m)
        for r0 in range(first, last, kg.MC):
            rows = min(kg.MC, last - r0)
            for q_d0 in range(0, k, step):
                kc = min(step, k - q_d0)
{block}
{fill}
                kg.call_gemm_block(c, pmat * m * n + r0 * n, n, q_blk, np.int64(0), {rsa}, {csa}, pb, np.int64(0),
                                   np.int64(0), np.int64(0), rows, n, kc, alpha, beta if q_d0 == 0 else 1.0, pa, pb,
                                   np.int64(-1), (pmat * k + q_d0) * b_width)
    return 0
"""

#: :data:`COMPUTED_GEMM` for a deep product, cut across its depth as :func:`gemm_depth` cuts a stored one:
#: the chunks ``[lo, hi)`` of the ``batch * chunks`` there are, each into its partial sums in ``c`` (from
#: ``q * m * n``), which :func:`sum_depth` then adds. Each slice of a chunk packs its slice of ``B`` (``b``,
#: ``op(b)`` as ``tb`` says) once, then each block of at most ``MC`` rows of ``A`` is computed and multiplied:
#: the same sums in the same order as :func:`gemm_depth` on the stored operand, so the same bits.
COMPUTED_GEMM_DEPTH = """
def {name}(c, b, {operands}batch, m, n, k, tb, b_bs, pob, alpha, chunks, lo, hi):
    nr = kg.NR32 if c.itemsize == 4 else kg.NR64
    q_blk = np.empty(kg.MC * kg.KC_MAX, c.dtype)
    pa = np.empty(kg.MC * kg.KC_MAX, c.dtype)
    pb = kg.aligned_space(kg.KC_MAX * kg.padded(n, nr), c)
    rsb, csb = kg.operand_strides(k, n, tb)
    step = kg.slice_depth(k)
    for q in range(lo, hi):
        pmat = q // chunks
        q_first, q_last = kg.chunk_slices(q % chunks, chunks, k)
        for q_slice in range(q_first, q_last):
            q_d0 = q_slice * step
            kc = min(step, k - q_d0)
            kg.call_pack(pb, np.int64(0), b, pmat * b_bs + q_d0 * rsb, csb, rsb, n, np.int64(nr), kc)
            for r0 in range(0, m, kg.MC):
                rows = min(kg.MC, m - r0)
{block}
{fill}
                q_beta = 0.0 if q_slice == q_first else 1.0
                kg.call_gemm_block(c, q * m * n + r0 * n, n, q_blk, np.int64(0), {rsa}, {csa}, pb, np.int64(0),
                                   np.int64(0), np.int64(0), rows, n, kc, alpha, q_beta, pa, pb, np.int64(-1),
                                   np.int64(0))
    return 0
"""
