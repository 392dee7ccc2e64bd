"""The loop IR: flat buffers, loop nests with index expressions, and control statements.

Every tensor lives in a flat, contiguous :class:`Buffer`. A :class:`Kernel` is a loop nest over
its ``domain`` that stores one expression per point (element-wise, possibly a fused chain), or a
reduction/scan over an extra ``rdomain``. Index expressions are integer linear combinations of
loop variables (:class:`ILin`) with floor-division, modulo, min/max and gathered values as
non-linear atoms; they are built by smart constructors that fold constants, so a transposed or
sliced load is a plain affine index.

Statements: :class:`Kernel`, :class:`MatMul`, :class:`Copy`, :class:`Repeat`, :class:`While`,
:class:`If`. A :class:`Program` is the statement list plus its buffers.

Passes, the printer, the interpreters, the access analysis and the code generator traverse the IR
with the functors at the end of this module (:class:`ExprVisitor`, :class:`ExprMutator`,
:class:`StmtVisitor`, :class:`StmtMutator`): each node class names its ``visit_*`` method.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from popjit.dtypes import DType, Shaped

# ----------------------------------------------------------------------------------------------
# Buffers


_buffer_ids = itertools.count()


class Buffer(Shaped):
    """A flat array in device memory.

    kind: ``arg`` (a function argument), ``var`` (a variable's storage), ``const`` (a constant
    baked into the executable), ``out`` (a function result handed to the host), ``temp``.
    """

    __slots__ = ("binding", "dtype", "kind", "name", "shape", "uid", "value")

    def __init__(
        self, name: str, shape: Sequence[int], dtype: DType, kind: str = "temp",
        value: np.ndarray | None = None, binding: Any = None,
    ) -> None:
        assert kind in ("arg", "var", "const", "out", "temp"), f"bad buffer kind {kind}"
        self.name = name
        self.shape = tuple(int(s) for s in shape)
        self.dtype = dtype
        self.kind = kind
        self.value = value
        self.binding = binding
        self.uid = next(_buffer_ids)

    def __repr__(self) -> str:
        return f"{self.name}:{self.type_text()}"


# ----------------------------------------------------------------------------------------------
# Index expressions


class IAtom:
    """A non-linear piece of an index expression (a loop variable, div, mod, min, max, value)."""

    visit_method: ClassVar[str]

    def key(self) -> tuple:
        raise NotImplementedError


@dataclass(frozen=True)
class IVar(IAtom):
    """A loop variable: ``i<k>`` for the domain, ``r<k>`` for the reduction domain."""

    name: str
    visit_method: ClassVar[str] = "visit_var"

    def key(self) -> tuple:
        return (0, self.name)


@dataclass(frozen=True)
class ILin:
    """``sum(coef * atom) + const``: the normal form of every index expression."""

    terms: tuple[tuple[IAtom, int], ...] = ()
    const: int = 0

    # smart constructors -------------------------------------------------------------------
    def __add__(self, other: ILin | int) -> ILin:
        other = as_index(other)
        coefs: dict[IAtom, int] = dict(self.terms)
        for atom, c in other.terms:
            coefs[atom] = coefs.get(atom, 0) + c
        terms = tuple(sorted(((a, c) for a, c in coefs.items() if c != 0), key=lambda t: t[0].key()))
        return ILin(terms, self.const + other.const)

    __radd__ = __add__

    def __sub__(self, other: ILin | int) -> ILin:
        return self + as_index(other) * -1

    def __rsub__(self, other: int) -> ILin:
        return as_index(other) + self * -1

    def __neg__(self) -> ILin:
        return self * -1

    def __mul__(self, c: int) -> ILin:
        assert isinstance(c, (int, np.integer)), f"index expressions scale by ints, not {type(c).__name__}"
        c = int(c)
        if c == 0:
            return ILin()
        return ILin(tuple((a, k * c) for a, k in self.terms), self.const * c)

    __rmul__ = __mul__

    def __floordiv__(self, c: int) -> ILin:
        c = int(c)
        assert c > 0, "index division by a positive constant only"
        if c == 1:
            return self
        if all(k % c == 0 for _, k in self.terms) and self.const % c == 0:
            return ILin(tuple((a, k // c) for a, k in self.terms), self.const // c)
        if not self.terms:
            return ILin((), self.const // c)
        return ILin(((IDiv(self, c), 1),), 0)

    def __mod__(self, c: int) -> ILin:
        c = int(c)
        assert c > 0, "index modulo by a positive constant only"
        if c == 1:
            return ILin()
        if all(k % c == 0 for _, k in self.terms):
            return ILin((), self.const % c)
        return ILin(((IMod(self, c), 1),), 0)

    # queries ----------------------------------------------------------------------------------
    @property
    def is_const(self) -> bool:
        return not self.terms

    def coef(self, atom: IAtom) -> int:
        return dict(self.terms).get(atom, 0)

    def atoms(self) -> list[IAtom]:
        """Every atom, recursively (loop variables inside div/mod, and the loads of gathered values, included)."""
        return AtomCollector().collect_index(self)

    def uses(self, var: IVar) -> bool:
        return var in self.atoms()

    def linear_in(self, var: IVar) -> bool:
        """True if ``var`` appears only as a direct linear term."""
        nested = AtomCollector()
        for a, _ in self.terms:
            nested.inside(a)
        return var not in nested.found

    def substitute(self, mapping: dict[IAtom, ILin]) -> ILin:
        """Replace atoms (normally loop variables) by index expressions."""
        return Substitute(mapping).index(self)

    def __repr__(self) -> str:
        # why: the printer is written over these classes (it imports this module)
        from popjit.ir.loop_printer import format_index

        return format_index(self)


@dataclass(frozen=True)
class IDiv(IAtom):
    x: ILin
    c: int
    visit_method: ClassVar[str] = "visit_div"

    def key(self) -> tuple:
        return (1, repr(self.x), self.c)


@dataclass(frozen=True)
class IMod(IAtom):
    x: ILin
    c: int
    visit_method: ClassVar[str] = "visit_mod"

    def key(self) -> tuple:
        return (2, repr(self.x), self.c)


@dataclass(frozen=True)
class IMin(IAtom):
    a: ILin
    b: ILin
    visit_method: ClassVar[str] = "visit_min"

    def key(self) -> tuple:
        return (3, repr(self.a), repr(self.b))


@dataclass(frozen=True)
class IMax(IAtom):
    a: ILin
    b: ILin
    visit_method: ClassVar[str] = "visit_max"

    def key(self) -> tuple:
        return (4, repr(self.a), repr(self.b))


@dataclass(frozen=True)
class IValue(IAtom):
    """The value of an integer expression used as an index (a gather's index)."""

    expr: Expr
    visit_method: ClassVar[str] = "visit_value"

    def key(self) -> tuple:
        return (5, id(self.expr), repr(self.expr))


def as_index(x: ILin | int) -> ILin:
    if isinstance(x, ILin):
        return x
    assert isinstance(x, (int, np.integer)), f"not an index: {x!r}"
    return ILin((), int(x))


def ivar(name: str) -> ILin:
    return ILin(((IVar(name), 1),), 0)


def imin(a: ILin | int, b: ILin | int) -> ILin:
    a, b = as_index(a), as_index(b)
    if a.is_const and b.is_const:
        return as_index(min(a.const, b.const))
    if a == b:
        return a
    return ILin(((IMin(a, b), 1),), 0)


def imax(a: ILin | int, b: ILin | int) -> ILin:
    a, b = as_index(a), as_index(b)
    if a.is_const and b.is_const:
        return as_index(max(a.const, b.const))
    if a == b:
        return a
    return ILin(((IMax(a, b), 1),), 0)


def iclamp(x: ILin, lo: int, hi: int) -> ILin:
    """``min(max(x, lo), hi)``: keeps a load inside its buffer."""
    return imin(imax(x, lo), hi)


def ivalue(expr: Expr) -> ILin:
    if isinstance(expr, IndexValue):
        return expr.index
    if isinstance(expr, Const):
        return as_index(int(expr.value))
    return ILin(((IValue(expr), 1),), 0)


def flat_index(idx: Sequence[ILin], strides: Sequence[int], offset: int = 0) -> ILin:
    out = as_index(offset)
    for i, s in zip(idx, strides):
        out = out + i * int(s)
    return out


def row_major_strides(shape: Sequence[int]) -> tuple[int, ...]:
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= int(d)
    return tuple(reversed(strides))


# ----------------------------------------------------------------------------------------------
# Value expressions


class Expr:
    """A scalar expression evaluated at one point of a kernel's domain."""

    dtype: DType
    visit_method: ClassVar[str]

    def children(self) -> tuple[Expr, ...]:
        return ()

    def walk(self) -> Iterator[Expr]:
        yield self
        for c in self.children():
            yield from c.walk()

    def loads(self) -> list[Load]:
        """Every load, including the loads of gathered values inside indices."""
        return LoadCollector().collect_expr(self)

    def index_values(self) -> Iterator[IndexValue]:
        for e in self.walk():
            if isinstance(e, IndexValue):
                yield e

    def substitute(self, m: dict[IAtom, ILin]) -> Expr:
        """Replace atoms (normally loop variables) in every index by index expressions."""
        return Substitute(m).expr(self)

    def __repr__(self) -> str:
        # why: the printer is written over these classes (it imports this module)
        from popjit.ir.loop_printer import format_expr

        return format_expr(self)


@dataclass(frozen=True, repr=False)
class Load(Expr):
    buf: Buffer
    index: ILin
    visit_method: ClassVar[str] = "visit_load"

    @property
    def dtype(self) -> DType:  # type: ignore[override]
        return self.buf.dtype


@dataclass(frozen=True, repr=False)
class Const(Expr):
    value: Any
    dtype: DType
    visit_method: ClassVar[str] = "visit_const"


@dataclass(frozen=True, repr=False)
class IndexValue(Expr):
    """An index expression used as a value (``range``, ``one_hot``, random counters)."""

    index: ILin
    dtype: DType
    visit_method: ClassVar[str] = "visit_index_value"


@dataclass(frozen=True, repr=False)
class Apply(Expr):
    """An element-wise registry op applied to scalar arguments."""

    op: str
    args: tuple[Expr, ...]
    dtype: DType
    attrs: tuple[tuple[str, Any], ...] = ()
    visit_method: ClassVar[str] = "visit_apply"

    def children(self) -> tuple[Expr, ...]:
        return self.args

    @property
    def attr_dict(self) -> dict[str, Any]:
        return dict(self.attrs)


def freeze_attrs(attrs: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(attrs.items()))


# ----------------------------------------------------------------------------------------------
# Statements


class Stmt:
    """A loop-IR statement.

    ``shard``: the IPU of a multi-IPU program the graph placed it on (None: with its data); ``backward``:
    part of a gradient computation. Both are for the schedule; they never change what runs.
    """

    visit_method: ClassVar[str]
    shard: int | None = None
    backward: bool = False

    def placed_like(self, other: Stmt) -> Stmt:
        """This statement, placed where ``other`` (which it replaces) was."""
        self.shard, self.backward = other.shard, other.backward
        return self

    def children(self) -> list[list[Stmt]]:
        return []

    def reads(self) -> set[Buffer]:
        """Buffers this statement itself reads (not those of nested statements)."""
        return set()

    def writes(self) -> set[Buffer]:
        """Buffers this statement itself writes."""
        return set()

    def walk(self) -> Iterator[Stmt]:
        yield self
        for block in self.children():
            for s in block:
                yield from s.walk()


@dataclass(eq=False)
class Store:
    """``buf[index] = value`` (or ``= reduce(value)`` in a reduction kernel)."""

    buf: Buffer
    index: ILin
    value: Expr


@dataclass(frozen=True)
class Reduce:
    """The reduction part of a kernel.

    ``op``: sum, prod, max, min, any, all, argmax, argmin. ``mode``: ``reduce`` stores once per
    domain point; ``scan`` (one reduction axis) stores the running value at every step, with
    ``exclusive``/``reverse`` as in ``tf.cumsum``.
    """

    op: str
    rdomain: tuple[int, ...]
    mode: str = "reduce"
    exclusive: bool = False
    reverse: bool = False


@dataclass(eq=False)
class Kernel(Stmt):
    """A loop nest: ``for i in domain: [reduce over rdomain:] store``. One compute set."""

    name: str
    domain: tuple[int, ...]
    stores: list[Store]
    reduce: Reduce | None = None
    ops: tuple[str, ...] = ()

    @property
    def size(self) -> int:
        return int(math.prod(self.domain))

    visit_method: ClassVar[str] = "visit_kernel"

    def loads(self) -> list[Load]:
        """Every load of the kernel, those of gathered values inside its store indices included."""
        found = LoadCollector()
        for s in self.stores:
            found.expr(s.value)
            found.index(s.index)
        return found.found

    def reads(self) -> set[Buffer]:
        return {ld.buf for ld in self.loads()}

    def writes(self) -> set[Buffer]:
        return {s.buf for s in self.stores}


@dataclass(eq=False)
class MatMul(Stmt):
    """``out[b] = alpha * op(a[b]) @ op(b[b]) + beta * out[b]`` for each batch; ``op`` transposes
    when ``ta``/``tb``; ``alpha`` 1 and ``beta`` 0 unless an update was folded in
    (:func:`popjit.loop.passes.fold_gemm_updates`).

    Operands are contiguous row-major matrices at ``batch * *_batch_stride`` (a stride of 0
    broadcasts one matrix over the batch).
    """

    name: str
    out: Buffer
    a: Buffer
    b: Buffer
    batch: int
    m: int
    n: int
    k: int
    ta: bool
    tb: bool
    a_batch_stride: int
    b_batch_stride: int
    alpha: float = 1.0
    beta: float = 0.0
    convolution: bool = False  # a convolution's product: planned with the convolution options
    plan: tuple[float, bool] | None = None  # its own planner options (a pipeline stage's), else the device's
    visit_method: ClassVar[str] = "visit_matmul"

    def reads(self) -> set[Buffer]:
        return {self.a, self.b} | ({self.out} if self.beta else set())

    def writes(self) -> set[Buffer]:
        return {self.out}


@dataclass(eq=False)
class Copy(Stmt):
    """``dst[:] = src[:]`` (same size)."""

    dst: Buffer
    src: Buffer
    visit_method: ClassVar[str] = "visit_copy"

    def reads(self) -> set[Buffer]:
        return {self.src}

    def writes(self) -> set[Buffer]:
        return {self.dst}


#: The collectives a :class:`Collective` performs (Graphcore's replicated all-reduce, all-gather,
#: reduce-scatter and all-to-all; ``index`` is the replica's own index).
COLLECTIVE_OPS = ("sum", "mean", "max", "min", "prod", "gather", "reduce_scatter", "all_to_all")


@dataclass(eq=False)
class Collective(Stmt):
    """An exchange between the replicas of a replicated program: ``dst`` of this replica from ``src``
    of every replica in its group (``group`` consecutive replicas; 0: all of them).

    ``op``: ``sum``/``mean``/``max``/``min``/``prod`` (all-reduce, ``dst`` shaped as ``src``), ``gather``
    (``dst[k]`` is replica k's ``src``), ``reduce_scatter`` (``src`` rank 1, reduced by ``reduce``, this
    replica's ``ceil(n/group)`` part of it, zero-padded), ``all_to_all`` (``src`` split in ``group`` parts
    along ``split_axis``, part r of every replica concatenated along ``concat_axis``). The host performs
    it while the replicas wait at a barrier (:mod:`popjit.runtime.replicas`)."""

    name: str
    op: str
    dst: Buffer
    src: Buffer
    group: int = 0
    reduce: str = "sum"
    split_axis: int = 0
    concat_axis: int = 0
    src_shape: tuple[int, ...] | None = None  # the operand's shape, when ``src`` is a buffer of another shape
    visit_method: ClassVar[str] = "visit_collective"

    @property
    def operand_shape(self) -> tuple[int, ...]:
        """The shape the collective reads ``src`` in."""
        return self.src.shape if self.src_shape is None else self.src_shape

    def reads(self) -> set[Buffer]:
        return {self.src}

    def writes(self) -> set[Buffer]:
        return {self.dst}


@dataclass(eq=False)
class Repeat(Stmt):
    """Run ``body`` a fixed number of times (Poplar ``Repeat``). ``pipeline``: ``(schedule, device
    mapping, recompute, micro-batches per weight update)`` when the iterations are a pipeline's
    micro-batches, which the IPUs overlap."""

    count: int
    body: list[Stmt]
    pipeline: tuple[str, tuple[int, ...], bool, int] | None = None
    visit_method: ClassVar[str] = "visit_repeat"

    def children(self) -> list[list[Stmt]]:
        return [self.body]


@dataclass(eq=False)
class While(Stmt):
    """Run ``cond``; while the scalar ``pred`` is true run ``body`` and ``cond`` again.

    ``max_iterations`` (``None``: unbounded) stops the loop as ``tf.while_loop`` does.
    """

    cond: list[Stmt]
    pred: Buffer
    body: list[Stmt]
    max_iterations: int | None = None
    visit_method: ClassVar[str] = "visit_while"

    def children(self) -> list[list[Stmt]]:
        return [self.cond, self.body]

    def reads(self) -> set[Buffer]:
        return {self.pred}


@dataclass(eq=False)
class If(Stmt):
    """Run ``then`` if the scalar ``pred`` is true, else ``orelse``. ``every``: ``then`` is a weight update
    taken once every that many runs (gradient accumulation), which a pipeline's estimate needs."""

    pred: Buffer
    then: list[Stmt]
    orelse: list[Stmt]
    every: int | None = None
    visit_method: ClassVar[str] = "visit_if"

    def children(self) -> list[list[Stmt]]:
        return [self.then, self.orelse]

    def reads(self) -> set[Buffer]:
        return {self.pred}


@dataclass(eq=False)
class Program:
    """A lowered function: its statements and every buffer they touch."""

    name: str
    body: list[Stmt]
    args: list[Buffer] = field(default_factory=list)  # in argument order
    outs: list[Buffer] = field(default_factory=list)  # in result order
    variables: list[Buffer] = field(default_factory=list)
    consts: list[Buffer] = field(default_factory=list)
    temps: list[Buffer] = field(default_factory=list)
    stream_in: list[Buffer] = field(default_factory=list)  # infeed elements for one execution, binding (infeed, id, k)
    stream_out: list[Buffer] = field(default_factory=list)  # outfeed values, binding (outfeed, id, k)
    # Results that alias an input buffer or another result (filled by the host, not the engine).
    out_sources: dict[int, Buffer] = field(default_factory=dict)

    def walk(self) -> Iterator[Stmt]:
        for s in self.body:
            yield from s.walk()

    def buffers(self) -> list[Buffer]:
        return [*self.args, *self.variables, *self.consts, *self.outs, *self.stream_in, *self.stream_out, *self.temps]

    def as_text(self) -> str:
        # why: the printer is written over these classes (it imports this module)
        from popjit.ir.loop_printer import print_program

        return print_program(self)

    def __str__(self) -> str:
        return self.as_text()


# ----------------------------------------------------------------------------------------------
# Traversal: functors that dispatch on the node's class (in the spirit of TVM's StmtExprFunctor)


class LoopFunctor:
    """Dispatch over loop-IR nodes: ``atom(a)``, ``expr(e)`` and ``stmt(s)`` call the method the node's
    class names in ``visit_method`` (``visit_var``, ``visit_load``, ``visit_kernel``...).

    A subclass defines the ``visit_*`` methods of the nodes it handles; any other node is a
    ``NotImplementedError`` naming the functor and the node. State a traversal needs (an environment,
    an indentation, a memory) lives on the instance. :class:`ExprVisitor` and :class:`StmtVisitor`
    walk every part by default; :class:`ExprMutator` and :class:`StmtMutator` rebuild every part.
    """

    def atom(self, a: IAtom) -> Any:
        return self._dispatch(a)

    def expr(self, e: Expr) -> Any:
        return self._dispatch(e)

    def stmt(self, s: Stmt) -> Any:
        return self._dispatch(s)

    def _dispatch(self, node: IAtom | Expr | Stmt) -> Any:
        method = getattr(self, node.visit_method, None)
        if method is None:
            raise NotImplementedError(f"{type(self).__name__} has no {node.visit_method} for {type(node).__name__}")
        return method(node)


class ExprVisitor(LoopFunctor):
    """Walks index and value expressions, visiting every atom and subexpression where it occurs
    (gathered values inside indices included). Override a ``visit_*`` and call ``super()`` to keep
    walking below it."""

    def index(self, ix: ILin) -> None:
        for a, _ in ix.terms:
            self.atom(a)

    def visit_var(self, a: IVar) -> None:
        pass

    def visit_div(self, a: IDiv | IMod) -> None:
        self.index(a.x)

    visit_mod = visit_div

    def visit_min(self, a: IMin | IMax) -> None:
        self.index(a.a)
        self.index(a.b)

    visit_max = visit_min

    def visit_value(self, a: IValue) -> None:
        self.expr(a.expr)

    def visit_load(self, e: Load) -> None:
        self.index(e.index)

    def visit_const(self, e: Const) -> None:
        pass

    def visit_index_value(self, e: IndexValue) -> None:
        self.index(e.index)

    def visit_apply(self, e: Apply) -> None:
        for x in e.args:
            self.expr(x)


class AtomCollector(ExprVisitor):
    """Every atom of an index, nested ones included, in the order met."""

    def __init__(self) -> None:
        self.found: list[IAtom] = []

    def atom(self, a: IAtom) -> None:
        self.found.append(a)
        super().atom(a)

    def collect_index(self, ix: ILin) -> list[IAtom]:
        self.index(ix)
        return self.found

    def inside(self, a: IAtom) -> list[IAtom]:
        """The atoms nested inside ``a`` (not ``a`` itself)."""
        super().atom(a)
        return self.found


class LoadCollector(ExprVisitor):
    """Every load of an expression, the loads of gathered values inside indices included."""

    def __init__(self) -> None:
        self.found: list[Load] = []

    def visit_load(self, e: Load) -> None:
        self.found.append(e)
        super().visit_load(e)

    def collect_expr(self, e: Expr) -> list[Load]:
        self.expr(e)
        return self.found


class ExprMutator(LoopFunctor):
    """Rebuilds index and value expressions through the smart constructors (which fold constants);
    a subclass overrides the parts it replaces."""

    def index(self, ix: ILin) -> ILin:
        out = as_index(ix.const)
        for a, c in ix.terms:
            out = out + self.atom(a) * c
        return out

    def store(self, s: Store) -> Store:
        return Store(s.buf, self.index(s.index), self.expr(s.value))

    def visit_var(self, a: IVar) -> ILin:
        return ILin(((a, 1),), 0)

    def visit_div(self, a: IDiv) -> ILin:
        return self.index(a.x) // a.c

    def visit_mod(self, a: IMod) -> ILin:
        return self.index(a.x) % a.c

    def visit_min(self, a: IMin) -> ILin:
        return imin(self.index(a.a), self.index(a.b))

    def visit_max(self, a: IMax) -> ILin:
        return imax(self.index(a.a), self.index(a.b))

    def visit_value(self, a: IValue) -> ILin:
        return ivalue(self.expr(a.expr))

    def visit_load(self, e: Load) -> Expr:
        return Load(e.buf, self.index(e.index))

    def visit_const(self, e: Const) -> Expr:
        return e

    def visit_index_value(self, e: IndexValue) -> Expr:
        return IndexValue(self.index(e.index), e.dtype)

    def visit_apply(self, e: Apply) -> Expr:
        return Apply(e.op, tuple(self.expr(a) for a in e.args), e.dtype, e.attrs)


class Substitute(ExprMutator):
    """Replaces atoms (normally loop variables) by index expressions, everywhere they occur."""

    def __init__(self, mapping: dict[IAtom, ILin]) -> None:
        self.mapping = mapping

    def atom(self, a: IAtom) -> ILin:
        replacement = self.mapping.get(a)
        return replacement if replacement is not None else super().atom(a)


class StmtVisitor(LoopFunctor):
    """Walks statement blocks, entering the blocks of control statements."""

    def block(self, stmts: Sequence[Stmt]) -> None:
        for s in stmts:
            self.stmt(s)

    def visit_kernel(self, s: Stmt) -> None:
        pass

    visit_matmul = visit_copy = visit_collective = visit_kernel

    def visit_repeat(self, s: Repeat) -> None:
        self.block(s.body)

    def visit_while(self, s: While) -> None:
        self.block(s.cond)
        self.block(s.body)

    def visit_if(self, s: If) -> None:
        self.block(s.then)
        self.block(s.orelse)


class StmtMutator(LoopFunctor):
    """Rebuilds statement blocks: control statements get their blocks rebuilt; a ``visit_*`` returns
    the statement to keep (itself, or a new one) or None to drop it."""

    def block(self, stmts: Sequence[Stmt]) -> list[Stmt]:
        return [t for t in (self.stmt(s) for s in stmts) if t is not None]

    def visit_kernel(self, s: Stmt) -> Stmt | None:
        return s

    visit_matmul = visit_copy = visit_collective = visit_kernel

    def visit_repeat(self, s: Repeat) -> Stmt | None:
        return Repeat(s.count, self.block(s.body), s.pipeline).placed_like(s)

    def visit_while(self, s: While) -> Stmt | None:
        return While(self.block(s.cond), s.pred, self.block(s.body), s.max_iterations).placed_like(s)

    def visit_if(self, s: If) -> Stmt | None:
        return If(s.pred, self.block(s.then), self.block(s.orelse), s.every).placed_like(s)
