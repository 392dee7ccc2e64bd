"""The native engine: a program's statement tree built directly as LLVM IR with llvmlite.

The engine only sequences calls (codelets, matmuls, copies) inside loops and branches, so it needs
none of Numba's machinery: building its IR by hand and compiling it takes milliseconds, where the
same function through Numba's typing and lowering took 1.5 s of every cold W1 compile. Its C
signature is::

    int64 engine(void **data, int64 *sizes, int64 *P, double *F, int64 *S, int64 *R, int64 *K)

A call the statement tree marks ``split`` runs a codelet over ranges of its outermost loop on
Numba's thread pool (``numba_parallel_for``, through a small task function per codelet that
unpacks the arguments from a stack frame and claims chunks of the loop until none is left), or
inline when one task's worth of iterations would do.

``data``/``sizes``: each buffer's address and element count; ``P``, ``F``, ``S``, ``R`` as in
:mod:`popjit.codegen.engine`; ``K``: the callees' entry points, each of which takes a pointer to
Numba's array structure for a buffer (:mod:`popjit.codegen.abi`), so the engine fills one per buffer
(no reference count: the host keeps the arrays alive for the call). The types come from Numba's
target context, the same that compiled the callees. The engine is compiled and cached with the program's
codelets, in one library (:mod:`popjit.codegen.library`).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from typing import Any

import numba
import numpy as np
from llvmlite import ir
from numba.core.registry import cpu_target

from popjit.buffers import data_addresses
from popjit.codegen.engine import Branch, Chained, EngineSource, InterchangedLoop, Invoke, Loop, WhileLoop
from popjit.codegen.host import is_host
from popjit.codegen.numerics import TRAPPED

_I64 = ir.IntType(64)
_PTR = ir.IntType(8).as_pointer()
#: What the engine reads its arguments as: counts, parameters and entry points; float parameters; flags
#: (Numba's booleans); buffer addresses.
_ELEMENT_TYPES = (_I64, ir.DoubleType(), ir.IntType(8), _PTR)
_SIGNATURE = ctypes.CFUNCTYPE(ctypes.c_int64, *[ctypes.c_void_p] * 7)

#: A split call's stack frame starts with these int64 fields, then the callee's arguments.
_FRAME_HEADER = _CALLEE, _RESULT, _NEXT, _COUNT, _CHUNK = range(5)
CHUNKS_PER_THREAD = 4
"""A split loop is cut into about this many chunks per thread (none shorter than the call's grain)."""
#: An interchanged loop's frame continues with the iteration count, the interrupt flag's address, then the calls.
_REPEATS, _STOP, _CALLS = len(_FRAME_HEADER), len(_FRAME_HEADER) + 1, len(_FRAME_HEADER) + 2


def _header(callee: ir.Value, count: ir.Value, chunk: ir.Value) -> list[ir.Value]:
    """A frame's header fields in :data:`_FRAME_HEADER` order: the result and the claim counter start at 0."""
    fields = {_CALLEE: callee, _RESULT: _I64(0), _NEXT: _I64(0), _COUNT: count, _CHUNK: chunk}
    return [fields[i] for i in _FRAME_HEADER]


#: Builds a task's work on one chunk: ``(builder, frame fields, lo, hi) -> int64 result``.
ChunkBody = Callable[[ir.IRBuilder, list[ir.Value], ir.Value, ir.Value], ir.Value]


def _call_in_frame(b: ir.IRBuilder, fields: list[ir.Value], at: int, arity: int, lo: ir.Value,
                   hi: ir.Value) -> ir.Value:
    """Call the callee at ``fields[at]`` with its ``arity`` arguments after it, on ``[lo, hi)``."""
    callee, args = fields[at], fields[at + 1:at + 1 + arity]
    fnty = ir.FunctionType(_I64, [*(a.type for a in args), _I64, _I64])
    return b.call(b.inttoptr(callee, fnty.as_pointer()), [*args, lo, hi])


def _repeated_calls(arities: list[int]) -> ChunkBody:
    """An interchanged loop's work on a chunk: the frame's iteration count times, each call in turn
    on ``[lo, hi)`` (the frame: the header, the count, the flag's address, then per call its callee
    and ``arities[i]`` arguments); the result is the OR of the calls' results."""
    def run(b: ir.IRBuilder, fields: list[ir.Value], lo: ir.Value, hi: ir.Value) -> ir.Value:
        count = fields[_REPEATS]
        before = b.block
        head, body, done = (b.append_basic_block(n) for n in ("repeat", "repeat.body", "repeat.end"))
        b.branch(head)
        b.position_at_end(head)
        r, result = b.phi(_I64), b.phi(_I64)
        r.add_incoming(_I64(0), before)
        result.add_incoming(_I64(0), before)
        b.cbranch(b.icmp_signed("<", r, count), body, done)
        b.position_at_end(body)
        total, at = result, _CALLS
        for arity in arities:
            total = b.or_(total, _call_in_frame(b, fields, at, arity, lo, hi))
            at += 1 + arity
        r.add_incoming(b.add(r, _I64(1)), b.block)
        result.add_incoming(total, b.block)
        b.branch(head)
        b.position_at_end(done)
        return result

    return run


#: A chained call's frame continues with its rows' layout (:class:`~popjit.codegen.engine.Chained`), then the calls.
_PANELS, _HEIGHT, _ROWS, _SCALE = range(len(_FRAME_HEADER), len(_FRAME_HEADER) + 4)


def _chained_calls(arities: list[int]) -> ChunkBody:
    """A chained call's work on a chunk ``[lo, hi)`` of the product's units: the product on them, then the
    kernel on the iterations reading the rows they wrote (the frame: the header, the rows' layout, then
    per call its callee and ``arities[i]`` arguments); the result is the OR of the two."""
    def run(b: ir.IRBuilder, fields: list[ir.Value], lo: ir.Value, hi: ir.Value) -> ir.Value:
        panels, height, rows, scale = (fields[i] for i in (_PANELS, _HEIGHT, _ROWS, _SCALE))

        def iteration(unit: ir.Value) -> ir.Value:  # the first row of ``unit``, in the kernel's iterations
            matrix, panel = b.sdiv(unit, panels), b.srem(unit, panels)
            return b.mul(b.add(b.mul(matrix, rows), _smin(b, b.mul(panel, height), rows)), scale)

        product = _call_in_frame(b, fields, _SCALE + 1, arities[0], lo, hi)
        kernel = _call_in_frame(b, fields, _SCALE + 2 + arities[0], arities[1], iteration(lo), iteration(hi))
        return b.or_(product, kernel)

    return run


class NativeEngine:
    """A compiled engine, called like the Python one: ``engine(*buffers, P, F, S, [R], K)``."""

    def __init__(self, src: EngineSource, address: int) -> None:
        self.name = src.name
        self.buffers = len(src.arguments)
        self._function = _SIGNATURE(address)
        self._held: dict[int, tuple[np.ndarray, int]] = {}

    def __call__(self, *args: Any, addresses: np.ndarray | None = None, sizes: np.ndarray | None = None) -> int:
        """Run on ``args`` (buffers, P, F, S, [R], K); ``addresses``: the buffers' data addresses, and
        ``sizes`` their element counts (int64), when the caller has them (read here otherwise)."""
        n = self.buffers
        buffers, (ints, floats, stop), rest = args[:n], args[n:n + 3], args[n + 3:]
        rounding = rest[0] if len(rest) == 2 else None
        callees = rest[-1]
        data = data_addresses(buffers) if addresses is None else addresses
        if sizes is None:
            sizes = buffer_sizes(buffers)
        at = self._address
        return int(self._function(data.ctypes.data, at(sizes), at(ints), at(floats), at(stop),
                                  None if rounding is None else rounding.ctypes.data, at(callees)))

    def _address(self, array: np.ndarray) -> int:
        """The address of ``array``'s data, remembered for arrays that come back run after run (the
        parameters, the callees, the stop flag). why: ``ndarray.ctypes`` takes about 1.5 us a read."""
        held = self._held.get(id(array))
        if held is None or held[0] is not array:  # why the identity: a new array may reuse a freed one's id
            if len(self._held) >= _ADDRESSES_HELD:
                self._held.clear()
            held = self._held[id(array)] = (array, array.ctypes.data)
        return held[1]


#: Arrays whose addresses an engine remembers (:meth:`NativeEngine._address`), at most.
_ADDRESSES_HELD = 32


def buffer_sizes(buffers: Sequence[np.ndarray]) -> np.ndarray:
    """The element counts of an engine's buffers, as its ``sizes`` argument takes them."""
    return np.array([b.size for b in buffers], dtype=np.int64)


def _ceil_div(builder: ir.IRBuilder, a: ir.Value, b: ir.Value) -> ir.Value:
    """``ceil(a / b)`` of positive int64 values."""
    return builder.sdiv(builder.add(a, builder.sub(b, _I64(1))), b)


def _smin(builder: ir.IRBuilder, a: ir.Value, b: ir.Value) -> ir.Value:
    return builder.select(builder.icmp_signed("<", a, b), a, b)


def _smax(builder: ir.IRBuilder, a: ir.Value, b: ir.Value) -> ir.Value:
    return builder.select(builder.icmp_signed("<", a, b), b, a)


def _field(builder: ir.IRBuilder, struct_pointer: ir.Value, index: int) -> ir.Value:
    """A pointer to field ``index`` of the structure ``struct_pointer`` points to."""
    return builder.gep(struct_pointer, [ir.Constant(ir.IntType(32), 0), ir.Constant(ir.IntType(32), index)])


def engine_module(src: EngineSource, argument_types: Sequence[Any]) -> ir.Module:
    """The LLVM module of ``src``'s engine, a function named ``src.name`` (``argument_types``: the
    Numba types of its callees' arguments, one tuple per :class:`~popjit.codegen.engine.Callee`).
    It is compiled with the program's codelets (:mod:`popjit.codegen.library`)."""
    context = cpu_target.target_context
    module = context.create_module(src.name)
    _Builder(context, module, src, argument_types).build()
    return module


class _Builder:
    """Writes one engine function into ``module``."""

    def __init__(self, context: Any, module: ir.Module, src: EngineSource, argument_types: Sequence[Any]) -> None:
        self.context = context
        self.src = src
        self.argument_types = argument_types
        self.function = ir.Function(module, ir.FunctionType(_I64, [_PTR] * 7), src.name)
        self.data, self.sizes, self.ints, self.floats, self.stop, self.rounding, self.callees = self.function.args
        self.builder = ir.IRBuilder(self.function.append_basic_block("entry"))
        # why once, first in the entry block: element() read the engine's arguments through a cast of its own
        # each time, 831 of the Keras CNN's 4,606 engine instructions, all written and printed as IR text
        self.casts = {(arg, llty): self.builder.bitcast(arg, llty.as_pointer())
                      for arg in self.function.args for llty in _ELEMENT_TYPES}
        self.after_casts = self.builder.block.instructions[-1]  # why not a cast: one to its own type is no instruction
        self.arrays: dict[int, ir.Value] = {}
        self.buffer_types: dict[int, Any] = {}
        self.interchanged = 0  # interchanged loops so far (their tasks' names)
        for callee, types in zip(src.callees, argument_types):
            if is_host(callee.name):  # why: a host function takes addresses, not Numba's arrays
                continue
            for kind, t in zip(callee.kinds, types):
                if kind.startswith("B"):
                    self.buffer_types[int(kind[1:])] = t

    def build(self) -> None:
        self.block(self.src.body)
        self.builder.ret(_I64(0))

    # values

    def at_entry(self) -> None:
        """Position the builder at the start of the entry block, after the arguments' casts."""
        self.builder.position_after(self.after_casts)

    def element(self, base: ir.Value, index: int, llty: ir.Type) -> ir.Value:
        """Element ``index`` of the array of ``llty`` at ``base`` (an argument of the engine's, or a pointer)."""
        pointer = self.casts.get((base, llty)) or self.builder.bitcast(base, llty.as_pointer())
        return self.builder.load(self.builder.gep(pointer, [_I64(index)]))

    def array(self, k: int) -> ir.Value:
        """A pointer to Numba's array structure for buffer ``k``, as callees take it
        (:mod:`popjit.codegen.abi`; filled once, in the entry block)."""
        if k not in self.arrays:
            b = self.builder
            with b.goto_block(self.function.entry_basic_block):
                self.at_entry()
                numba_type = self.buffer_types[k]
                struct = self.context.get_value_type(numba_type)
                itemsize = self.context.get_abi_sizeof(self.context.get_data_type(numba_type.dtype))
                count = self.element(self.sizes, k, _I64)
                data = b.bitcast(self.element(self.data, k, _PTR), struct.elements[4])
                value = ir.Constant(struct, None)
                for i, field in enumerate([ir.Constant(struct.elements[0], None), ir.Constant(struct.elements[1], None),
                                           count, _I64(itemsize), data]):
                    value = b.insert_value(value, field, i)
                value = b.insert_value(value, count, [5, 0])
                value = b.insert_value(value, _I64(itemsize), [6, 0])
                pointer = b.alloca(struct)
                b.store(value, pointer)
            self.arrays[k] = pointer
        return self.arrays[k]

    def argument(self, expr: str, numba_type: Any) -> ir.Value:
        llty = self.context.get_value_type(numba_type)
        if expr.startswith("B"):
            return self.array(int(expr[1:]))
        if expr in ("True", "False"):
            return ir.Constant(llty, int(expr == "True"))
        if expr[0].isdigit():
            return ir.Constant(llty, int(expr))
        base = {"P": self.ints, "F": self.floats, "R": self.rounding}[expr[0]]
        return self.element(base, int(expr[2:-1]), llty)

    # statements

    def block(self, nodes: list[Any]) -> None:
        for node in nodes:
            getattr(self, type(node).__name__.lower())(node)

    def invoke(self, node: Invoke) -> None:
        b = self.builder
        if is_host(self.src.callees[node.slot].name):
            self.host_call(node)
            return
        types = self.argument_types[node.slot]
        args = [self.argument(expr, t) for expr, t in zip(node.args, types)]
        if node.split is None:
            result = b.call(self.callee(node.slot, [a.type for a in args]), args)
        else:
            result = self.split(node, args)
        if node.trap is not None:
            self.return_if(b.icmp_signed("!=", result, _I64(0)),
                           b.or_(_I64(TRAPPED | (node.trap << 8)), result))
        if node.rounds:
            pointer = b.gep(b.bitcast(self.rounding, _I64.as_pointer()), [_I64(2)])
            b.store(b.add(b.load(pointer), _I64(1)), pointer)

    def host_call(self, node: Invoke) -> None:
        """A call of a host function (:mod:`popjit.codegen.host`): int64 arguments, a buffer as the address
        of its data; a nonzero result stops the engine with that value."""
        b = self.builder
        args = [b.ptrtoint(self.element(self.data, int(e[1:]), _PTR), _I64) if e.startswith("B")
                else self.argument(e, numba.types.int64) for e in node.args]
        result = b.call(self.callee(node.slot, [_I64] * len(args)), args)
        self.return_if(b.icmp_signed("!=", result, _I64(0)), result)

    def callee(self, slot: int, argument_types: list[ir.Type]) -> ir.Value:
        """``K[slot]`` as a pointer to a function of ``argument_types`` returning int64."""
        fnty = ir.FunctionType(_I64, argument_types)
        return self.builder.inttoptr(self.element(self.callees, slot, _I64), fnty.as_pointer())

    def split(self, node: Invoke, args: list[ir.Value]) -> ir.Value:
        """Run the callee over ranges of its outermost loop: inline when one task's worth of
        iterations or one thread, else on Numba's thread pool, one task per thread, each claiming
        chunks of the loop from a shared counter until none is left. The result is the bitwise OR
        of the chunks' results (their trap masks).

        why claim chunks: the pool hands each thread a fixed share, so on a machine shared with other
        processes the thread whose core is busy finished last and the rest waited (the chain
        benchmark's spread was 2x); with :data:`CHUNKS_PER_THREAD` chunks per thread (or the call's
        ``chunks``) the free ones take over its work. Which thread runs a chunk never changes what the
        chunk computes. A call with ``planned`` threads is cut as for that many whatever the pool has
        at run time, and run range by range when inline: its callee's results depend on its ranges."""
        b = self.builder
        assert node.split is not None
        count, grain = (self.argument(expr, numba.types.int64) for expr in node.split)
        tasks, planned = self.tasks(count, grain, node.planned)
        frame_type = ir.LiteralStructType([_I64] * len(_FRAME_HEADER) + [a.type for a in args])
        frame = self.local(frame_type)
        with b.if_else(b.icmp_signed("<=", tasks, _I64(1))) as (inline, threaded):
            with inline:
                if node.planned is None:
                    fn = self.callee(node.slot, [*(a.type for a in args), _I64, _I64])
                    b.store(b.call(fn, [*args, _I64(0), count]), self.field(frame, _RESULT))
                else:  # the planned ranges, one after another on this thread
                    self.run_task_here(self.fill_frame(node, frame, frame_type, args, count, grain, planned), frame)
            with threaded:
                task = self.fill_frame(node, frame, frame_type, args, count, grain, planned)
                self.parallel_for(task, tasks, tasks, frame)
        return b.load(self.field(frame, _RESULT))

    def fill_frame(self, node: Invoke, frame: ir.Value, frame_type: ir.LiteralStructType, args: list[ir.Value],
                   count: ir.Value, grain: ir.Value, tasks: ir.Value) -> ir.Function:
        """Store a split call's header (its loop cut into chunks of about ``count / (tasks * chunks)``
        iterations, at least ``grain``) and arguments in ``frame``; the pool's task that claims them."""
        header = _header(self.element(self.callees, node.slot, _I64), count,
                         self.chunk_length(count, grain, tasks, node.chunks))
        for index, value in enumerate([*header, *args]):
            self.builder.store(value, self.field(frame, index))
        return self.task(node.slot, frame_type)

    def pool_threads(self) -> ir.Value:
        """The thread pool's threads (int64)."""
        b = self.builder
        return b.sext(b.call(self.runtime("get_num_threads", ir.IntType(32), []), []), _I64)

    def tasks(self, count: ir.Value, grain: ir.Value, planned: int | None) -> tuple[ir.Value, ir.Value]:
        """A split loop's tasks (at most one a thread, none under ``grain`` iterations), and the tasks its
        chunks are cut for (``planned``, when given, instead of the pool's threads)."""
        b = self.builder
        most = _ceil_div(b, count, grain)
        tasks = _smin(b, most, self.pool_threads())
        return tasks, (tasks if planned is None else _smin(b, most, _I64(planned)))

    def chunk_length(self, count: ir.Value, grain: ir.Value, tasks: ir.Value, chunks: int | None) -> ir.Value:
        """A split loop's chunks: about ``count / (tasks * chunks)`` iterations (:data:`CHUNKS_PER_THREAD`
        chunks a task unless given), at least ``grain``."""
        b = self.builder
        per_task = CHUNKS_PER_THREAD if chunks is None else chunks
        return _smax(b, _ceil_div(b, count, b.mul(tasks, _I64(per_task))), grain)

    def call_fields(self, nodes: list[Invoke]) -> tuple[list[ir.Value], list[int]]:
        """The frame fields of calls a task makes in turn (each callee's entry point, then its arguments),
        and each call's number of arguments."""
        fields, arities = [], []
        for n in nodes:
            args = [self.argument(e, t) for e, t in zip(n.args, self.argument_types[n.slot])]
            fields += [self.element(self.callees, n.slot, _I64), *args]
            arities.append(len(args))
        return fields, arities

    def run_frame(self, name: str, fields: list[ir.Value], run: ChunkBody, tasks: ir.Value,
                  stop: int | None = None) -> None:
        """Store ``fields`` in a frame and have ``tasks`` tasks claim its chunks, each running ``run``
        (:meth:`claiming_task`); with one task, the calling thread claims them all."""
        b = self.builder
        frame_type = ir.LiteralStructType([f.type for f in fields])
        frame = self.local(frame_type)
        for i, value in enumerate(fields):
            b.store(value, self.field(frame, i))
        task = self.claiming_task(name, frame_type, run, stop=stop)
        with b.if_else(b.icmp_signed("<=", tasks, _I64(1))) as (inline, threaded):
            with inline:
                self.run_task_here(task, frame)
            with threaded:
                self.parallel_for(task, tasks, tasks, frame)

    def field(self, struct_pointer: ir.Value, index: int) -> ir.Value:
        return _field(self.builder, struct_pointer, index)

    def local(self, llty: ir.Type) -> ir.Value:
        """A stack slot of ``llty``, allocated in the entry block (so loops reuse it)."""
        b = self.builder
        with b.goto_block(self.function.entry_basic_block):
            self.at_entry()
            return b.alloca(llty)

    def runtime(self, name: str, returns: ir.Type, arguments: list[ir.Type]) -> ir.Function:
        """A function of Numba's parallel runtime, declared in the module (resolved when linked)."""
        module = self.function.module
        if name in module.globals:
            return module.globals[name]
        return ir.Function(module, ir.FunctionType(returns, arguments), name)

    def parallel_for(self, task: ir.Function, count: ir.Value, tasks: ir.Value, frame: ir.Value) -> None:
        """``numba_parallel_for``: ``tasks`` calls of ``task`` on the pool's threads, over ``[0, count)``
        cut into equal ranges; a task's range starts at its ``args[0]`` (0 plus a step of 1 per
        iteration) and has ``dims[0]`` iterations."""
        b = self.builder
        start, dims, steps = self.local(_PTR), self.local(_I64), self.local(_I64)
        b.store(ir.Constant(_PTR, None), start)
        b.store(count, dims)
        b.store(_I64(1), steps)
        launch = self.runtime("numba_parallel_for", ir.VoidType(), [_PTR] * 5 + [_I64, _I64, ir.IntType(32)])
        pointers = [b.bitcast(p, _PTR) for p in (task, start, dims, steps, frame)]
        b.call(launch, [*pointers, _I64(0), _I64(1), b.trunc(tasks, ir.IntType(32))])

    def run_task_here(self, task: ir.Function, frame: ir.Value) -> None:
        """Call a pool's ``task`` on the calling thread: it claims every chunk of ``frame``'s loop in turn
        (the pool's arguments it ignores are null)."""
        unused = [ir.Constant(t, None) for t in task.function_type.args[:3]]
        self.builder.call(task, [*unused, self.builder.bitcast(frame, _PTR)])

    def task(self, slot: int, frame_type: ir.LiteralStructType) -> ir.Function:
        """The pool's task for ``K[slot]``: claims chunks of the frame's loop (:meth:`claiming_task`) and
        calls the callee over each."""
        def run(b: ir.IRBuilder, fields: list[ir.Value], lo: ir.Value, hi: ir.Value) -> ir.Value:
            fnty = ir.FunctionType(_I64, [*frame_type.elements[len(_FRAME_HEADER):], _I64, _I64])
            return b.call(b.inttoptr(fields[_CALLEE], fnty.as_pointer()), [*fields[len(_FRAME_HEADER):], lo, hi])

        return self.claiming_task(f"{self.src.name}.task{slot}", frame_type, run)

    def claiming_task(self, name: str, frame_type: ir.LiteralStructType, run: ChunkBody,
                      stop: int | None = None) -> ir.Function:
        """A task for the pool, ``void task(i8 **args, i64 *dims, i64 *steps, i8 *frame)``, that claims
        chunks ``[lo, lo + chunk)`` of the frame's loop (an atomic add on its counter) until the loop
        is done, runs ``run(builder, frame fields, lo, hi)`` on each and ORs its results into the
        frame. ``stop``: the frame field holding the interrupt flag's address, polled before each claim."""
        module = self.function.module
        if name in module.globals:
            return module.globals[name]
        function = ir.Function(module, ir.FunctionType(ir.VoidType(), [_PTR.as_pointer(), _I64.as_pointer(),
                                                                      _I64.as_pointer(), _PTR]), name)
        function.linkage = "internal"
        entry, claim, run_block, done = (function.append_basic_block(n) for n in ("entry", "claim", "run", "done"))
        b = ir.IRBuilder(entry)
        frame = b.bitcast(function.args[3], frame_type.as_pointer())
        fields = [b.load(_field(b, frame, i)) for i in range(len(frame_type.elements))]
        count, chunk = fields[_COUNT], fields[_CHUNK]
        b.branch(claim)
        b.position_at_end(claim)
        lo = b.atomic_rmw("add", _field(b, frame, _NEXT), chunk, "monotonic")
        go_on = b.icmp_signed("<", lo, count)
        if stop is not None:
            flag = b.load_atomic(b.inttoptr(fields[stop], _I64.as_pointer()), "monotonic", 8)
            go_on = b.and_(go_on, b.icmp_signed("==", flag, _I64(0)))
        b.cbranch(go_on, run_block, done)
        b.position_at_end(run_block)
        result = run(b, fields, lo, _smin(b, b.add(lo, chunk), count))
        b.atomic_rmw("or", _field(b, frame, _RESULT), result, "monotonic")
        b.branch(claim)
        b.position_at_end(done)
        b.ret_void()
        return function

    def return_if(self, condition: ir.Value, value: ir.Value) -> None:
        with self.builder.if_then(condition, likely=False):
            self.builder.ret(value)

    def poll_stop(self) -> None:
        self.return_if(self.builder.icmp_signed("!=", self.element(self.stop, 0, _I64), _I64(0)), _I64(1))

    def predicate(self, expr: str) -> ir.Value:
        k = int(expr[1:])
        width = self.context.get_abi_sizeof(self.context.get_data_type(self.buffer_type(k).dtype)) * 8
        value = self.element(self.element(self.data, k, _PTR), 0, ir.IntType(width))
        return self.builder.icmp_unsigned("!=", value, ir.Constant(value.type, 0))

    def buffer_type(self, k: int) -> Any:
        return self.buffer_types.get(k) or numba.from_dtype(self.src.arguments[k].dtype.np)[::1]

    def loop(self, node: Loop) -> None:
        count = self.argument(node.count, numba.types.int64)
        self.counted_loop("repeat", lambda i: self.builder.icmp_signed("<", i, count), node.body)

    def interchangedloop(self, node: InterchangedLoop) -> None:
        """Run the loop chunk by chunk (:class:`~popjit.codegen.engine.InterchangedLoop`): a task per
        thread (or the calling thread alone, when one chunk or one thread) claims chunks of the calls'
        outermost loop and runs every iteration of the body on each. The frame holds the header, the
        iteration count, the interrupt flag's address, then each call's callee and arguments."""
        b = self.builder
        self.poll_stop()
        rows, chunk, count = (self.argument(e, numba.types.int64) for e in (node.rows, node.chunk, node.count))
        calls, arities = self.call_fields(node.body)
        fields = [*_header(_I64(0), rows, chunk), count, b.ptrtoint(self.stop, _I64), *calls]  # no callee: calls follow
        self.interchanged += 1
        tasks = _smin(b, _ceil_div(b, rows, chunk), self.pool_threads())
        self.run_frame(f"{self.src.name}.interchanged{self.interchanged}", fields, _repeated_calls(arities), tasks,
                       stop=_STOP)
        self.poll_stop()

    def chained(self, node: Chained) -> None:
        """Run a product and the kernel reading its rows range by range (:class:`~popjit.codegen.engine.Chained`):
        the product's units are cut as its call alone would be (:meth:`split`), and each chunk's task calls
        the kernel on that chunk's rows right after the product. Inline, with one task or thread, the chunks
        run one after another on this thread."""
        product, kernel = node.calls
        assert product.split is not None
        count, grain = (self.argument(expr, numba.types.int64) for expr in product.split)
        tasks, planned = self.tasks(count, grain, product.planned)
        chunk = self.chunk_length(count, grain, planned, product.chunks)
        layout = [self.argument(e, numba.types.int64) for e in (node.panels, node.height, node.rows, node.scale)]
        calls, arities = self.call_fields(node.calls)
        fields = [*_header(_I64(0), count, chunk), *layout, *calls]  # no callee in the header: the calls follow
        self.run_frame(f"{self.src.name}.chained{product.slot}_{kernel.slot}", fields, _chained_calls(arities), tasks)

    def whileloop(self, node: WhileLoop) -> None:
        def go_on(n: ir.Value) -> ir.Value:
            self.block(node.cond)
            go = self.predicate(node.pred)
            if node.limit is not None:
                limit = self.argument(node.limit, numba.types.int64)
                go = self.builder.and_(go, self.builder.icmp_signed("<", n, limit))
            return go

        self.counted_loop("while", go_on, node.body)

    def counted_loop(self, name: str, go_on: Callable[[ir.Value], ir.Value], body: list[Any]) -> None:
        """A loop with an iteration counter from 0: its header computes ``go_on(counter)``; while that
        holds, each iteration polls the interrupt flag and runs ``body``."""
        b = self.builder
        head, inner, done = (self.function.append_basic_block(f"{name}{suffix}") for suffix in ("", ".body", ".end"))
        before = b.block
        b.branch(head)
        b.position_at_end(head)
        counter = b.phi(_I64)
        counter.add_incoming(_I64(0), before)
        b.cbranch(go_on(counter), inner, done)
        b.position_at_end(inner)
        self.poll_stop()
        self.block(body)
        counter.add_incoming(b.add(counter, _I64(1)), b.block)
        b.branch(head)
        b.position_at_end(done)

    def branch(self, node: Branch) -> None:
        with self.builder.if_else(self.predicate(node.pred)) as (then, orelse):
            with then:
                self.block(node.then)
            with orelse:
                self.block(node.orelse)
