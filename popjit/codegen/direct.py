"""Generated codelets as LLVM IR, built straight from their source without Numba's compiler pipeline.

A codelet's source (:mod:`popjit.codegen.render`) is a small, regular subset of Python: loops over
``range(n)``, assignments, ``if``, arithmetic and comparisons, conditional expressions, loads and
stores ``b[np.uint64(i)]`` into flat arrays, scalar casts (``np.float32(x)``, ``int(x)``…), ``min``/
``max``/``abs`` and calls of the scalar kernels (``km.exp``…). Running it through Numba's whole
pipeline (bytecode analysis, SSA, type inference by constraint propagation, rewrites, lowering)
costs 60 ms to 1 s per codelet and was most of a cold compile. This module types that subset
itself, in one pass per statement list repeated until every variable's type is stable, and writes
the IR with llvmlite. Every *meaning* still comes from Numba, so a codelet computes exactly what it
computed before: the types of operators and calls are resolved by Numba's typing context, the
instructions by Numba's implementations of them (``context.get_function``), casts by
``context.cast``, array elements by its data models, the scalar kernels are called as the
compiled Numba functions they are (their code linked in and inlined), and the fast-math flags are
applied by Numba's post-lowering pass with the codelet decorator's own options.

A codelet using anything outside the subset raises :class:`Unsupported` and is compiled by Numba
as before (:mod:`popjit.codegen.library`); ``POPJIT_DIRECT_CODELETS=0`` compiles them all that way.
The function takes its arguments as the engine passes them (:mod:`popjit.codegen.abi`: a buffer as a
pointer to Numba's array structure, ``int64``, ``double`` and ``bool`` by value); a codelet Numba
compiles is called through an entry point that does the same.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numba
import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.core.extending import _Intrinsic
from numba.core.typing import signature

from popjit.codegen.abi import array_data, callee_type

_I64 = ir.IntType(64)

#: ``np.<name>(x)``: a cast to that scalar type.
_NUMPY_CASTS = {name: numba.from_dtype(np.dtype(name)) for name in
                ("float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")}
#: ``int(x)``, ``float(x)``, ``bool(x)``.
_BUILTIN_CASTS = {"int": types.int64, "float": types.float64, "bool": types.boolean}
_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.BitAnd: operator.and_,
           ast.BitOr: operator.or_, ast.BitXor: operator.xor, ast.LShift: operator.lshift,
           ast.RShift: operator.rshift, ast.Pow: operator.pow}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_, ast.Invert: operator.invert}
_COMPARE = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
            ast.Eq: operator.eq, ast.NotEq: operator.ne}
_NUMPY_FUNCTIONS = ("floor", "ceil", "trunc")


class Unsupported(Exception):
    """The codelet uses something this translator does not handle (Numba compiles it instead)."""


def _unsupported(node: ast.AST) -> Unsupported:
    return Unsupported(f"{type(node).__name__} at line {getattr(node, 'lineno', '?')}: {ast.unparse(node)[:80]}")


def function_def(source: str, name: str) -> ast.FunctionDef:
    """The definition of function ``name`` in ``source``."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    raise Unsupported(f"no function {name} in the source")


@dataclass
class _Typed:
    """What typing found: each variable's type, each expression's type, each operation's signature."""

    variables: dict[str, types.Type]
    values: dict[int, types.Type] = field(default_factory=dict)
    signatures: dict[int, Any] = field(default_factory=dict)
    callees: dict[int, Any] = field(default_factory=dict)  # a call's resolved function (key for get_function)


#: Per typing context, the signature Numba resolved for each ``(operation, *operand types)``, shared by
#: every codelet a process writes. why: resolving one takes Numba about a millisecond, and a program's
#: codelets repeat the same few hundred operations on the same scalar types.
_RESOLVED: dict[Any, dict[tuple, Any]] = {}


class _Typer:
    """Types a codelet's body: a variable's type is the unification of every value assigned to it,
    found by typing the whole body again until no variable's type changes (as Numba's loop phis do)."""

    def __init__(self, typing: Any, namespace: dict[str, Any], arguments: dict[str, types.Type]) -> None:
        self.typing = typing
        self.namespace = namespace
        self.typed = _Typed(dict(arguments))
        self.arguments = set(arguments)
        self.returns: types.Type | None = None
        self._resolved = _RESOLVED.setdefault(typing, {})

    def run(self, body: list[ast.stmt]) -> _Typed:
        for _ in range(8):
            before = dict(self.typed.variables)
            self.returns = None
            self.block(body)
            if self.typed.variables == before:
                return self.typed
        raise Unsupported("variable types did not settle")

    # statements

    def block(self, body: list[ast.stmt]) -> None:
        for stmt in body:
            self.statement(stmt)

    def statement(self, s: ast.stmt) -> None:
        if isinstance(s, ast.Assign) and len(s.targets) == 1:
            value = self.expr(s.value)
            self.assign(s.targets[0], value)
        elif isinstance(s, ast.AugAssign) and isinstance(s.target, ast.Name):
            value = self.operation(s, _BINARY.get(type(s.op)), [self.variable(s.target.id, s), self.expr(s.value)])
            self.assign(s.target, value)
        elif isinstance(s, ast.For) and isinstance(s.target, ast.Name) and not s.orelse:
            count = self.range_count(s.iter)
            self.assign(s.target, count)
            self.block(s.body)
        elif isinstance(s, ast.If):
            self.condition(s.test)
            self.block(s.body)
            self.block(s.orelse)
        elif isinstance(s, ast.Return) and s.value is not None:
            value = self.expr(s.value)
            self.returns = value if self.returns is None else self.unify(self.returns, value, s)
        elif isinstance(s, ast.Expr) and isinstance(s.value, ast.Call):
            self.expr(s.value)
        else:
            raise _unsupported(s)

    def assign(self, target: ast.expr, value: types.Type) -> None:
        if isinstance(target, ast.Name):
            if target.id in self.arguments:
                raise _unsupported(target)
            known = self.typed.variables.get(target.id)
            self.typed.variables[target.id] = value if known is None else self.unify(known, value, target)
        elif isinstance(target, ast.Subscript):
            self.element(target)
        else:
            raise _unsupported(target)

    def range_count(self, node: ast.expr) -> types.Type:
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range"
                and self.namespace.get("range", range) is range and len(node.args) == 1 and not node.keywords):
            raise _unsupported(node)
        if not isinstance(self.expr(node.args[0]), types.Integer):
            raise _unsupported(node)
        return types.int64

    def condition(self, node: ast.expr) -> None:
        if self.expr(node) != types.boolean:
            raise _unsupported(node)

    # expressions

    def expr(self, node: ast.expr) -> types.Type:
        t = self._expr(node)
        self.typed.values[id(node)] = t
        return t

    def _expr(self, node: ast.expr) -> types.Type:
        if isinstance(node, ast.Constant):
            return self.constant(node)
        if isinstance(node, ast.Name):
            return self.variable(node.id, node)
        if isinstance(node, ast.Attribute):
            value = _attribute_constant(node, self.namespace)
            if value is None:
                raise _unsupported(node)
            return numba.typeof(value)
        if isinstance(node, ast.BinOp):
            return self.operation(node, _BINARY.get(type(node.op)), [self.expr(node.left), self.expr(node.right)])
        if isinstance(node, ast.UnaryOp):
            return self.operation(node, _UNARY.get(type(node.op)), [self.expr(node.operand)])
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            return self.operation(node, _COMPARE.get(type(node.ops[0])),
                                  [self.expr(node.left), self.expr(node.comparators[0])])
        if isinstance(node, ast.BoolOp):
            if any(self.expr(v) != types.boolean for v in node.values):
                raise _unsupported(node)
            return types.boolean
        if isinstance(node, ast.IfExp):
            self.condition(node.test)
            return self.unify(self.expr(node.body), self.expr(node.orelse), node)
        if isinstance(node, ast.Subscript):
            return self.element(node)
        if isinstance(node, ast.Call):
            return self.call(node)
        raise _unsupported(node)

    def constant(self, node: ast.Constant) -> types.Type:
        if isinstance(node.value, bool):
            return types.boolean
        if isinstance(node.value, int):
            return types.int64
        if isinstance(node.value, float):
            return types.float64
        raise _unsupported(node)

    def variable(self, name: str, node: ast.AST) -> types.Type:
        t = self.typed.variables.get(name)
        if t is None:
            raise _unsupported(node)  # read before assigned (or a global)
        return t

    def element(self, node: ast.Subscript) -> types.Type:
        if not isinstance(node.value, ast.Name):
            raise _unsupported(node)
        array = self.variable(node.value.id, node)
        index = node.slice
        if not isinstance(array, types.Array) or array.ndim != 1 or isinstance(index, ast.Slice):
            raise _unsupported(node)
        if not isinstance(self.expr(index), types.Integer):
            raise _unsupported(node)
        return array.dtype

    def unify(self, a: types.Type, b: types.Type, node: ast.AST) -> types.Type:
        if a == b:
            return a
        t = self.typing.unify_types(a, b)
        if t is None or not isinstance(t, (types.Number, types.Boolean)):
            raise _unsupported(node)
        return t

    def operation(self, node: ast.AST, op: Any, operands: list[types.Type]) -> types.Type:
        """Type ``op(*operands)`` as Numba does; remember the signature and the function to lower."""
        if op is None or not all(isinstance(t, (types.Number, types.Boolean)) for t in operands):
            raise _unsupported(node)
        key = (op, *operands)
        sig = self._resolved.get(key)
        if sig is None:
            try:
                sig = self.typing.resolve_function_type(op, tuple(operands), {})
            except Exception as e:  # why: a Numba typing error of any kind means "not this way"
                raise Unsupported(str(e)) from e
            if sig is None:
                raise _unsupported(node)
            self._resolved[key] = sig
        self.typed.signatures[id(node)] = sig
        self.typed.callees[id(node)] = op
        return sig.return_type

    def call(self, node: ast.Call) -> types.Type:
        if node.keywords:
            raise _unsupported(node)
        cast = _cast_target(node.func, self.namespace)
        if cast is not None:
            if len(node.args) != 1:
                raise _unsupported(node)
            source = self.expr(node.args[0])
            if not isinstance(source, (types.Number, types.Boolean)):
                raise _unsupported(node)
            return cast
        operands = [self.expr(a) for a in node.args]
        fn = _callee(node.func, self.namespace)
        if fn is None:
            raise _unsupported(node)
        if fn in (min, max, abs):
            return self.builtin(node, fn, operands)
        if isinstance(fn, (numba.core.registry.CPUDispatcher, _Intrinsic)):
            return self.operation(node, self.typing.resolve_value_type(fn), operands)
        return self.operation(node, fn, operands)


    def builtin(self, node: ast.Call, fn: Callable, operands: list[types.Type]) -> types.Type:
        """``min``/``max`` of two integers, ``abs`` of a number (what codelets use them for)."""
        if fn is abs and len(operands) == 1 and isinstance(operands[0], (types.Integer, types.Float)):
            t = operands[0] if operands[0].bitwidth == 64 or isinstance(operands[0], types.Float) else types.int64
        elif fn is not abs and len(operands) == 2 and all(isinstance(t, types.Integer) for t in operands):
            t = self.unify(*operands, node)
        else:
            raise _unsupported(node)
        self.typed.signatures[id(node)] = signature(t, *([t] * len(operands)))
        self.typed.callees[id(node)] = fn
        return t


def _attribute_constant(node: ast.Attribute, namespace: dict[str, Any]) -> Any:
    """``np.inf``/``np.nan``/``np.pi`` (float64), or a NumPy scalar constant of a kernel module (``km.F0``)."""
    if not isinstance(node.value, ast.Name):
        return None
    owner = namespace.get(node.value.id)
    if owner is np:
        return float(getattr(np, node.attr)) if node.attr in ("inf", "nan", "pi") else None
    value = getattr(owner, node.attr, None) if owner is not None else None
    return value if isinstance(value, (np.floating, np.integer, np.bool_)) else None


def _cast_target(func: ast.expr, namespace: dict[str, Any]) -> types.Type | None:
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and namespace.get(func.value.id) is np:
        return _NUMPY_CASTS.get(func.attr)
    if isinstance(func, ast.Name) and func.id in _BUILTIN_CASTS and func.id not in namespace:
        return _BUILTIN_CASTS[func.id]
    return None


def _callee(func: ast.expr, namespace: dict[str, Any]) -> Any:
    """The function a call names: ``min``/``max``/``abs``, ``np.floor``…, or a compiled scalar kernel."""
    if isinstance(func, ast.Name):
        if func.id in ("min", "max", "abs") and func.id not in namespace:
            return {"min": min, "max": max, "abs": abs}[func.id]
        fn = namespace.get(func.id)
    elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        owner = namespace.get(func.value.id)
        if owner is np:
            return getattr(np, func.attr) if func.attr in _NUMPY_FUNCTIONS else None
        fn = getattr(owner, func.attr, None) if owner is not None and owner is not np else None
    else:
        return None
    return fn if isinstance(fn, (numba.core.registry.CPUDispatcher, _Intrinsic)) else None


class _Writer:
    """Writes a typed codelet body as LLVM IR with Numba's implementations of each operation."""

    def __init__(self, context: Any, function: ir.Function, typed: _Typed, namespace: dict[str, Any],
                 arguments: dict[str, types.Type]) -> None:
        self.context = context
        self.typed = typed
        self.namespace = namespace
        self.function = function
        self.builder = ir.IRBuilder(function.append_basic_block("entry"))
        self.slots: dict[str, ir.Value] = {}
        self.arrays: dict[str, tuple[ir.Value, types.Type]] = {}
        self._value_types: dict[types.Type, ir.Type] = {}  # why: Numba's data-model lookup is slow
        for (name, t), value in zip(arguments.items(), function.args):
            if isinstance(t, types.Array):
                self.arrays[name] = (array_data(self.builder, value), t.dtype)
            else:
                self.slots[name] = self.slot(t)
                self.builder.store(value, self.slots[name])
        for name, t in typed.variables.items():
            if name not in arguments:
                self.slots[name] = self.slot(t)

    def slot(self, t: types.Type) -> ir.Value:
        value_type = self._value_types.get(t)
        if value_type is None:
            value_type = self._value_types[t] = self.context.get_value_type(t)
        with self.builder.goto_entry_block():
            return self.builder.alloca(value_type)

    def type_of(self, node: ast.expr) -> types.Type:
        return self.typed.values[id(node)]

    def cast(self, value: ir.Value, source: types.Type, target: types.Type) -> ir.Value:
        return value if source == target else self.context.cast(self.builder, value, source, target)

    # statements

    def block(self, body: list[ast.stmt]) -> None:
        for stmt in body:
            if self.builder.block.is_terminated:
                return
            self.statement(stmt)

    def statement(self, s: ast.stmt) -> None:
        b = self.builder
        if isinstance(s, ast.Assign):
            self.store(s.targets[0], self.expr(s.value), self.type_of(s.value))
        elif isinstance(s, ast.AugAssign):
            assert isinstance(s.target, ast.Name)
            current = b.load(self.slots[s.target.id])
            value = self.operate(s, [current, self.expr(s.value)],
                                 [self.typed.variables[s.target.id], self.type_of(s.value)])
            self.store(s.target, value, self.typed.signatures[id(s)].return_type)
        elif isinstance(s, ast.For):
            self.loop(s)
        elif isinstance(s, ast.If):
            with b.if_else(self.expr(s.test)) as (then, orelse):
                with then:
                    self.block(s.body)
                with orelse:
                    self.block(s.orelse)
        elif isinstance(s, ast.Return):
            assert s.value is not None
            b.ret(self.cast(self.expr(s.value), self.type_of(s.value), types.int64))
        elif isinstance(s, ast.Expr):
            self.expr(s.value)

    def store(self, target: ast.expr, value: ir.Value, source: types.Type) -> None:
        if isinstance(target, ast.Name):
            self.builder.store(self.cast(value, source, self.typed.variables[target.id]), self.slots[target.id])
            return
        assert isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name)
        pointer, dtype = self.element_pointer(target)
        self.context.pack_value(self.builder, dtype, self.cast(value, source, dtype), pointer)

    def loop(self, s: ast.For) -> None:
        b = self.builder
        assert isinstance(s.iter, ast.Call) and isinstance(s.target, ast.Name)
        count_node = s.iter.args[0]
        count = self.cast(self.expr(count_node), self.type_of(count_node), types.int64)
        index = self.slot(types.int64)
        b.store(_I64(0), index)
        head, body, done = (self.function.append_basic_block(f"for.{suffix}") for suffix in ("head", "body", "end"))
        b.branch(head)
        b.position_at_end(head)
        i = b.load(index)
        b.cbranch(b.icmp_signed("<", i, count), body, done)
        b.position_at_end(body)
        b.store(i, self.slots[s.target.id])
        self.block(s.body)
        if not b.block.is_terminated:
            b.store(b.add(i, _I64(1)), index)
            b.branch(head)
        b.position_at_end(done)

    # expressions

    def expr(self, node: ast.expr) -> ir.Value:
        b = self.builder
        t = self.type_of(node)
        if isinstance(node, ast.Constant):
            return self.context.get_constant(t, node.value)
        if isinstance(node, ast.Name):
            return b.load(self.slots[node.id])
        if isinstance(node, ast.Attribute):
            return self.context.get_constant(t, _attribute_constant(node, self.namespace))
        if isinstance(node, ast.BinOp):
            return self.operate(node, [self.expr(node.left), self.expr(node.right)],
                                [self.type_of(node.left), self.type_of(node.right)])
        if isinstance(node, ast.UnaryOp):
            return self.operate(node, [self.expr(node.operand)], [self.type_of(node.operand)])
        if isinstance(node, ast.Compare):
            return self.operate(node, [self.expr(node.left), self.expr(node.comparators[0])],
                                [self.type_of(node.left), self.type_of(node.comparators[0])])
        if isinstance(node, ast.BoolOp):
            return self.boolean(node)
        if isinstance(node, ast.IfExp):
            return self.choose(node, t)
        if isinstance(node, ast.Subscript):
            pointer, dtype = self.element_pointer(node)
            return self.context.unpack_value(b, dtype, pointer)
        assert isinstance(node, ast.Call)
        if id(node) not in self.typed.signatures:  # a cast
            (arg,) = node.args
            return self.cast(self.expr(arg), self.type_of(arg), t)
        return self.operate(node, [self.expr(a) for a in node.args], [self.type_of(a) for a in node.args])

    def operate(self, node: ast.AST, values: list[ir.Value], sources: list[types.Type]) -> ir.Value:
        """Numba's implementation of the operation typed for ``node``, on ``values`` cast to its signature."""
        sig = self.typed.signatures[id(node)]
        star = sig.args[-1] if sig.args and isinstance(sig.args[-1], (types.StarArgTuple, types.StarArgUniTuple)) \
            else None
        targets = [*sig.args[:-1], *star.types] if star is not None else list(sig.args)
        args = [self.cast(v, s, t) for v, s, t in zip(values, sources, targets)]
        if star is not None:  # why: min/max are typed with *args, and lowered for the arguments spread out
            sig = signature(sig.return_type, *targets)
        callee = self.typed.callees[id(node)]
        if callee in (min, max, abs):
            return self.builtin(callee, sig.return_type, args)
        if isinstance(callee, types.Dispatcher):
            return self.call_compiled(callee.dispatcher.overloads[tuple(sig.args)], args)
        return self.context.get_function(callee, sig)(self.builder, args)

    def builtin(self, fn: Callable, t: types.Type, args: list[ir.Value]) -> ir.Value:
        """``min(a, b)``/``max(a, b)`` of integers (the first of equals, as Python), ``abs(x)``."""
        b = self.builder
        if fn is abs:
            (x,) = args
            if isinstance(t, types.Float):
                return b.call(b.module.declare_intrinsic("llvm.fabs", [x.type]), [x])
            return b.select(b.icmp_signed("<", x, ir.Constant(x.type, 0)), b.neg(x), x)
        x, y = args
        signed = t.signed
        if fn is min:
            less = b.icmp_signed("<", y, x) if signed else b.icmp_unsigned("<", y, x)
        else:
            less = b.icmp_signed(">", y, x) if signed else b.icmp_unsigned(">", y, x)
        return b.select(less, y, x)

    def call_compiled(self, compiled: Any, args: list[ir.Value]) -> ir.Value:
        """Call a compiled Numba function (a scalar kernel) by its calling convention, linking its code
        in. why: Numba's own call lowering propagates the callee's exception status through the
        caller's arguments, which a C-signature codelet does not have; the kernels raise nothing."""
        fndesc = compiled.fndesc
        call_conv = self.context.call_conv
        fnty = call_conv.get_function_type(fndesc.restype, fndesc.argtypes)
        function = cgutils.get_or_insert_function(self.function.module, fnty, fndesc.mangled_name)
        _, value = call_conv.call_function(self.builder, function, fndesc.restype, fndesc.argtypes, args)
        self.context.add_linking_libs([compiled.library])
        return value

    def element_pointer(self, node: ast.Subscript) -> tuple[ir.Value, types.Type]:
        assert isinstance(node.value, ast.Name)
        data, dtype = self.arrays[node.value.id]
        index = self.cast(self.expr(node.slice), self.type_of(node.slice), types.uint64)
        return self.builder.gep(data, [index]), dtype

    def boolean(self, node: ast.BoolOp) -> ir.Value:
        """``a and b``/``a or b``, evaluating ``b`` only when ``a`` does not decide (as Python does)."""
        b = self.builder
        result = self.slot(types.boolean)
        done = self.function.append_basic_block("bool.end")
        for value in node.values[:-1]:
            v = self.expr(value)
            b.store(v, result)
            go_on = self.function.append_basic_block("bool.next")
            if isinstance(node.op, ast.And):
                b.cbranch(v, go_on, done)
            else:
                b.cbranch(v, done, go_on)
            b.position_at_end(go_on)
        b.store(self.expr(node.values[-1]), result)
        b.branch(done)
        b.position_at_end(done)
        return b.load(result)

    def choose(self, node: ast.IfExp, t: types.Type) -> ir.Value:
        """``x if c else y``: only the chosen side is evaluated."""
        b = self.builder
        result = self.slot(t)
        with b.if_else(self.expr(node.test)) as (then, orelse):
            with then:
                b.store(self.cast(self.expr(node.body), self.type_of(node.body), t), result)
            with orelse:
                b.store(self.cast(self.expr(node.orelse), self.type_of(node.orelse), t), result)
        return b.load(result)


def emit_codelet(context: Any, module: ir.Module, symbol: str, source: str, name: str,
                 namespace: dict[str, Any], argument_types: tuple) -> None:
    """Write function ``name`` of codelet ``source`` (globals ``namespace``) for ``argument_types``
    into ``module`` as ``symbol``: ``int64 symbol(arguments...)``. ``context``: Numba's target
    context with the codelet's options (error model, fast-math), its code library pushed (the
    scalar kernels called are linked into it). Raises :class:`Unsupported` for anything outside
    the subset this translator handles."""
    definition = function_def(source, name)
    parameters = [a.arg for a in definition.args.args]
    if len(parameters) != len(argument_types) or definition.args.vararg or definition.args.kwarg:
        raise Unsupported("the arguments do not match")
    arguments = dict(zip(parameters, argument_types))
    typer = _Typer(context.typing_context, namespace, arguments)
    typed = typer.run(definition.body)
    if typer.returns is None or not isinstance(typer.returns, (types.Integer, types.Boolean)):
        raise Unsupported(f"returns {typer.returns}")
    function = ir.Function(module, callee_type(context, argument_types), symbol)
    writer = _Writer(context, function, typed, namespace, arguments)
    writer.block(definition.body)
    if not writer.builder.block.is_terminated:
        raise Unsupported("falls off its end")
