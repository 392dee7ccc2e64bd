"""Collectives between the replicas of one process in native code: a barrier and the exchange, no GIL.

A replicated program's engines (one per replica, each on its own thread) call the collective host
function (:data:`~popjit.codegen.engine.COLLECTIVE_CALLEE`) with four int64 arguments: the
collective's number in the program, the addresses of its destination and source buffers, and a
*context*, an engine parameter (``P[engine_source.context_slot]``) the run sets for each replica.
The host function's entry point (:func:`entry`) is native code, built here once per process:

- context 0 (one replica, replicas spanning several instances, a run that chose the Python path):
  it calls the Python host function, which does the exchange with NumPy under the GIL;
- otherwise the context is the address of this replica's words (:class:`Exchange`). The replica
  writes its source's and destination's addresses into the run's tables and arrives at a barrier.
  Then it does its part from the other replicas' buffers, as its plan row says
  (:func:`plan_rows`): an all-reduce's part of the elements, reduced and copied into every group
  member's destination (so the group reduces each element once); a reduce-scatter's own part;
  the runs of elements of a data-moving collective (``gather``, ``all_to_all``), which
  :func:`copy_runs` derives from ``collective_result`` itself applied to indices. It arrives at a
  second barrier before it returns, so no replica touches a buffer another one still uses. The
  arithmetic is that of :func:`~popjit.ops.collectives.collective_result`, element by element in
  group order, bit for bit.

The barrier is a counter every replica adds one to (an atomic add) and waits to reach a multiple of
the replica count: it spins with ``pause`` for a while when that paid off lately, then gives its core
away (``sched_yield``), then sleeps in short naps. When the run's stop flag is set (a failing replica,
Ctrl-C) a replica waiting at the first barrier withdraws and its engine stops, so nothing waits for a
replica that will never come. Addresses are never part of cached code: they reach the engine through
its ``P`` array at run time.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from llvmlite import ir
from numba.core.compiler_lock import global_compiler_lock
from numba.core.registry import cpu_target

from popjit import dtypes
from popjit.codegen.engine import collectives, storage_dtype
from popjit.codegen.native import _smin
from popjit.ir.loop import Collective, Program
from popjit.kernels.threads import available_cores
from popjit.ops.collectives import REDUCTIONS, statement_result

_I1, _I16, _I32, _I64 = (ir.IntType(n) for n in (1, 16, 32, 64))
_PTR = ir.IntType(8).as_pointer()

#: A replica's context words (int64): the run's shared words, its stop flag, this replica's local index,
#: the number of replicas, the barriers it passed, its plan rows, how long a waiter spins (pauses) and yields
#: (calls), how many waits it will not spin in, and how many the next spin in vain skips (see :data:`SPIN`).
CONTEXT = SHARED, STOP, REPLICA, COUNT, PASSED, PLANS, SPINS, YIELDS, SKIP, BACKOFF = range(10)
CONTEXT_WORDS = 16  # why more: replicas' words on cache lines of their own (each replica writes its own)
#: The run's shared words: the barrier's arrival counter (alone on its cache line), then the table of each
#: replica's source address, then that of each replica's destination address.
COUNTER, TABLE = 0, 8
#: A collective's plan row for one replica: reduce (elements ``[LO, HI)`` of every group member's source,
#: reduced by the function at ``FN``: with ``SHARE`` into the same elements of every member's destination, else
#: into this replica's from its start, then zeros up to ``SIZE``) or copy (``NRUNS`` runs at ``RUNS``).
PLAN = KIND, FN, START, GROUP, LO, HI, SHARE, SIZE, RUNS, NRUNS, ITEMSIZE = range(11)
REDUCE, COPY = 0, 1
#: Elements a reduction combines at a time (every member's into a block of the destination that stays in
#: the core's first-level cache).
BLOCK = 2048
#: An all-reduce's share of elements per replica is a multiple of this (whole cache lines).
GRAIN = 16
#: A run of a copy: (destination element, group member, source element, element count).
RUN_WORDS = 4
#: The reductions and dtypes native code computes, by code.
OPS = tuple(REDUCTIONS)
DTYPES = (dtypes.float32, dtypes.float16, dtypes.int32)

SPIN = 200
"""Pauses (about 50 ns each) a waiting replica spins before it yields its core. When the replicas have cores
of their own the others arrive while it spins, within a microsecond; when they share one (a busy host, or
the scheduler put them together) spinning only holds up the replica it waits for. So after a spin in vain
a replica waits without spinning for its next ``BACKOFF`` waits, twice as many after each such spin (up to
:data:`BACKOFF_MAX`), and a spin that caught the others starts over. With more replicas than cores a waiter
never spins."""
BACKOFF_MAX = 256
YIELD = 20000
"""``sched_yield`` calls a waiting replica makes before it sleeps in short naps (:data:`NAP_US`)."""
NAP_US = 50


# ----------------------------------------------------------------------------------------------
# What each replica does: plan rows


def supported(stmt: Collective) -> bool:
    """Whether native code performs ``stmt`` (every copy; reductions of the dtypes in :data:`DTYPES`), which
    must write a buffer other than the one it reads (others may still read its source)."""
    if stmt.dst is stmt.src:
        return False
    if stmt.op in ("gather", "all_to_all"):
        return True
    reduce = stmt.reduce if stmt.op == "reduce_scatter" else stmt.op
    return stmt.src.dtype in DTYPES and reduce in OPS


def plan_rows(stmt: Collective, position: int, start: int, group: int) -> tuple[list[int], np.ndarray | None]:
    """The plan row of ``stmt`` for the replica at ``position`` of its group of ``group`` local replicas
    from ``start`` (see :data:`PLAN`; ``RUNS`` left 0), and its copy runs (None for a reduction)."""
    n = int(np.prod(stmt.operand_shape, dtype=np.int64))
    itemsize = storage_dtype(stmt.src.dtype).itemsize
    row = [0] * len(PLAN)
    row[START], row[GROUP], row[SIZE], row[ITEMSIZE] = start, group, stmt.dst.size, itemsize
    if stmt.op in ("gather", "all_to_all"):
        runs = copy_runs(stmt, position, group)
        row[KIND], row[NRUNS] = COPY, len(runs)
        return row, runs
    if stmt.op == "reduce_scatter":  # this replica's part
        part, share = stmt.dst.size, 0
    else:  # why share: each member reduces a part of the result for them all (once, not once per member)
        part, share = -(-n // (group * GRAIN)) * GRAIN, 1
    lo, hi = min(position * part, n), min((position + 1) * part, n)
    reduce = stmt.reduce if stmt.op == "reduce_scatter" else stmt.op
    row[KIND], row[FN], row[LO], row[HI], row[SHARE] = REDUCE, reduction(reduce, stmt.src.dtype), lo, hi, share
    return row, None


def copy_runs(stmt: Collective, position: int, group: int) -> np.ndarray:
    """The runs of contiguous elements (:data:`RUN_WORDS` each) that make up the result of a data-moving
    collective at ``position``: found by applying the collective itself to each member's number and to
    the element indices, so they follow :func:`~popjit.ops.collectives.collective_result` exactly."""
    shape = stmt.operand_shape
    n = int(np.prod(shape, dtype=np.int64))
    member = statement_result(stmt, [np.full(shape, k, np.int64) for k in range(group)], position).reshape(-1)
    offset = statement_result(stmt, [np.arange(n, dtype=np.int64).reshape(shape)] * group, position).reshape(-1)
    if not member.size:
        return np.zeros((0, RUN_WORDS), np.int64)
    breaks = np.flatnonzero((np.diff(member) != 0) | (np.diff(offset) != 1)) + 1
    starts = np.concatenate([[0], breaks])
    lengths = np.diff(np.concatenate([starts, [member.size]]))
    return np.ascontiguousarray(np.stack([starts, member[starts], offset[starts], lengths], axis=1), dtype=np.int64)


@dataclass
class Plans:
    """Every local replica's plan rows for a program's collectives (``rows[r]``: ``[collectives, PLAN]``), and
    the copy runs they point to (kept alive here)."""

    rows: list[np.ndarray]
    runs: list[np.ndarray]


def make_plans(program: Program, count: int) -> Plans | None:
    """The plans of ``program`` run as ``count`` replicas of one process, or None when native code does not
    perform one of its collectives."""
    table = collectives(program)
    if not all(supported(s) for s in table):
        return None
    rows, kept = [], []
    for r in range(count):
        mine = np.zeros((max(len(table), 1), len(PLAN)), np.int64)
        for i, stmt in enumerate(table):
            group = stmt.group or count
            start = r - r % group
            row, runs = plan_rows(stmt, r - start, start, group)
            if runs is not None:
                kept.append(runs)
                row[RUNS] = runs.ctypes.data
            mine[i] = row
        rows.append(mine)
    return Plans(rows, kept)


_PLANS: weakref.WeakKeyDictionary[Program, dict[int, Plans | None]] = weakref.WeakKeyDictionary()
_PLANS_LOCK = threading.Lock()


def plans_for(program: Program, count: int) -> Plans | None:
    """:func:`make_plans`, made once per program and replica count."""
    with _PLANS_LOCK:
        per_count = _PLANS.setdefault(program, {})
        if count not in per_count:
            per_count[count] = make_plans(program, count)
        return per_count[count]


class Exchange:
    """The native state of one replicated run: the shared words (:data:`COUNTER`, :data:`TABLE`) and each
    replica's context words (:data:`CONTEXT`). ``stop``: the run's stop flag, which ends the waits at the
    first barrier of a collective."""

    def __init__(self, plans: Plans, count: int, stop: np.ndarray) -> None:
        self.plans = plans
        self.stop = stop
        self.shared = np.zeros(TABLE + 2 * count, np.int64)
        self.contexts = np.zeros((count, CONTEXT_WORDS), np.int64)
        # why no spinning with more replicas than cores: a spinner holds up the replica it waits for
        spins = SPIN if count <= available_cores() else 0
        for r in range(count):
            self.contexts[r, [SHARED, STOP, REPLICA, COUNT, PLANS, SPINS, YIELDS, BACKOFF]] = [
                self.shared.ctypes.data, stop.ctypes.data, r, count, plans.rows[r].ctypes.data, spins, YIELD, 1]

    def context(self, replica: int) -> int:
        """The address of ``replica``'s context words (the engine's collective context)."""
        return self.contexts.ctypes.data + replica * self.contexts.strides[0]


# ----------------------------------------------------------------------------------------------
# The native entry point


_BUILT: dict[Any, tuple[Any, int]] = {}  # what was built -> (its code library, its function's address)
ENTRY = "popjit_collective"


def _built(key: Any, name: str, write: Callable[[ir.Module], ir.Function]) -> int:
    """The address of the function ``write`` adds to a new module, compiled on first use in the process.
    why per process: the code is small (50 ms a module) and may hold this process's addresses."""
    with global_compiler_lock:  # why: Numba's code libraries are built under its lock (one per process)
        if key not in _BUILT:
            module = cpu_target.target_context.create_module(name)
            function = write(module)
            library = cpu_target.target_context.codegen().create_library(name)
            library.add_ir_module(module)
            library.finalize()
            _BUILT[key] = (library, library.get_pointer_to_function(function.name))
        return _BUILT[key][1]


def entry(python_entry: int) -> int:
    """The address of the native collective entry point, which hands context-0 calls to ``python_entry``
    (the Python host function's C entry point)."""
    return _built(("entry", python_entry), ENTRY, lambda module: _EntryBuilder(module, python_entry).build())


def reduction(op: str, dtype: dtypes.DType) -> int:
    """The address of ``void reduce(i8 *table, i64 start, i64 group, i64 lo, i64 hi, i8 *dst)`` for ``op`` (one
    of :data:`OPS`) in ``dtype`` (one of :data:`DTYPES`): ``dst[i - lo]`` = the sources of group members
    ``start..start+group-1`` (``table`` holds every replica's) at ``i``, combined in group order as NumPy's
    ufunc combines them (then divided by the group size for ``mean``)."""
    return _built((op, dtype.name), f"{ENTRY}.{op}.{dtype.short}", lambda module: _reduction(module, op, dtype))


def _load(builder: ir.IRBuilder, base: ir.Value, index: Any, llty: ir.Type = _I64) -> ir.Value:
    """``base[index]`` for ``base`` a pointer (any type) to ``llty`` elements."""
    pointer = builder.bitcast(base, llty.as_pointer())
    return builder.load(builder.gep(pointer, [index if isinstance(index, ir.Value) else _I64(index)]))


def _word_pointer(builder: ir.IRBuilder, base: ir.Value, index: Any) -> ir.Value:
    """A pointer to ``base[index]`` for ``base`` a pointer (any type) to int64 words."""
    at = index if isinstance(index, ir.Value) else _I64(index)
    return builder.gep(builder.bitcast(base, _I64.as_pointer()), [at])


def _address(builder: ir.IRBuilder, value: ir.Value) -> ir.Value:
    return builder.inttoptr(value, _PTR)


def _counted(builder: ir.IRBuilder, start: ir.Value, stop: ir.Value, body: Callable[[ir.Value], None]) -> None:
    """``for i in range(start, stop): body(i)`` (int64)."""
    function = builder.function
    head, inner, done = (function.append_basic_block(n) for n in ("for", "for.body", "for.end"))
    before = builder.block
    builder.branch(head)
    builder.position_at_end(head)
    i = builder.phi(_I64)
    i.add_incoming(start, before)
    builder.cbranch(builder.icmp_signed("<", i, stop), inner, done)
    builder.position_at_end(inner)
    body(i)
    i.add_incoming(builder.add(i, _I64(1)), builder.block)
    builder.branch(head)
    builder.position_at_end(done)


class _Element:
    """How the values of one dtype combine, as NumPy's ufuncs combine them (``storage``: the type in memory)."""

    def __init__(self, dtype: dtypes.DType) -> None:
        self.dtype = dtype
        self.storage = {dtypes.float32: ir.FloatType(), dtypes.float16: _I16, dtypes.int32: _I32}[dtype]

    def combine(self, b: ir.IRBuilder, op: str, x: ir.Value, y: ir.Value) -> ir.Value:
        """``REDUCTIONS[op](x, y)`` (``mean``: the sum)."""
        if self.dtype == dtypes.int32:
            if op in ("max", "min"):
                return b.select(b.icmp_signed(">" if op == "max" else "<", x, y), x, y)
            return b.mul(x, y) if op == "prod" else b.add(x, y)
        if op in ("max", "min"):
            return self._extremum(b, op, x, y)
        fx, fy = self._float(b, x), self._float(b, y)
        return self._stored(b, b.fmul(fx, fy) if op == "prod" else b.fadd(fx, fy))

    def _extremum(self, b: ir.IRBuilder, op: str, x: ir.Value, y: ir.Value) -> ir.Value:
        """NumPy's ``maximum``/``minimum``: ``x`` when it is NaN or wins, else ``y``. Ties keep ``y`` in float32
        (the SIMD loops) and ``x`` in float16 (the half loop compares with ``>=``), so signed zeros match."""
        fx, fy = self._float(b, x), self._float(b, y)
        cmp = {"max": ">", "min": "<"}[op] + ("=" if self.dtype == dtypes.float16 else "")
        wins = b.or_(b.fcmp_unordered("uno", fx, fx), b.fcmp_ordered(cmp, fx, fy))
        return b.select(wins, x, y)

    def divide(self, b: ir.IRBuilder, x: ir.Value, n: ir.Value) -> ir.Value:
        """``x`` divided by the group size ``n`` as ``mean`` does: true division for floats, floor division for ints."""
        if self.dtype == dtypes.int32:
            d = b.trunc(n, _I32)
            q, r = b.sdiv(x, d), b.srem(x, d)
            return b.sub(q, b.zext(b.icmp_signed("<", r, _I32(0)), _I32))
        return self._stored(b, b.fdiv(self._float(b, x), b.sitofp(n, ir.FloatType())))

    def _float(self, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        if self.dtype == dtypes.float16:
            return b.fpext(b.bitcast(x, ir.HalfType()), ir.FloatType())
        return x

    def _stored(self, b: ir.IRBuilder, f: ir.Value) -> ir.Value:
        """A float32 result in memory's type (float16: rounded once, to nearest even, as NumPy rounds it)."""
        if self.dtype == dtypes.float16:
            return b.bitcast(b.fptrunc(f, ir.HalfType()), _I16)
        return f


def _reduction(module: ir.Module, op: str, dtype: dtypes.DType) -> ir.Function:
    """Write :func:`reduction`'s function into ``module``: block by block (:data:`BLOCK`), the first member's
    elements copied, each other member's combined in, then divided for ``mean``."""
    element = _Element(dtype)
    function = ir.Function(module, ir.FunctionType(ir.VoidType(), [_PTR, _I64, _I64, _I64, _I64, _PTR]),
                           f"{ENTRY}.{op}.{dtype.short}")
    table, start, group, lo, hi, out = function.args
    b = ir.IRBuilder(function.append_basic_block("entry"))
    storage = element.storage.as_pointer()

    def at(pointer: ir.Value, i: ir.Value) -> ir.Value:
        return b.load(b.gep(pointer, [i]))

    def block(j: ir.Value) -> None:
        first = b.add(lo, b.mul(j, _I64(BLOCK)))
        count = _smin(b, _I64(BLOCK), b.sub(hi, first))
        dst = b.gep(b.bitcast(out, storage), [b.sub(first, lo)])

        def source(k: ir.Value) -> ir.Value:
            """Member ``k``'s source from the block's first element."""
            return b.gep(b.inttoptr(_load(b, table, b.add(start, k)), storage), [first])

        def elementwise(value: Callable[[ir.Value], ir.Value]) -> None:
            """``dst[i] = value(i)`` over the block."""
            _counted(b, _I64(0), count, lambda i: b.store(value(i), b.gep(dst, [i])))

        src = source(_I64(0))
        elementwise(lambda i: at(src, i))

        def member(k: ir.Value) -> None:
            src = source(k)
            elementwise(lambda i: element.combine(b, op, at(dst, i), at(src, i)))
        _counted(b, _I64(1), group, member)
        if op == "mean":
            elementwise(lambda i: element.divide(b, at(dst, i), group))

    blocks = b.sdiv(b.add(b.sub(hi, lo), _I64(BLOCK - 1)), _I64(BLOCK))
    _counted(b, _I64(0), blocks, block)
    b.ret_void()
    return function


class _EntryBuilder:
    """Writes ``i64 popjit_collective(i64 index, i64 dst, i64 src, i64 context)`` and its helpers."""

    def __init__(self, module: ir.Module, python_entry: int) -> None:
        self.module = module
        self.python_entry = python_entry
        self.x86 = module.triple.startswith(("x86_64", "i386", "i686"))

    def build(self) -> ir.Function:
        fnty = ir.FunctionType(_I64, [_I64] * 4)
        function = ir.Function(self.module, fnty, ENTRY)
        index, dst, src, context = function.args
        b = ir.IRBuilder(function.append_basic_block("entry"))
        with b.if_then(b.icmp_signed("==", context, _I64(0)), likely=False):
            python = b.inttoptr(_I64(self.python_entry), fnty.as_pointer())
            b.ret(b.call(python, [index, dst, src, context]))
        ctx = _address(b, context)
        shared = _address(b, _load(b, ctx, SHARED))
        table = b.bitcast(_word_pointer(b, shared, TABLE), _PTR)
        destinations = b.bitcast(_word_pointer(b, table, _load(b, ctx, COUNT)), _PTR)
        me = _load(b, ctx, REPLICA)
        b.store(src, _word_pointer(b, table, me))
        b.store(dst, _word_pointer(b, destinations, me))
        self.leave_unless(b, b.call(self.barrier(abortable=True), [ctx]))
        plan = _word_pointer(b, _address(b, _load(b, ctx, PLANS)), b.mul(index, _I64(len(PLAN))))
        with b.if_else(b.icmp_signed("==", _load(b, plan, KIND), _I64(REDUCE))) as (reduce, copy):
            with reduce:
                self.reduce(b, plan, table, destinations, me, _address(b, dst))
            with copy:
                self.copy(b, plan, table, _address(b, dst))
        b.call(self.barrier(abortable=False), [ctx])
        b.ret(_I64(0))
        return function

    @staticmethod
    def leave_unless(b: ir.IRBuilder, passed: ir.Value) -> None:
        with b.if_then(b.not_(passed), likely=False):
            b.ret(_I64(1))

    def declare(self, name: str, returns: ir.Type, arguments: list[ir.Type]) -> ir.Function:
        if name in self.module.globals:
            return self.module.globals[name]
        return ir.Function(self.module, ir.FunctionType(returns, arguments), name)

    def barrier(self, abortable: bool) -> ir.Function:
        """``i1 barrier(i8 *context)``: arrive, wait for every replica. A waiter spins (``pause``) up to ``SPINS``
        times unless it skips spinning this time (:data:`SPIN`), then yields its core ``YIELDS`` times, then naps.

        ``abortable``: when the stop flag is set the waiter withdraws its arrival (a compare-and-swap, so the
        barrier either completes for every replica or for none) and the result is 0. why: a replica that
        passed may read and write the others' buffers, which a replica that stopped would free. The barrier
        after the exchange waits regardless: every replica that passed the first one comes."""
        name = f"{ENTRY}.{'arrive' if abortable else 'leave'}"
        if name in self.module.globals:
            return self.module.globals[name]
        function = ir.Function(self.module, ir.FunctionType(_I1, [_PTR]), name)
        function.linkage = "internal"
        ctx = function.args[0]
        names = ("entry", "waits", "wait", "check", "pause", "idle", "yield", "nap", "done", "passed")
        entry_block, waits, wait, check, pause, idle, yielding, nap, done, passed = map(function.append_basic_block,
                                                                                         names)
        b = ir.IRBuilder(entry_block)
        passes_pointer = _word_pointer(b, ctx, PASSED)
        passes = b.add(b.load(passes_pointer), _I64(1))
        b.store(passes, passes_pointer)
        target = b.mul(passes, _load(b, ctx, COUNT))
        counter = _word_pointer(b, _address(b, _load(b, ctx, SHARED)), COUNTER)
        yields = _load(b, ctx, YIELDS)
        arrived = b.atomic_rmw("add", counter, _I64(1), "seq_cst")
        b.cbranch(b.icmp_signed(">=", b.add(arrived, _I64(1)), target), passed, waits)  # the last to arrive
        b.position_at_end(waits)
        skip_pointer, backoff_pointer = _word_pointer(b, ctx, SKIP), _word_pointer(b, ctx, BACKOFF)
        skip = b.load(skip_pointer)
        skipping = b.icmp_signed(">", skip, _I64(0))
        spins = b.select(skipping, _I64(0), _load(b, ctx, SPINS))
        b.store(b.select(skipping, b.sub(skip, _I64(1)), skip), skip_pointer)
        b.branch(wait)
        b.position_at_end(wait)
        tries = b.phi(_I64)
        tries.add_incoming(_I64(0), waits)
        seen = b.load_atomic(counter, "acquire", 8)
        b.cbranch(b.icmp_signed(">=", seen, target), done, check)
        b.position_at_end(check)
        if abortable:
            withdraw = function.append_basic_block("withdraw")
            stop = _word_pointer(b, _address(b, _load(b, ctx, STOP)), 0)
            b.cbranch(b.icmp_signed("!=", b.load_atomic(stop, "monotonic", 8), _I64(0)), withdraw, pause)
            b.position_at_end(withdraw)
            swapped = b.cmpxchg(counter, seen, b.sub(seen, _I64(1)), "seq_cst", "seq_cst")
            with b.if_then(b.extract_value(swapped, 1)):
                b.ret(_I1(0))
            tries.add_incoming(tries, b.block)
            b.branch(wait)  # someone arrived meanwhile: look again
        else:
            b.branch(pause)
        b.position_at_end(pause)
        with b.if_else(b.icmp_signed("<", tries, spins)) as (spinning, waiting):
            with spinning:
                if self.x86:
                    b.call(self.declare("llvm.x86.sse2.pause", ir.VoidType(), []), [])
            with waiting:
                b.cbranch(b.icmp_signed("<", tries, b.add(spins, yields)), yielding, nap)
                b.position_at_end(yielding)
                b.call(self.declare("sched_yield", _I32, []), [])
                b.branch(idle)
                b.position_at_end(nap)
                b.call(self.declare("usleep", _I32, [_I32]), [_I32(NAP_US)])
                b.branch(idle)
                b.position_at_end(idle)
        tries.add_incoming(b.add(tries, _I64(1)), b.block)
        b.branch(wait)
        b.position_at_end(done)
        with b.if_then(b.icmp_signed(">", spins, _I64(0))):
            caught = b.icmp_signed("<=", tries, spins)
            backoff = b.load(backoff_pointer)
            b.store(b.select(caught, _I64(0), backoff), skip_pointer)
            b.store(b.select(caught, _I64(1), _smin(b, b.mul(backoff, _I64(2)), _I64(BACKOFF_MAX))), backoff_pointer)
        b.branch(passed)
        b.position_at_end(passed)
        b.ret(_I1(1))
        return function

    def reduce(self, b: ir.IRBuilder, plan: ir.Value, table: ir.Value, destinations: ir.Value, me: ir.Value,
               dst: ir.Value) -> None:
        """Call the plan's reduction (:func:`reduction`); then, sharing, copy its elements to the other members'
        destinations, else zero this destination past them."""
        start, group, lo, hi = (_load(b, plan, k) for k in (START, GROUP, LO, HI))
        itemsize = _load(b, plan, ITEMSIZE)
        share = b.icmp_signed("!=", _load(b, plan, SHARE), _I64(0))
        offset = b.select(share, b.mul(lo, itemsize), _I64(0))
        fnty = ir.FunctionType(ir.VoidType(), [_PTR, _I64, _I64, _I64, _I64, _PTR])
        b.call(b.inttoptr(_load(b, plan, FN), fnty.as_pointer()), [table, start, group, lo, hi, b.gep(dst, [offset])])
        done = b.mul(b.sub(hi, lo), itemsize)
        with b.if_else(share) as (sharing, alone):
            with sharing:
                memcpy = self.module.declare_intrinsic("llvm.memcpy", [_PTR, _PTR, _I64])

                def member(k: ir.Value) -> None:
                    with b.if_then(b.icmp_signed("!=", k, me)):
                        other = _address(b, _load(b, destinations, k))
                        b.call(memcpy, [b.gep(other, [offset]), b.gep(dst, [offset]), done, _I1(0)])
                _counted(b, start, b.add(start, group), member)
            with alone:
                rest = b.sub(b.mul(_load(b, plan, SIZE), itemsize), done)
                memset = self.module.declare_intrinsic("llvm.memset", [_PTR, _I64])
                with b.if_then(b.icmp_signed(">", rest, _I64(0))):
                    b.call(memset, [b.gep(dst, [done]), ir.IntType(8)(0), rest, _I1(0)])

    def copy(self, b: ir.IRBuilder, plan: ir.Value, table: ir.Value, dst: ir.Value) -> None:
        """Copy the plan's runs from the group's sources into ``dst``."""
        start, itemsize = _load(b, plan, START), _load(b, plan, ITEMSIZE)
        runs = _address(b, _load(b, plan, RUNS))
        memcpy = self.module.declare_intrinsic("llvm.memcpy", [_PTR, _PTR, _I64])

        def run(k: ir.Value) -> None:
            base = b.mul(k, _I64(RUN_WORDS))
            to, member, offset, length = (_load(b, runs, b.add(base, _I64(w))) for w in range(RUN_WORDS))
            source = _address(b, _load(b, table, b.add(start, member)))
            b.call(memcpy, [b.gep(dst, [b.mul(to, itemsize)]), b.gep(source, [b.mul(offset, itemsize)]),
                            b.mul(length, itemsize), _I1(0)])
        _counted(b, _I64(0), _load(b, plan, NRUNS), run)
