"""Implicit products: a matmul operand computed while it is packed, never stored (implicit GEMM).

A convolution is lowered as ``patches @ filters`` (:mod:`popjit.frontend.conv_ops`): a :class:`Kernel`
writes the im2col matrix of every window into a buffer, and a :class:`MatMul` reads it; the filter's
gradient reads the same buffer transposed. When that buffer is written by one element-wise kernel and
read only by such products, the engine leaves it out: each product runs popjit's own gemm
(:func:`popjit.kernels.gemm.gemm_computed`) with a packing routine that evaluates the kernel's
expression for the panel of ``A`` it packs (:func:`popjit.codegen.render.render_computed_product`).

This happens in the engine only, after the schedule: the program, its virtual-IPU schedule, memory
and cycle estimates are the same with it on or off. Each element of ``A`` is the same value the
kernel would have stored, and the own gemm adds the same products in the same order whether ``A``
is packed from memory or computed, so the results equal the own gemm's on the materialised buffer
bit for bit (the system BLAS, ``POPJIT_MATMUL=blas``, rounds its sums its own way).

On with ``POPJIT_IMPLICIT_GEMM=1`` (off by default: each computed product is a codelet Numba compiles
in seconds, and on a 2-core Zen 3 it was not measurably faster than the own gemm on the stored
patches, its packing being a scalar gather; docs/env_vars.md).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass

from popjit import config, dtypes
from popjit.codegen.numerics import Numerics
from popjit.codegen.render import SERIAL, Rendered, _at, _Body, _indent, _Params, compute_type
from popjit.dtypes import DType
from popjit.ir.loop import (
    Buffer,
    Expr,
    ILin,
    IVar,
    Kernel,
    MatMul,
    Program,
    Stmt,
    flat_index,
    ivar,
    row_major_strides,
)
from popjit.loop.passes import scatters

#: The dtypes popjit's own gemm multiplies.
_GEMM_DTYPES = (dtypes.float32, dtypes.float64)


@dataclass(frozen=True)
class ComputedOperand:
    """Operand ``A`` of one product, computed from a kernel: ``value`` over the loop variables ``i0, i1…``
    of ``domain`` (the kernel's, with at most one axis split in two), whose leading ``outer`` axes
    are the row-major flat index ``matrix * outer_stride + row`` of ``A`` (``transposed``: ``+ column``)
    and the others its column (``transposed``: row)."""

    kernel: Kernel
    value: Expr
    domain: tuple[int, ...]
    outer: int
    transposed: bool
    outer_stride: int


@dataclass
class ImplicitPlan:
    """Which products compute their ``A`` (by the product's ``id``) and which kernels are left out."""

    products: dict[int, ComputedOperand]
    skipped: set[int]

    @property
    def unmaterialised(self) -> set[Buffer]:
        """The buffers nothing writes any more."""
        return {op.kernel.stores[0].buf for op in self.products.values()}


def plan_implicit(program: Program, numerics: Numerics) -> ImplicitPlan:
    """The implicit products of ``program`` (none when ``POPJIT_IMPLICIT_GEMM`` is off, without Numba,
    or when the program traps or rounds specially: a trap check or rounding call reads the buffer)."""
    plan = ImplicitPlan({}, set())
    if not config.get("IMPLICIT_GEMM") or config.get("DISABLE_NUMBA") or numerics.traps or numerics.sr \
            or numerics.nanoo:
        return plan
    readers: dict[int, list[Stmt]] = {}
    writers: dict[int, int] = {}
    for s in program.walk():
        for b in s.reads():
            readers.setdefault(b.uid, []).append(s)
        for b in s.writes():
            writers[b.uid] = writers.get(b.uid, 0) + 1
    for block in _blocks(program.body):
        for at, s in enumerate(block):
            if isinstance(s, Kernel) and _pure_map(s) and writers[s.stores[0].buf.uid] == 1:
                operands = _computed_operands(s, block, at, readers.get(s.stores[0].buf.uid, []))
                if operands:
                    plan.products.update(operands)
                    plan.skipped.add(id(s))
    return plan


def _blocks(body: list[Stmt]) -> Iterator[list[Stmt]]:
    """Every statement list of a program: its body and the blocks of its control statements."""
    yield body
    for s in body:
        for block in s.children():
            yield from _blocks(block)


def _pure_map(k: Kernel) -> bool:
    """Whether ``k`` stores one value per point of its domain, in order, into a temporary that it does not
    read, and nothing else: element ``f`` of the buffer is its value at the ``f``-th point."""
    if k.reduce is not None or len(k.stores) != 1 or scatters(k):
        return False
    (store,) = k.stores
    buf = store.buf
    if buf.kind != "temp" or buf.dtype not in _GEMM_DTYPES or buf.size != k.size or buf in k.reads():
        return False
    names = [ivar(f"i{j}") for j in range(len(k.domain))]
    return store.index == flat_index(names, row_major_strides(k.domain))


def _computed_operands(k: Kernel, block: list[Stmt], at: int, readers: list[Stmt]) -> dict[int, ComputedOperand]:
    """The operands of the products that may compute ``k``'s buffer instead of reading it: all of its
    readers or none. Each reader must be a later product of the same block taking it as ``A`` only,
    with nothing between ``k`` and it writing what ``k`` reads."""
    buf = k.stores[0].buf
    inputs = k.reads()
    found: dict[int, ComputedOperand] = {}
    for s in readers:
        where = next((j for j in range(at + 1, len(block)) if block[j] is s), None)
        if where is None or not isinstance(s, MatMul) or not _takes_as_a(s, buf, inputs):
            return {}
        if any(w.writes() & inputs for between in block[at + 1:where] for w in between.walk()):
            return {}
        operand = _operand(k, s)
        if operand is None:
            return {}
        found[id(s)] = operand
    return found


def _takes_as_a(s: MatMul, buf: Buffer, inputs: set[Buffer]) -> bool:
    """Whether product ``s`` reads ``buf`` as its ``A`` only, on popjit's own gemm's dtypes, and writes
    nothing the kernel computing ``buf`` reads."""
    return (s.a is buf and s.b is not buf and s.out is not buf and s.out not in inputs
            and s.out.dtype == buf.dtype and s.a_batch_stride in (0, s.m * s.k))


def _operand(k: Kernel, s: MatMul) -> ComputedOperand | None:
    """``A`` of ``s`` as computed from ``k`` (None when no axes of the domain make up its inner index)."""
    inner = s.m if s.ta else s.k
    split = split_domain(k.domain, inner)
    if split is None:
        return None
    domain, outer, renamed = split
    value = k.stores[0].value.substitute(renamed) if renamed else k.stores[0].value
    return ComputedOperand(k, value, domain, outer, bool(s.ta), s.a_batch_stride // inner)


def split_domain(domain: tuple[int, ...], inner: int) -> tuple[tuple[int, ...], int, dict[IVar, ILin]] | None:
    """``domain`` with trailing axes of ``inner`` points in all, splitting one axis in two if need be: the
    new domain, its number of leading (outer) axes, and each old loop variable in the new ones (empty
    when no axis was split). None when ``inner`` is not a product of trailing axes and a factor of the
    axis before them."""
    size = 1
    for outer in range(len(domain), -1, -1):
        if size == inner:
            return domain, outer, {}
        if outer == 0 or inner % size:
            return None
        part = inner // size
        axis = domain[outer - 1]
        if part < axis:
            if axis % part:
                return None
            return _split_axis(domain, outer - 1, part), outer, _renamed(len(domain), outer - 1, part)
        size *= axis
    return None


def _split_axis(domain: tuple[int, ...], axis: int, part: int) -> tuple[int, ...]:
    return (*domain[:axis], domain[axis] // part, part, *domain[axis + 1:])


def _renamed(rank: int, axis: int, part: int) -> dict[IVar, ILin]:
    """The loop variables of a domain of ``rank`` axes in those of the domain with ``axis`` split into
    ``(size // part, part)``."""
    mapping: dict[IVar, ILin] = {}
    for j in range(rank):
        if j < axis:
            mapping[IVar(f"i{j}")] = ivar(f"i{j}")
        elif j == axis:
            mapping[IVar(f"i{j}")] = ivar(f"i{j}") * part + ivar(f"i{j + 1}")
        else:
            mapping[IVar(f"i{j}")] = ivar(f"i{j + 1}")
    return mapping


#: The module popjit's own gemm is imported as in a computed product's codelet.
GEMM_MODULE = "from popjit.kernels import gemm as kg\n"


def render_computed_product(value: Expr, dtype: DType, domain: tuple[int, ...], outer: int,
                            transposed: bool) -> Rendered:
    """The codelet of a product whose ``A`` is never stored (:data:`popjit.kernels.gemm.COMPUTED_GEMM`):
    ``value`` (of the loop variables ``i0, i1…`` of ``domain``) is ``A``'s element whose row-major flat
    index over the first ``outer`` axes is ``matrix * pob + row`` (``transposed``: ``+ column``) and over
    the others its column (row). Packing a block runs over its rows and, inside, its columns: each row's
    variables are found once (divisions), the columns' counted up as an odometer, and what depends only
    on the row is computed once per row."""
    # why here: importing the kernels compiles or loads them from the cache directory, which importing
    # the engine must not do (a bad TF_POPLAR_FLAGS would fail at import)
    from popjit.kernels.gemm import COMPUTED_GEMM

    params = _Params()
    hoisted: list[str] = []
    axes = list(zip((f"i{j}" for j in range(len(domain))), (params.int(d) for d in domain)))
    rows, columns = (axes[outer:], axes[:outer]) if transposed else (axes[:outer], axes[outer:])
    body = _Body(params, hoisted, {**{n: 1 for n, _ in rows}, **{n: 2 for n, _ in columns}})
    v = body.expr(value)
    by_level: list[list[str]] = [[], [], []]
    for line, level in zip(body.lines, body.levels):
        by_level[level].append(line)
    row_at, column_at = ("prow + q", "pcol + pmat * pob") if transposed else ("prow + q + pmat * pob", "pcol")
    inner = [*by_level[2], f"{_at('pa', 'at + e * kg.MR')} = {compute_type(dtype)}({v})", *_odometer(columns)]
    per_row = [*_digits(rows, row_at), *by_level[1], *_digits(columns, column_at),
               "at = (q // kg.MR) * kg.MR * pcols + q % kg.MR", "for e in range(pcols):", *_indent(inner, 1)]
    pack = [*hoisted, *by_level[0], "for q in range(prows):", *_indent(per_row, 1)]
    operands = "".join(f"{a}, " for a in [*(f"b{i}" for i in range(len(params.buffers))),
                                          *(f"p{i}" for i in range(len(params.ints))),
                                          *(f"f{i}" for i in range(len(params.floats)))])
    function = COMPUTED_GEMM.format(name="NAME", operands=operands, pack="\n".join(_indent(pack, 4)))
    text = f"# buffers: {', '.join(b.dtype.short for b in params.buffers)}\n{GEMM_MODULE}{SERIAL}{function}"
    name = "g_" + hashlib.sha256(text.encode()).hexdigest()[:20]
    return Rendered(text.replace("NAME", name), name, params.buffers, params.ints, params.floats)


def _digits(axes: list[tuple[str, str]], flat: str) -> list[str]:
    """Lines setting the loop variables of ``axes`` (name, size; outermost first) from their row-major
    flat index ``flat``."""
    if not axes:
        return []
    lines = [f"ix = {flat}"]
    for name, size in reversed(axes[1:]):
        lines += [f"{name} = ix % {size}", f"ix = ix // {size}"]
    return [*lines, f"{axes[0][0]} = ix"]


def _odometer(axes: list[tuple[str, str]]) -> list[str]:
    """Lines advancing the loop variables of ``axes`` (outermost first) to the next flat index."""
    if not axes:
        return []
    (name, size), *outer = reversed(axes)
    lines = [f"{name} += 1"]
    if outer:
        lines += [f"if {name} == {size}:", f"    {name} = 0", *_indent(_odometer(list(reversed(outer))), 1)]
    return lines
