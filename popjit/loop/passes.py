"""Loop-IR passes: ``program -> program``.

- ``collapse_dims``: drop size-1 loop dimensions and merge adjacent ones that every index
  walks contiguously, so ``x + y`` on any rank of same-shape tensors is one flat loop (and the
  same codelet for every shape);
- ``carry_variables_in_place``: a variable copied into a loop's state before the loop and back after
  it is the loop's state itself;
- ``elide_copies``: when a kernel's result is only copied into a buffer it reads at the same
  index (a loop-carried value, a variable update), write that buffer in place instead.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from popjit.ir.loop import (
    Apply,
    AtomCollector,
    Buffer,
    Collective,
    Const,
    Copy,
    Expr,
    ExprMutator,
    ExprVisitor,
    IAtom,
    ILin,
    IValue,
    IVar,
    Kernel,
    Load,
    MatMul,
    Program,
    Reduce,
    Repeat,
    Stmt,
    StmtMutator,
    Store,
    While,
    as_index,
    flat_index,
    ivar,
    row_major_strides,
)
from popjit.loop.interchange import interchangeable
from popjit.ops.reduce import REDUCTIONS

# ----------------------------------------------------------------------------------------------
# collapse_dims


class IndexCollector(ExprVisitor):
    """Every index expression of a kernel, nested ones (inside div, mod, min, max and gathered
    values) included."""

    def __init__(self) -> None:
        self.found: list[ILin] = []

    def index(self, ix: ILin) -> None:
        self.found.append(ix)
        super().index(ix)

    def kernel(self, k: Kernel) -> list[ILin]:
        for s in k.stores:
            self.index(s.index)
            self.expr(s.value)
        return self.found


def _nonlinear_vars(ilins: list[ILin]) -> set[str]:
    """Loop variables that appear inside a div, mod, min, max or gathered value."""
    pinned: set[str] = set()
    for ix in ilins:
        for atom, _ in ix.terms:
            if not isinstance(atom, IVar):
                pinned |= {a.name for a in AtomCollector().inside(atom) if isinstance(a, IVar)}
    return pinned


def _collapse_group(names: list[str], sizes: list[int], ilins: list[ILin], pinned: set[str],
                    prefix: str) -> tuple[list[int], dict[IAtom, ILin]]:
    """Drop size-1 dims and merge runs of adjacent dims that every index walks contiguously.

    Returns the new sizes and the substitution old variable -> index in the new variables
    ``{prefix}0..``. Dims ``a, b`` merge when every index has ``coef(a) == coef(b) * size(b)``;
    then ``coef(a)*a + coef(b)*b == coef(b) * j`` for the merged variable ``j``.
    """
    subst: dict[IAtom, ILin] = {}
    groups: list[list[tuple[str, int]]] = []
    for n, s in zip(names, sizes):
        if s == 1:
            subst[IVar(n)] = as_index(0)
            continue
        if groups and n not in pinned:
            prev = groups[-1][-1][0]
            if prev not in pinned and all(ix.coef(IVar(prev)) == ix.coef(IVar(n)) * s for ix in ilins):
                groups[-1].append((n, s))
                continue
        groups.append([(n, s)])
    new_sizes = []
    for g, members in enumerate(groups):
        size = 1
        for _, s in members:
            size *= s
        new_sizes.append(size)
        for name, _ in members[:-1]:
            subst[IVar(name)] = as_index(0)
        subst[IVar(members[-1][0])] = ivar(f"{prefix}{g}")
    return new_sizes, subst


def collapse_kernel(k: Kernel) -> Kernel:
    """``k`` with size-1 dims dropped and contiguous dims merged (same iteration, fewer loops)."""
    if k.reduce is not None and k.reduce.mode == "scan":
        return k
    ilins = IndexCollector().kernel(k)
    pinned = _nonlinear_vars(ilins)
    dsizes, dsub = _collapse_group([f"i{j}" for j in range(len(k.domain))], list(k.domain), ilins, pinned, "_d")
    reduce = k.reduce
    rsub: dict[IAtom, ILin] = {}
    if reduce is not None and not REDUCTIONS[reduce.op].is_arg:
        rnames = [f"r{j}" for j in range(len(reduce.rdomain))]
        rsizes, rsub = _collapse_group(rnames, list(reduce.rdomain), ilins, pinned, "_r")
        reduce = Reduce(reduce.op, tuple(rsizes), reduce.mode, reduce.exclusive, reduce.reverse)
    mapping = {**dsub, **rsub}
    rename: dict[IAtom, ILin] = {IVar(f"_d{j}"): ivar(f"i{j}") for j in range(len(dsizes))}
    rename.update({IVar(f"_r{j}"): ivar(f"r{j}") for j in range(len(reduce.rdomain) if reduce else 0)})
    stores = [Store(s.buf, s.index.substitute(mapping).substitute(rename),
                    s.value.substitute(mapping).substitute(rename)) for s in k.stores]
    return Kernel(k.name, tuple(dsizes), stores, reduce, k.ops).placed_like(k)



def scatters(k: Kernel) -> bool:
    """Whether two iterations of ``k``'s outermost loop may store to the same element: a store index
    holding a gathered value that depends on that loop (a scatter such as ``out[ids[n]] += x[n]``).
    Such a kernel must not be split over threads."""
    outer = IVar("i0")
    for store in k.stores:
        for atom in AtomCollector().collect_index(store.index):
            if isinstance(atom, IValue) and outer in AtomCollector().inside(atom):
                return True
    return False


def row_consumer_scale(mm: MatMul, k: Stmt) -> int | None:
    """How many iterations of ``k``'s outermost loop there are per row of ``mm``'s result, if ``k`` is an
    element-wise kernel that may run on any rows of that result as soon as they are written (None if not).

    That is: no reduction and no scatter; every load of ``mm.out`` at the iteration's own element (the
    row-major position of its indices, over a domain the size of ``mm.out`` whose outermost loop covers
    whole rows); and it writes none of the product's operands or result. Each iteration then reads only
    rows whose product is done once the product's units covering them are."""
    if not isinstance(k, Kernel) or k.reduce is not None or scatters(k):
        return None
    rows = mm.batch * mm.m
    if not k.domain or k.size != mm.out.size or k.domain[0] % rows:
        return None
    if {b.uid for b in k.writes()} & {mm.a.uid, mm.b.uid, mm.out.uid}:
        return None
    own = flat_index([ivar(f"i{d}") for d in range(len(k.domain))], row_major_strides(k.domain))
    loads = [ld for ld in k.loads() if ld.buf.uid == mm.out.uid]
    if not loads or any(ld.index != own for ld in loads):
        return None
    return k.domain[0] // rows


def column_blocks(mm: MatMul, k: Stmt, width: int) -> Kernel | None:
    """``k`` with its loops over ``mm``'s result ``[rows, columns]`` reordered so that its outermost loop runs
    over blocks of ``width`` columns: domain ``[columns / width, rows, width]``, the same stores, each element
    computed as before. Its iterations then read what a product cut into blocks of ``width`` columns writes,
    a block each. None unless ``k`` reads the result row by row over its two axes
    (:func:`row_consumer_scale`), ``mm`` is one matrix and its columns are whole blocks."""
    if mm.batch != 1 or row_consumer_scale(mm, k) != 1 or len(k.domain) != 2 or k.domain[1] % width:
        return None
    assert isinstance(k, Kernel)
    rows, columns = k.domain
    renamed: dict[IAtom, ILin] = {IVar("i0"): ivar("i1"), IVar("i1"): ivar("i0") * width + ivar("i2")}
    stores = [Store(s.buf, s.index.substitute(renamed), s.value.substitute(renamed)) for s in k.stores]
    return Kernel(k.name, (columns // width, rows, width), stores, None, k.ops).placed_like(k)


class KernelMapper(StmtMutator):
    """Replaces every kernel, nested ones included, by ``fn(kernel)``."""

    def __init__(self, fn: Callable[[Kernel], Stmt]) -> None:
        self.fn = fn

    def visit_kernel(self, k: Kernel) -> Stmt:
        return self.fn(k)


def collapse_dims(program: Program) -> Program:
    program.body = KernelMapper(collapse_kernel).block(program.body)
    return program


# ----------------------------------------------------------------------------------------------
# carry_variables_in_place


def _touches(s: Stmt) -> set[int]:
    """Buffers ``s`` (or anything nested in it) reads or writes."""
    return _reads(s) | _writes(s)


def _touch_counts(stmts: list[Stmt]) -> dict[int, int]:
    """How many statements (nested ones included) read or write each buffer."""
    counts: dict[int, int] = {}
    for s in stmts:
        for t in s.walk():
            for uid in {b.uid for b in t.reads() | t.writes()}:
                counts[uid] = counts.get(uid, 0) + 1
    return counts


class _RenameLoads(ExprMutator):
    """Loads and stores of the buffers in ``mapping`` (by uid) go to their replacements."""

    def __init__(self, mapping: dict[int, Buffer]) -> None:
        self.mapping = mapping

    def store(self, s: Store) -> Store:
        return Store(self.mapping.get(s.buf.uid, s.buf), self.index(s.index), self.expr(s.value))

    def visit_load(self, e: Load) -> Expr:
        return Load(self.mapping.get(e.buf.uid, e.buf), self.index(e.index))


class _RenameBuffers(StmtMutator):
    """Every statement reads and writes the replacement of each buffer in ``mapping`` (by uid) instead."""

    def __init__(self, mapping: dict[int, Buffer]) -> None:
        self.mapping = mapping
        self.exprs = _RenameLoads(mapping)

    def buf(self, b: Buffer) -> Buffer:
        return self.mapping.get(b.uid, b)

    def visit_kernel(self, s: Kernel) -> Stmt:
        s.stores = [self.exprs.store(st) for st in s.stores]
        return s

    def visit_matmul(self, s: MatMul) -> Stmt:
        s.out, s.a, s.b = self.buf(s.out), self.buf(s.a), self.buf(s.b)
        return s

    def visit_copy(self, s: Copy | Collective) -> Stmt:
        s.dst, s.src = self.buf(s.dst), self.buf(s.src)
        return s

    visit_collective = visit_copy

    def visit_while(self, s: While) -> Stmt:
        return While(self.block(s.cond), self.buf(s.pred), self.block(s.body), s.max_iterations).placed_like(s)


class _CarryInPlace(StmtMutator):
    """Carries variables in their own buffers through the loops of each block (see
    ``carry_variables_in_place``)."""

    def __init__(self, program: Program) -> None:
        self.program = program
        self.touches = _touch_counts(program.body)

    def block(self, stmts: Sequence[Stmt]) -> list[Stmt]:
        out: list[Stmt | None] = list(super().block(stmts))  # nested blocks first
        for j, loop in enumerate(out):
            if not isinstance(loop, (Repeat, While)) or (isinstance(loop, Repeat) and interchangeable(loop)):
                continue
            mapping: dict[int, Buffer] = {}
            for i in range(j - 1, -1, -1):
                before = out[i]
                if isinstance(before, Copy) and (k := self._write_back(out, before, j)) is not None:
                    mapping[before.dst.uid] = before.src
                    self.program.temps.remove(before.dst)
                    out[i] = out[k] = None
            if mapping:
                out[j] = _RenameBuffers(mapping).stmt(loop)
        return [s for s in out if s is not None]

    def _write_back(self, out: list[Stmt | None], copy: Copy, j: int) -> int | None:
        """Where, after the loop at ``j``, the state ``copy`` fills from a variable is copied back into it,
        if nothing else touches either: the variable not in the loop, the state nowhere but the loop."""
        state, variable = copy.dst, copy.src
        if variable.kind != "var" or state.kind != "temp" or state not in self.program.temps:
            return None
        if state.size != variable.size or state.dtype != variable.dtype:
            return None
        loop = out[j]
        assert loop is not None
        inside = _touch_counts([loop]).get(state.uid, 0)
        if variable.uid in _touches(loop) or self.touches.get(state.uid, 0) != inside + 2:
            return None
        start = out.index(copy)
        if any(s is not None and {state.uid, variable.uid} & _touches(s) for s in out[start + 1:j]):
            return None
        for k in range(j + 1, len(out)):
            after = out[k]
            if after is None:
                continue
            if isinstance(after, Copy) and after.dst is variable and after.src is state:
                return k
            if {state.uid, variable.uid} & _touches(after):
                return None
        return None


def carry_variables_in_place(program: Program) -> Program:
    """A variable copied into a loop's state before the loop and back after it, and touched by nothing
    else meanwhile, is the loop's state itself: the two copies go and the loop updates the variable
    in place. why: for a program run one step per call (a Keras step) the copies were most of the
    call beside the step (W1's weights, 0.94 MB, in and out). An interrupted run leaves such a variable
    at its last completed iteration (docs/api.md). Not for a loop the engine may run chunk by chunk
    (:func:`~popjit.loop.interchange.interchangeable`), which must write only temporaries."""
    program.body = _CarryInPlace(program).block(program.body)
    return program


# ----------------------------------------------------------------------------------------------
# elide_copies


def _reads(s: Stmt) -> set[int]:
    """Buffers ``s`` (or anything nested in it) reads."""
    return {b.uid for t in s.walk() for b in t.reads()}


def _writes(s: Stmt) -> set[int]:
    """Buffers ``s`` (or anything nested in it) writes."""
    return {b.uid for t in s.walk() for b in t.writes()}


def _all_reads(stmts: list[Stmt]) -> dict[int, int]:
    """How many statements read each buffer."""
    counts: dict[int, int] = {}
    for s in stmts:
        for t in s.walk():
            for b in t.reads():
                counts[b.uid] = counts.get(b.uid, 0) + 1
    return counts


def _inplace_ok(k: Kernel, dst_uid: int) -> bool:
    """The kernel reads ``dst`` only at the index it stores to (each element read, then written)."""
    if k.reduce is not None or len(k.stores) != 1:
        return False
    (store,) = k.stores
    for ld in store.value.loads():
        if ld.buf.uid == dst_uid and ld.index != store.index:
            return False
    return all(not isinstance(a, IValue) for a in store.index.atoms())


class _CopyElider(StmtMutator):
    """Writes a kernel's result straight into the buffer a later copy would fill (see ``elide_copies``)."""

    def __init__(self, read_counts: dict[int, int], program: Program) -> None:
        self.read_counts = read_counts
        self.program = program

    def block(self, stmts: Sequence[Stmt]) -> list[Stmt]:
        stmts = super().block(stmts)  # nested blocks first
        out: list[Stmt | None] = list(stmts)
        for ci, c in enumerate(stmts):
            if not isinstance(c, Copy) or c.src.kind != "temp" or self.read_counts.get(c.src.uid, 0) != 1:
                continue
            if c.dst.size != c.src.size or c.dst.dtype != c.src.dtype:
                continue
            for ki in range(ci - 1, -1, -1):
                k = stmts[ki]
                if isinstance(k, Kernel) and c.src in k.writes():
                    between = stmts[ki + 1:ci]
                    clash = any(c.dst.uid in (_reads(s) | _writes(s)) or c.src.uid in _writes(s) for s in between)
                    if not clash and _inplace_ok(k, c.dst.uid):
                        (store,) = k.stores
                        k.stores = [Store(c.dst, store.index, store.value)]
                        out[ci] = None
                        if c.src in self.program.temps:
                            self.program.temps.remove(c.src)
                    break
                if c.src.uid in _writes(k) or c.src.uid in _reads(k):
                    break
        return [s for s in out if s is not None]


def elide_copies(program: Program) -> Program:
    program.body = _CopyElider(_all_reads(program.body), program).block(program.body)
    return program


# ----------------------------------------------------------------------------------------------
# fold_gemm_updates: ``w = w - c * (A @ B)`` becomes one gemm, ``w = -c * A @ B + 1 * w``

_FOLDABLE = ("float32", "float64")


def _scaled_product(value: Expr, product_uid: int, dst_uid: int, i0: ILin) -> float | None:
    """``c`` when ``value`` is ``dst[i0] - c * product[i0]`` (or ``+ c * product[i0]``: ``-c``)."""
    if not isinstance(value, Apply) or value.op not in ("sub", "add") or len(value.args) != 2:
        return None
    first, second = value.args
    if not (isinstance(first, Load) and first.buf.uid == dst_uid and first.index == i0):
        return None
    if not isinstance(second, Apply) or second.op != "mul":
        return None
    factors = second.args
    consts = [f for f in factors if isinstance(f, Const)]
    loads = [f for f in factors if isinstance(f, Load) and f.buf.uid == product_uid and f.index == i0]
    if len(consts) != 1 or len(loads) != 1:
        return None
    c = float(consts[0].value)
    return c if value.op == "sub" else -c


def _fold_into(mm: MatMul, k: Stmt, read_counts: dict[int, int]) -> MatMul | None:
    """The gemm that does ``mm`` and the update ``k`` at once, if ``k`` is such an update of ``mm.out``."""
    if not isinstance(k, Kernel) or k.reduce is not None or len(k.stores) != 1:
        return None
    (store,) = k.stores
    t, dst = mm.out, store.buf
    i0 = ivar("i0")
    if k.domain != (t.size,) or store.index != i0 or dst.size != t.size or dst.dtype != t.dtype:
        return None
    if t.kind != "temp" or read_counts.get(t.uid, 0) != 1 or dst.uid in (mm.a.uid, mm.b.uid, t.uid):
        return None
    c = _scaled_product(store.value, t.uid, dst.uid, i0)
    if c is None:
        return None
    return MatMul(mm.name, dst, mm.a, mm.b, mm.batch, mm.m, mm.n, mm.k, mm.ta, mm.tb, mm.a_batch_stride,
                  mm.b_batch_stride, alpha=-c, beta=1.0, convolution=mm.convolution,
                  plan=mm.plan).placed_like(mm)


class _GemmUpdateFolder(StmtMutator):
    """Folds ``w - c * P`` into the gemm computing ``P`` (see ``fold_gemm_updates``)."""

    def __init__(self, read_counts: dict[int, int], program: Program) -> None:
        self.read_counts = read_counts
        self.program = program

    def block(self, stmts: Sequence[Stmt]) -> list[Stmt]:
        out: list[Stmt | None] = list(super().block(stmts))  # nested blocks first
        for i, mm in enumerate(out):
            if not isinstance(mm, MatMul) or mm.alpha != 1.0 or mm.beta != 0.0 or mm.out.dtype.name not in _FOLDABLE:
                continue
            for j in range(i + 1, len(out)):
                later = out[j]
                if later is None:
                    continue
                fused = _fold_into(mm, later, self.read_counts)
                if fused is not None:
                    out[i], out[j] = None, fused  # the gemm moves to the update's place: its operands are unchanged
                    if mm.out in self.program.temps:
                        self.program.temps.remove(mm.out)
                    break
                if {mm.a.uid, mm.b.uid, mm.out.uid} & _writes(later) or mm.out.uid in _reads(later):
                    break
        return [s for s in out if s is not None]


def fold_gemm_updates(program: Program) -> Program:
    """Fold an element-wise ``w - c * P`` (an SGD step) into the gemm computing ``P`` when ``P`` is
    read nowhere else: BLAS then accumulates into ``w`` (alpha ``-c``, beta 1), which saves a pass
    over ``w`` and the buffer for ``P``."""
    program.body = _GemmUpdateFolder(_all_reads(program.body), program).block(program.body)
    return program
