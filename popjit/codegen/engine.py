"""Loop-IR program → one engine that runs the whole program natively.

    def engine(B0, B1, B2, B3, P, F, S, K):  # argument, variable, constant, result, temporary buffers
        for _ in range(P[1]):                 # Repeat: a native loop
            if S[0]:                          # Ctrl-C: stop at an iteration boundary
                return 1
            call(K[0], (B3, B0, P[2], F[0]))  # a codelet call per compute set
            call(K[1], (B1, B3))            # Copy
            split(K[2], P[3], P[4], (B2, B3, P[5]))  # a large codelet: its outer loop's P[3]
        return 0                                       # iterations over threads, >= P[4] per task

Like codelets, the engine's text depends only on the program's structure: every size, count
and constant is read from the ``P`` (int64) and ``F`` (float64) arrays, filled per program.

The engine calls its codelets and library functions by address (:mod:`popjit.kernels.link`):
``K`` holds one entry point per :class:`Callee`. why: a Numba function calling another by name
links the callee's code into its own and optimises it all again, so a program's engine cost as
much to compile as all of its codelets together (3.8 of W1's 8.5 s); called by address, the
engine compiles alone and stays cacheable on disk.
``S`` is the interrupt flag (:mod:`popjit.pipeline.interrupts`), polled at the start of every loop
iteration; the engine returns 1 when it stopped there, 0 when it ran to the end.

With floating-point traps on (:mod:`popjit.codegen.numerics`), every codelet returns a trap mask
and the engine stops at the first compute set that raised one, returning
``TRAPPED | mask | (compute set << 8)``. With stochastic rounding it takes one more array, ``R``:
the device's rounding key (two words) and a call number that each rounding codelet call advances.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from popjit import config, dtypes
from popjit.codegen.host import PREFIX as HOST_PREFIX
from popjit.codegen.implicit import ComputedOperand, plan_implicit, render_computed_product
from popjit.codegen.numerics import DEFAULT, TRAPPED, Numerics
from popjit.codegen.render import Rendered, render_kernel
from popjit.dtypes import DType
from popjit.ir.loop import Buffer, Collective, Copy, If, Kernel, MatMul, Program, Repeat, Stmt, StmtVisitor, While
from popjit.kernels.gemm_choice import (
    MR,
    depth_split,
    depth_sum_call,
    own_calls,
    own_split,
    packed_b_split,
    packing_call,
    panel_width,
    splits_depth,
    uses_own_gemm,
)
from popjit.kernels.threads import threads_to_use
from popjit.loop.interchange import chunk_rows, interchangeable
from popjit.loop.passes import column_blocks, row_consumer_scale, scatters


@dataclass(frozen=True)
class Callee:
    """One function the engine calls through ``K``: a codelet or library function by name, and what
    each argument is: ``"B3"`` (engine buffer 3), ``"int"``, ``"float"`` or ``"bool"``."""

    name: str
    kinds: tuple[str, ...]


def argument_kind(expr: str) -> str:
    """What an engine call's argument expression is (see :class:`Callee`)."""
    if expr in ("True", "False"):
        return "bool"
    if expr.startswith("F["):
        return "float"
    if expr.startswith("B"):
        return expr
    return "int"  # P[i], R[i], integer literals


@dataclass
class EngineSource:
    """Everything needed to build and call one engine."""

    source: str
    name: str
    codelets: dict[str, Rendered]
    arguments: list[Buffer]  # the engine's buffer parameters, in order
    ints: np.ndarray
    floats: np.ndarray
    library: dict[str, str] = field(default_factory=dict)  # hand-written codelets used: name -> module
    numerics: Numerics = DEFAULT
    compute_sets: list[str] = field(default_factory=list)  # a trap's compute set number -> its name
    callees: list[Callee] = field(default_factory=list)  # what K[i] calls
    body: list[Any] = field(default_factory=list)  # the statement tree (Invoke, Loop, WhileLoop, Branch)
    context_slot: int | None = None  # P[context_slot]: the collectives' context, set per replica (None: no collectives)
    unmaterialised: frozenset[int] = frozenset()  # uids of buffers no statement writes (implicit products' operands)
    scratch: list[Buffer] = field(default_factory=list)  # the engine's own temporaries, its last buffers

    @property
    def rounding_state(self) -> bool:
        """Whether the engine takes the device's stochastic-rounding state ``R``."""
        return self.numerics.sr


#: Polled at the start of every loop iteration: an interrupted run returns 1 at that boundary.
STOP_CHECK = "if S[0]: return 1"


def storage_dtype(dtype: DType) -> np.dtype:
    """How a dtype is stored in engine buffers (float16 as its uint16 bit pattern)."""
    return np.dtype(np.uint16) if dtype == dtypes.float16 else dtype.np


def matmul_codelet(dtype: DType) -> str:
    if dtype == dtypes.float32:
        return "matmul_f32"
    if dtype == dtypes.float64:
        return "matmul_f64"
    if dtype == dtypes.float16:
        return "matmul_f16"
    return "matmul_int"


@dataclass
class Invoke:
    """A call through ``K[slot]`` with argument expressions (``B3``, ``P[2]``, ``F[0]``, ``R[1]``, ``True``,
    ``0``); ``trap``: the compute set whose nonzero result stops the engine; ``rounds``: it advances
    the rounding call number ``R[2]``; ``split``: the callee runs a range ``[lo, hi)`` of a loop of
    that many iterations (two more arguments), and the engine splits the loop over threads in tasks
    of at least that many iterations (:mod:`popjit.codegen.native`); ``chunks``: about how many chunks
    per thread a split loop is cut into, when not the engine's usual number; ``planned``: cut it as for
    that many threads whatever the pool has at run time, and with one thread run the same ranges one
    after another (for a callee whose results depend on its ranges, not only on its iterations)."""

    slot: int
    args: tuple[str, ...]
    comment: str
    trap: int | None = None
    rounds: bool = False
    split: tuple[str, str] | None = None  # (trip count, iterations per task): run over ranges, on threads
    chunks: int | None = None
    planned: int | None = None


@dataclass
class Chained:
    """A split product and the element-wise kernel after it that reads its result element by element
    (:func:`~popjit.loop.passes.row_consumer_scale`), run as one split call: each task runs the product
    (``calls[0]``) on a range of its units, then the kernel (``calls[1]``) on the iterations of its
    outermost loop that read what that range wrote, while it is in the core's cache. One parallel
    region instead of two, and the kernel reads the product's result from cache, not memory.
    A unit of a product cut by rows is ``height`` rows of one ``rows``-row matrix of the batch (``panels``
    units a matrix), and a row of the result ``scale`` iterations of the kernel's outermost loop. A
    product cut by columns has a kernel whose outermost loop runs over the same blocks of columns
    (:func:`~popjit.loop.passes.column_blocks`), an iteration a unit: ``panels`` and ``rows`` are the
    blocks, ``height`` and ``scale`` 1."""

    calls: list[Invoke]
    panels: str
    height: str
    rows: str
    scale: str


@dataclass
class Loop:
    """``Repeat``: ``count`` (a ``P[i]``) iterations, polling the interrupt flag at each."""

    count: str
    body: list[Any]


@dataclass
class InterchangedLoop:
    """A ``Repeat`` of split calls whose iterations may run chunk by chunk
    (:mod:`popjit.loop.interchange`): the threads claim chunks of ``chunk`` rows of the calls'
    outermost loop of ``rows`` rows, and each runs the whole body ``count`` times on its chunk
    while it is in cache (the interrupt flag polled between chunks)."""

    count: str
    rows: str
    chunk: str
    body: list[Invoke]


@dataclass
class WhileLoop:
    """``While``: run ``cond``, stop when buffer ``pred`` holds 0 (or after ``limit`` iterations), else
    poll the interrupt flag and run ``body``."""

    cond: list[Any]
    pred: str
    limit: str | None
    body: list[Any]


@dataclass
class Branch:
    """``If``: ``then`` when buffer ``pred`` holds nonzero, else ``orelse``."""

    pred: str
    then: list[Any]
    orelse: list[Any]


#: The host function that performs a replicated program's collectives (registered by :mod:`popjit.runtime.replicas`).
#: Its arguments: the collective's number, its destination and source, and the collectives' context
#: (``P[EngineSource.context_slot]``, 0 in the program's ``P``; a replicated run gives each replica its own,
#: :mod:`popjit.codegen.collective`).
COLLECTIVE_CALLEE = HOST_PREFIX + "collective"


def collectives(program: Program) -> list[Collective]:
    """The program's collectives, numbered in this order by the engine's calls."""
    return [s for s in program.walk() if isinstance(s, Collective)]


class _Emitter(StmtVisitor):
    """Builds the engine's statement tree: a call per kernel, library calls, control flow."""

    def __init__(self, program: Program, numerics: Numerics = DEFAULT) -> None:
        self.program = program
        self.numerics = numerics
        self.compute_sets: list[str] = []
        self.ints: list[int] = []
        self.floats: list[float] = []
        self.codelets: dict[str, Rendered] = {}
        self.library: dict[str, str] = {}
        self.names: dict[int, str] = {}
        self.callees: dict[Callee, int] = {}
        # why: temporaries come from the host too, so the engine never allocates
        args = [*program.args, *program.variables, *program.consts, *program.outs, *program.stream_in,
                *program.stream_out, *program.temps]
        for k, b in enumerate(args):
            self.names[b.uid] = f"B{k}"
        self.arguments = args
        self.scratch: dict[DType, tuple[str, int]] = {}  # dtype -> (name, elements)
        self.body: list[Any] = []
        self.collective_numbers = {id(c): k for k, c in enumerate(collectives(program))}
        self.context_slot: int | None = None
        self.implicit = plan_implicit(program, numerics)
        self.units: dict[int, tuple[str, int]] = {}  # id of a product's split call -> ("rows" or "columns", per unit)

    def int(self, v: int) -> str:
        self.ints.append(int(v))
        return f"P[{len(self.ints) - 1}]"

    def float(self, v: float) -> str:
        self.floats.append(float(v))
        return f"F[{len(self.floats) - 1}]"

    def buf(self, b: Buffer) -> str:
        return self.names[b.uid]

    def scratch_space(self, dtype: DType, size: int) -> str:
        """The engine's scratch buffer of ``dtype``, at least ``size`` elements: one a dtype, as large as
        its largest use (the statements using it run one after the other). It follows the program's
        buffers (:meth:`scratch_buffers`)."""
        name, most = self.scratch.get(dtype, (f"B{len(self.arguments) + len(self.scratch)}", 0))
        self.scratch[dtype] = (name, max(most, size))
        return name

    def scratch_buffers(self) -> list[Buffer]:
        """The scratch buffers handed out, in the order of their names."""
        buffers = []
        for dtype, (name, size) in self.scratch.items():
            buffers.append(Buffer(f"scratch_{dtype.name}", (size,), dtype, "temp"))
            self.names[buffers[-1].uid] = name
        return buffers

    def nested(self, stmts: list[Stmt]) -> list[Any]:
        """The statement tree of ``stmts``."""
        outer, self.body = self.body, []
        self.block(stmts)
        inner, self.body = self.body, outer
        return inner

    def invoke(self, fn: str, args: list[str], comment: str, traps: bool = False, rounds: bool = False,
               split: tuple[int, int] | None = None, chunks: int | None = None,
               planned: int | None = None) -> None:
        """Call ``fn(*args)`` through its slot in ``K``: with ``traps`` its result stops the engine, with
        ``rounds`` it advances the rounding call number, with ``split`` (trip count, iterations per
        task) it runs on ranges of its outermost loop, on threads, cut into about ``chunks`` chunks per
        thread (when not the engine's usual number), as for ``planned`` threads when given."""
        kinds = tuple(map(argument_kind, args)) + (("int", "int") if split else ())
        slot = self.callees.setdefault(Callee(fn, kinds), len(self.callees))
        trap = None
        if traps:
            trap = len(self.compute_sets)
            self.compute_sets.append(comment)
        ranges = (self.int(split[0]), self.int(split[1])) if split else None
        self.body.append(Invoke(slot, tuple(args), comment, trap, rounds, ranges, chunks, planned))

    def block(self, stmts: Sequence[Stmt]) -> None:
        """Emit ``stmts``, each product followed by a kernel that reads its rows as one :class:`Chained` call
        where both run over ranges."""
        stmts = list(stmts)
        j = 0
        while j < len(stmts):
            self.stmt(stmts[j])
            if isinstance(stmts[j], MatMul) and j + 1 < len(stmts) and self.chain(stmts[j], stmts[j + 1]):
                j += 1
            j += 1

    def chain(self, product: MatMul, after: Stmt) -> bool:
        """Emit ``after`` chained to ``product``'s last call (just emitted) if it reads what each of that
        call's units writes as soon as it is written, and both can run over ranges; whether it did."""
        last = self.body[-1] if self.body else None
        axis, per_unit = self.units.get(id(last), (None, 0))
        # why not with traps or stochastic rounding: a trap stops the engine at its compute set, and
        # rounding numbers the calls, in the order the program makes them
        if (axis is None or id(after) in self.implicit.skipped or config.get("DISABLE_NUMBA")
                or self.numerics.traps or self.numerics.sr):
            return False
        if axis == "rows":
            kernel, scale = after, row_consumer_scale(product, after)
            panels, height, rows = -(-product.m // per_unit), per_unit, product.m
        else:
            kernel, scale = column_blocks(product, after, per_unit), 1
            panels, height, rows = product.n // per_unit, 1, product.n // per_unit
        if kernel is None or scale is None:
            return False
        assert isinstance(last, Invoke) and isinstance(kernel, Kernel)
        self.emit_kernel(kernel, parallel=True)
        call = self.body[-1]
        if call.split is None:
            return True  # why True: the kernel is emitted, after the product, as a call of its own
        self.body[-2:] = [Chained([last, call], *map(self.int, (panels, height, rows, scale)))]
        return True

    def units_of_last_call(self, axis: str, per_unit: int) -> None:
        """Note that the call just emitted runs a product over units of ``per_unit`` rows or columns (``axis``)
        of each matrix (which :meth:`chain` may chain a kernel to)."""
        self.units[id(self.body[-1])] = (axis, per_unit)

    def visit_kernel(self, s: Kernel) -> None:
        if id(s) in self.implicit.skipped:
            return  # why: its products compute what it would store (codegen/implicit.py)
        work = s.size * (int(np.prod(s.reduce.rdomain, dtype=np.int64)) if s.reduce is not None else 1)
        self.emit_kernel(s, work >= config.get("PARALLEL_MIN_ELEMENTS"))

    def emit_kernel(self, s: Kernel, parallel: bool) -> None:
        """The call of ``s``'s codelet; over ranges on threads if ``parallel`` and it can be."""
        parallel = parallel and not config.get("DISABLE_NUMBA") and not scatters(s)
        # why a range even for a kernel run whole: one codelet then serves its small sizes and its large ones,
        # which run on threads (a new batch size reuses the machine code, codegen/library.py's units)
        r = render_kernel(s, not scatters(s), self.numerics)
        self.codelets[r.func] = r
        args = [self.buf(b) for b in r.buffers] + [self.int(v) for v in r.ints] + [self.float(v) for v in r.floats]
        if r.rounding_state:
            args += ["R[0]", "R[1]", "R[2]"]
        if r.split is not None and not parallel:
            args += ["0", self.int(r.split[0])]  # the whole of its outermost loop, on this thread
        self.invoke(r.func, args, s.name, r.traps, r.rounding_state, r.split if parallel else None)

    def visit_matmul(self, s: MatMul) -> None:
        computed = self.implicit.products.get(id(s))
        if computed is not None:
            self.computed_product(s, computed)
            return
        fn = matmul_codelet(s.out.dtype)
        nums = [s.batch, s.m, s.n, s.k]
        args = [self.buf(s.out), self.buf(s.a), self.buf(s.b), *map(self.int, nums),
                str(bool(s.ta)), str(bool(s.tb)), self.int(s.a_batch_stride), self.int(s.b_batch_stride),
                self.float(s.alpha), self.float(s.beta)]
        half = s.out.dtype == dtypes.float16
        n = self.numerics
        module, split, chunks, planned = "popjit.kernels.matmul", None, None, None
        if half and (n.sr or n.nanoo):
            fn = "matmul_f16_rounded"
            args += [str(n.nanoo), str(n.sr)] + (["R[0]", "R[1]", "R[2]"] if n.sr else ["0", "0", "0"])
        elif uses_own_gemm(storage_dtype(s.out.dtype), s.batch, s.m, s.n, s.k, s.ta, s.tb):
            plan = own_split(storage_dtype(s.out.dtype).itemsize, s.batch, s.m, s.n, s.k)
            *first, (fn, args, split) = own_calls(plan, args, self.scratch_space(s.out.dtype, plan.space), self.int)
            for call in first:
                self.invoke_gemm_kernel(call, s.name)
            module = "popjit.kernels.gemm"
        elif fn in ("matmul_f32", "matmul_f64") and (parts := _blas_split(s.batch, s.m, s.n, s.k)) is not None:
            # why split over popjit's threads: no spinning BLAS threads. why planned: a BLAS call's
            # sums round differently with its shape (OpenBLAS's edge kernels), so the calls are the
            # same whatever threads the pool has when it runs
            fn, module, (split, chunks), planned = "matmul_split", "popjit.kernels.blas_split", parts, threads_to_use()
        self.library[fn] = module
        traps = bool(n.inv or n.oflo) and s.out.dtype.is_floating
        # why rounds only without traps: then the check below is the call that advances the number
        self.invoke(fn, args, s.name, rounds=half and n.sr and not traps, split=split, chunks=chunks, planned=planned)
        if split is not None and (units := _split_units(fn, s)) is not None:
            self.units_of_last_call(*units)
        if not traps:
            return
        check = "product_traps_half" if half else "product_traps_float"
        self.library[check] = "popjit.kernels.rounding"
        self.invoke(check, [self.buf(s.out), self.buf(s.a), self.buf(s.b), str(n.inv), str(n.oflo)], s.name, True,
                    half and n.sr)

    def computed_product(self, s: MatMul, a: ComputedOperand) -> None:
        """A product whose ``A`` is computed, never stored, on popjit's own gemm: ``B`` packed once, then
        the product split over threads by rows, as :func:`popjit.kernels.gemm.gemm_packed_b` is; a deep
        one cut across its depth, as :func:`popjit.kernels.gemm.gemm_depth` is."""
        deep = splits_depth(s.m, s.n, s.k)
        r = render_computed_product(a.value, s.out.dtype, a.domain, a.outer, a.transposed, deep)
        self.codelets[r.func] = r
        if deep:
            self.computed_deep_product(s, a, r)
            return
        dtype = storage_dtype(s.out.dtype)
        plan = packed_b_split(dtype.itemsize, s.batch, s.m, s.n, s.k, r.func)
        packed = self.scratch_space(s.out.dtype, plan.space)
        self.invoke_gemm_kernel(packing_call(plan, packed, self.buf(s.b), *map(self.int, (s.batch, s.n, s.k)),
                                             str(bool(s.tb)), self.int(s.b_batch_stride)), s.name)
        args = [self.buf(s.out), packed, *map(self.buf, r.buffers), *map(self.int, r.ints),
                *map(self.float, r.floats), *map(self.int, (s.batch, s.m, s.n, s.k)), self.int(a.outer_stride),
                self.float(s.alpha), self.float(s.beta)]
        self.invoke(r.func, args, s.name, split=(plan.units, plan.per_task))
        self.units_of_last_call("rows", MR)

    def computed_deep_product(self, s: MatMul, a: ComputedOperand, r: Rendered) -> None:
        """:meth:`computed_product` of a product cut across its depth: its codelet ``r`` over the chunks, one a
        task, into partial sums in the engine's scratch, then ``sum_depth`` over the rows of ``C``."""
        plan = depth_split(s.batch, s.m, s.n, s.k)
        parts = self.scratch_space(s.out.dtype, plan.space)
        batch, m, n, k, chunks = map(self.int, (s.batch, s.m, s.n, s.k, plan.chunks))
        args = [parts, self.buf(s.b), *map(self.buf, r.buffers), *map(self.int, r.ints), *map(self.float, r.floats),
                batch, m, n, k, str(bool(s.tb)), self.int(s.b_batch_stride), self.int(a.outer_stride),
                self.float(s.alpha), chunks]
        self.invoke(r.func, args, s.name, split=(plan.units, 1))
        self.invoke_gemm_kernel(depth_sum_call(plan, self.buf(s.out), parts, [batch, m, n, chunks],
                                               self.float(s.beta)), s.name)
        self.units_of_last_call("rows", 1)

    def invoke_gemm_kernel(self, call: tuple[str, list[str], tuple[int, int]], comment: str) -> None:
        """Call one of :mod:`popjit.kernels.gemm`'s kernels: (its name, its arguments, its split)."""
        fn, args, split = call
        self.library[fn] = "popjit.kernels.gemm"
        self.invoke(fn, args, comment, split=split)

    def visit_copy(self, s: Copy) -> None:
        self.library["copy"] = "popjit.kernels.copy"
        self.invoke("copy", [self.buf(s.dst), self.buf(s.src)], "copy")

    def visit_collective(self, s: Collective) -> None:
        """A call of the runtime's host function, with the collective's number in the program (see
        :func:`collectives`) and its destination and source buffers."""
        index = self.collective_numbers[id(s)]
        if self.context_slot is None:
            self.context_slot = len(self.ints)
            self.int(0)
        context = f"P[{self.context_slot}]"
        self.invoke(COLLECTIVE_CALLEE, [self.int(index), self.buf(s.dst), self.buf(s.src), context], s.name)

    def visit_repeat(self, s: Repeat) -> None:
        count = self.int(s.count)
        body = self.nested(s.body)
        if config.get("INTERCHANGE_LOOPS") and interchangeable(s) and all(map(_runs_anywhere, body)):
            self.body.append(InterchangedLoop(count, body[0].split[0], self.int(chunk_rows(s)), body))
        else:
            self.body.append(Loop(count, body))

    def visit_while(self, s: While) -> None:
        limit = None if s.max_iterations is None else self.int(s.max_iterations)
        self.body.append(WhileLoop(self.nested(s.cond), self.buf(s.pred), limit, self.nested(s.body)))

    def visit_if(self, s: If) -> None:
        self.body.append(Branch(self.buf(s.pred), self.nested(s.then), self.nested(s.orelse)))


def _blas_split(batch: int, m: int, n: int, k: int) -> tuple[tuple[int, int], int | None] | None:
    """``kernels.blas_split.blas_split`` and ``chunks_per_thread``, imported when first needed."""
    # why: the module defines Numba codelets, which touch the cache directory (and so read
    # TF_POPLAR_FLAGS) when imported: at the top, importing popjit would do that
    from popjit.kernels.blas_split import blas_split, chunks_per_thread

    split = blas_split(batch, m, n, k)
    return None if split is None else (split, chunks_per_thread(batch, m, n, k))


def _split_units(fn: str, s: MatMul) -> tuple[str, int] | None:
    """What a unit of ``s``'s split call ``fn`` computes of each matrix of its result: ``("rows", n)`` or
    ``("columns", n)``, ``n`` of them."""
    if fn == "gemm_packed_b":
        return "rows", MR
    if fn == "sum_depth":
        return "rows", 1
    if fn == "gemm_columns_packed_a":
        return "columns", panel_width(storage_dtype(s.out.dtype).itemsize)
    if fn == "matmul_split":
        # why here: as in _blas_split, which imported it already
        from popjit.kernels.blas_split import BLOCK, splits_by_rows

        return ("rows" if splits_by_rows(s.m, s.n) else "columns"), BLOCK
    return None


def _runs_anywhere(node: Any) -> bool:
    """Whether a call may run on any range of its loop at any time: split, trap-free and without a
    rounding call number (which counts calls)."""
    return isinstance(node, Invoke) and node.split is not None and node.trap is None and not node.rounds


class _PythonText:
    """Prints an engine's statement tree as a Python function (run by Numba or as plain Python)."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.loops = 0

    def emit(self, depth: int, line: str) -> None:
        self.lines.append("    " * depth + line)

    def block(self, nodes: list[Any], depth: int) -> None:
        if not nodes:
            self.emit(depth, "pass")
        for node in nodes:
            getattr(self, type(node).__name__.lower())(node, depth)

    def invoke(self, node: Invoke, depth: int) -> None:
        args = f"({', '.join(node.args)},)"
        call = f"call(K[{node.slot}], {args})" if node.split is None else \
            f"split(K[{node.slot}], {node.split[0]}, {node.split[1]}, {args})"
        comment = node.comment if node.chunks is None else f"{node.comment}, {node.chunks} chunks per thread"
        if node.planned is not None:
            comment += f", cut for {node.planned} threads"
        if node.trap is None:
            self.emit(depth, f"{call}  # {comment}")
        else:
            self.emit(depth, f"_t = {call}  # {comment}")
            self.emit(depth, f"if _t: return {TRAPPED} | _t | ({node.trap} << 8)")
        if node.rounds:
            self.emit(depth, "R[2] += 1")

    def chained(self, node: Chained, depth: int) -> None:
        """Printed as the two calls it computes the same as (the comment tells the engines apart)."""
        header = len(self.lines)
        self.block(node.calls, depth)
        self.lines[header] += "  # chained: the next call runs on what each range of this one wrote, in its task"

    def loop(self, node: Loop, depth: int) -> None:
        self.loops += 1
        self.emit(depth, f"for _r{self.loops} in range({node.count}):")
        self.emit(depth + 1, STOP_CHECK)
        self.block(node.body, depth + 1)

    def interchangedloop(self, node: InterchangedLoop, depth: int) -> None:
        """Printed as the loop it computes the same as (the comment tells the engines apart)."""
        header = len(self.lines)
        self.loop(Loop(node.count, node.body), depth)
        self.lines[header] += f"  # interchanged: chunks of {node.chunk} rows of {node.rows}"

    def whileloop(self, node: WhileLoop, depth: int) -> None:
        self.loops += 1
        n = f"_n{self.loops}"
        self.emit(depth, f"{n} = 0")
        self.emit(depth, "while True:")
        self.block(node.cond, depth + 1)
        self.emit(depth + 1, f"if not {node.pred}[0]:")
        self.emit(depth + 2, "break")
        if node.limit is not None:
            self.emit(depth + 1, f"if {n} >= {node.limit}:")
            self.emit(depth + 2, "break")
        self.emit(depth + 1, STOP_CHECK)
        self.block(node.body, depth + 1)
        self.emit(depth + 1, f"{n} += 1")

    def branch(self, node: Branch, depth: int) -> None:
        self.emit(depth, f"if {node.pred}[0]:")
        self.block(node.then, depth + 1)
        self.emit(depth, "else:")
        self.block(node.orelse, depth + 1)


def render_engine(program: Program, numerics: Numerics = DEFAULT) -> EngineSource:
    """Render ``program`` as an engine function plus the codelets it calls (``numerics``: the
    program's floating-point behaviour)."""
    em = _Emitter(program, numerics)
    em.block(program.body)
    scratch = em.scratch_buffers()
    em.arguments = [*em.arguments, *scratch]
    text = _PythonText()
    text.block(em.body, 1)
    params = ", ".join([*(em.buf(b) for b in em.arguments), "P", "F", "S", *(["R"] if numerics.sr else []), "K"])
    source = "\n".join([f"def engine({params}):", *text.lines, "    return 0", ""])
    name = "e_" + hashlib.sha256(source.encode()).hexdigest()[:20]
    source = source.replace("def engine(", f"def {name}(", 1)
    return EngineSource(source, name, em.codelets, em.arguments, np.array(em.ints, dtype=np.int64),
                        np.array(em.floats, dtype=np.float64), em.library, numerics,
                        em.compute_sets, list(em.callees), em.body, em.context_slot,
                        frozenset(b.uid for b in em.implicit.unmaterialised), scratch)
