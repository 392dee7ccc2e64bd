"""Implicit products: a matmul operand computed while it is packed, never stored (implicit GEMM).

A convolution is lowered as ``patches @ filters`` (:mod:`popjit.frontend.conv_ops`): a :class:`Kernel`
writes the im2col matrix of every window into a buffer, and a :class:`MatMul` reads it; the filter's
gradient reads the same buffer transposed, and a stride-one convolution's input gradient is a
convolution of ``dy`` too (:mod:`popjit.graph.passes.conv_gradient`), with patches of its own. When
such a buffer is written by one element-wise kernel and read only by such products, the engine may
leave it out: each product runs popjit's own gemm with a generated codelet
(:data:`popjit.kernels.gemm.COMPUTED_GEMM`, :data:`~popjit.kernels.gemm.COMPUTED_GEMM_DEPTH` for a product
cut across its depth; :func:`render_computed_product`) that computes each block of ``A`` it multiplies from
the kernel's expression into a small buffer.

This happens in the engine only, after the schedule: the program, its virtual-IPU schedule, memory
and cycle estimates are the same with it on or off. Each element of ``A`` is the same value the
kernel would have stored, and the own gemm adds the same products in the same order whether ``A``
is read from memory or computed, so the results equal the own gemm's on the materialised buffer
bit for bit (the system BLAS, ``POPJIT_MATMUL=blas``, rounds its sums its own way).

``POPJIT_IMPLICIT_GEMM=rules`` (the default) does it where ``POPJIT_MATMUL`` gives every product reading
the buffer to the own gemm, so a program's results do not change, and, if one of them is cut across its
depth, the buffer is at least :data:`DEEP_MIN_BYTES`; ``1`` always, ``0`` never (docs/env_vars.md).
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
from popjit.kernels.gemm_choice import splits_depth, uses_own_gemm
from popjit.loop.passes import scatters

#: The dtypes popjit's own gemm multiplies.
_GEMM_DTYPES = (dtypes.float32, dtypes.float64)
#: Under the rules, an operand a deep product reads (one cut across its depth: a convolution's filter
#: gradient) is computed only if it is at least this large. why: computed, it costs one more codelet to
#: compile (about 1.3 s the first time a machine meets its expression) and saves the memory the operand
#: takes, which a program holds between runs: the ResNet stage C1's training step (58 MB of patches) ran
#: at the same speed either way on a 2-core Emerald Rapids guest (best 41.5 against 42.3 ms; its 300 MB L3
#: holds them) and its first call on an empty cache took 6.7-7.3 s against 7.5-9.8 s; the Keras CNN's
#: second convolution's patches (4.5 MB) would cost its cold first epoch a codelet to compile.
DEEP_MIN_BYTES = 16 << 20


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
    setting = config.get("IMPLICIT_GEMM")
    if not setting or config.get("DISABLE_NUMBA") or numerics.traps or numerics.sr or numerics.nanoo:
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
                operands = _computed_operands(s, block, at, readers.get(s.stores[0].buf.uid, []),
                                              by_rules=setting == "rules")
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


def _computed_operands(k: Kernel, block: list[Stmt], at: int, readers: list[Stmt],
                       by_rules: bool) -> dict[int, ComputedOperand]:
    """The operands of the products that may compute ``k``'s buffer instead of reading it: all of its
    readers or none. Each reader must be a later product of the same block taking it as ``A`` only,
    with nothing between ``k`` and it writing what ``k`` reads; ``by_rules``: and one ``POPJIT_MATMUL``
    gives to the own gemm (whose results computing ``A`` then leaves as they are)."""
    buf = k.stores[0].buf
    inputs = k.reads()
    found: dict[int, ComputedOperand] = {}
    for s in readers:
        where = next((j for j in range(at + 1, len(block)) if block[j] is s), None)
        if where is None or not isinstance(s, MatMul) or not _takes_as_a(s, buf, inputs):
            return {}
        if by_rules and (not uses_own_gemm(s.out.dtype.np, s.batch, s.m, s.n, s.k, s.ta, s.tb)
                         or (splits_depth(s.m, s.n, s.k) and buf.size * buf.dtype.np.itemsize < DEEP_MIN_BYTES)):
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
                            transposed: bool, deep: bool = False) -> Rendered:
    """The codelet of a product whose ``A`` is never stored (:data:`popjit.kernels.gemm.COMPUTED_GEMM`):
    ``value`` (of the loop variables ``i0, i1…`` of ``domain``) is the element of ``A``'s matrix ``pmat``
    at row-major flat index ``o = pmat * pob + row`` over the first ``outer`` axes (``transposed``:
    ``+ column``) and ``e`` over the others, its column (row). Each block is computed row ``o`` by row:
    its variables found once (divisions), what depends on them alone computed once, then nested loops
    over the other axes, cut to the block's range, the innermost one contiguous in the block (so a
    convolution's channels are a vector loop). ``deep``: the product is cut across its depth
    (:data:`popjit.kernels.gemm.COMPUTED_GEMM_DEPTH`)."""
    # why here: importing the kernels compiles or loads them from the cache directory, which importing
    # the engine must not do (a bad TF_POPLAR_FLAGS would fail at import)
    from popjit.kernels.gemm import COMPUTED_GEMM, COMPUTED_GEMM_DEPTH

    params = _Params()
    hoisted: list[str] = []
    axes = list(zip((f"i{j}" for j in range(len(domain))), (params.int(d) for d in domain)))
    rows, columns = axes[:outer], axes[outer:]
    body = _Body(params, hoisted, {**{n: 1 for n, _ in rows}, **{n: 2 + j for j, (n, _) in enumerate(columns)}})
    v = body.expr(value)
    by_level: list[list[str]] = [[] for _ in range(2 + len(columns))]
    for line, level in zip(body.lines, body.levels):
        by_level[level].append(line)
    store = f"{_at('q_blk', 'q_at')} = {compute_type(dtype)}({v})"
    per_row = [*_digits(rows, "q_o"), *by_level[1], "q_at = (q_o - q_o0) * q_ld", *_cut_loops(columns, by_level, store)]
    fill = [*hoisted, *by_level[0], *_digit_values(columns, "q_e0", "q_s"), *_digit_values(columns, "q_e1 - 1", "q_t"),
            "for q_o in range(q_o0, q_o1):", *_indent(per_row, 1)]
    block, rsa, csa = _block_bounds(transposed)
    operands = "".join(f"{a}, " for a in [*(f"b{i}" for i in range(len(params.buffers))),
                                          *(f"p{i}" for i in range(len(params.ints))),
                                          *(f"f{i}" for i in range(len(params.floats)))])
    template = COMPUTED_GEMM_DEPTH if deep else COMPUTED_GEMM
    function = template.format(name="NAME", operands=operands, block="\n".join(_indent(block, 4)),
                               fill="\n".join(_indent(fill, 4)), rsa=rsa, csa=csa)
    text = f"# buffers: {', '.join(b.dtype.short for b in params.buffers)}\n{GEMM_MODULE}{SERIAL}{function}"
    name = "g_" + hashlib.sha256(text.encode()).hexdigest()[:20]
    return Rendered(text.replace("NAME", name), name, params.buffers, params.ints, params.floats)


def _block_bounds(transposed: bool) -> tuple[list[str], str, str]:
    """The lines setting the block's range of the operand (``q_o0…q_o1`` of its outer index, ``q_e0…q_e1``
    of its inner one, ``q_ld`` apart in the block) for rows ``r0…r0 + rows`` and depth ``q_d0…q_d0 + kc`` of
    ``A``, and the block's row and column strides as ``A``. why two ways: transposed, ``A``'s rows are the
    operand's inner index and its depth the outer one."""
    if transposed:
        return ["q_o0 = pmat * pob + q_d0", "q_o1 = q_o0 + kc", "q_e0, q_e1, q_ld = r0, r0 + rows, rows"], \
            "np.int64(1)", "rows"
    return ["q_o0 = pmat * pob + r0", "q_o1 = q_o0 + rows", "q_e0, q_e1, q_ld = q_d0, q_d0 + kc, kc"], \
        "kc", "np.int64(1)"


def _digits(axes: list[tuple[str, str]], flat: str) -> list[str]:
    """Lines setting the loop variables of ``axes`` (name, size; outermost first) from their row-major
    flat index ``flat``."""
    return _digit_values(axes, flat, "")


def _digit_values(axes: list[tuple[str, str]], flat: str, prefix: str) -> list[str]:
    """Lines setting the digits of the row-major flat index ``flat`` over ``axes`` (name, size): into the
    axes' names, or with ``prefix`` into ``{prefix}0, {prefix}1…``."""
    if not axes:
        return []
    names = [f"{prefix}{j}" if prefix else name for j, (name, _) in enumerate(axes)]
    lines = [f"ix = {flat}"]
    for name, (_, size) in zip(reversed(names[1:]), reversed(axes[1:])):
        lines += [f"{name} = ix % {size}", f"ix = ix // {size}"]
    return [*lines, f"{names[0]} = ix"]


def _cut_loops(axes: list[tuple[str, str]], by_level: list[list[str]], store: str) -> list[str]:
    """Nested loops over ``axes`` (name, size) running the flat indices ``[q_e0, q_e1)`` only (whose digits
    are ``q_s*`` and ``q_t*``): each axis from its first digit while the axes outside it are at theirs,
    to its last while they are at theirs. ``by_level[2 + j]``: the lines of axis ``j``'s loop; ``store``
    writes the element at ``q_at``, which counts the innermost loop's iterations."""
    if not axes:
        return [store]
    lines: list[str] = []
    for j, (name, size) in enumerate(axes):
        first = f"q_s{j}" if j == 0 else f"q_s{j} if q_f{j - 1} else 0"
        last = f"q_t{j} + 1" if j == 0 else f"q_t{j} + 1 if q_l{j - 1} else {size}"
        if j == len(axes) - 1:
            inner = [*by_level[2 + j], store.replace("q_at", f"q_at + {name} - q_lo")]
            lines += _indent([f"q_lo, q_hi = {first}, {last}", f"for {name} in range(q_lo, q_hi):",
                              *_indent(inner, 1), "q_at += q_hi - q_lo"], j)
            break
        at_first = f"{name} == q_s{j}" if j == 0 else f"q_f{j - 1} and {name} == q_s{j}"
        at_last = f"{name} == q_t{j}" if j == 0 else f"q_l{j - 1} and {name} == q_t{j}"
        lines += _indent([f"for {name} in range({first}, {last}):",
                          f"    q_f{j}, q_l{j} = {at_first}, {at_last}", *_indent(by_level[2 + j], 1)], j)
    return lines
