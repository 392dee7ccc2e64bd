"""Autograph's source-to-code transformation: parse a function's source at its real line numbers,
run the four passes over its ``def`` (lowering of jumps and early returns, liveness, statements
into nested functions and runtime calls, expressions into runtime calls), and compile the result
with the original file name so tracebacks and tracing errors name the user's lines."""

from __future__ import annotations
import __future__

import ast
import inspect
import sys
import types
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from popjit import config
from popjit.frontend.autograph.analysis import (
    _blockers,
    _bound_names,
    _declared,
    _deleted_names,
    _describe_blockers,
    _Liveness,
    _param_names,
)
from popjit.frontend.autograph.lowering import _Jumps, _Lowering
from popjit.frontend.autograph.nodes import (
    _AG,
    _ag,
    _assign,
    _call,
    _def,
    _fix_locations,
    _lambda,
    _load,
    _located,
    _Namer,
    _names_tuple,
    _store,
)

_FRAME_BUILTINS = frozenset({"super", "locals", "globals", "vars", "eval", "exec", "dir"})


@dataclass(frozen=True)
class _Converted:
    code: types.CodeType
    source: str


class _NotConvertible(Exception):
    """Why a function is left as written."""


# ============================================================================================
# Source → AST → converted code object
# ============================================================================================


def _transform(fn: types.FunctionType) -> _Converted:
    code = fn.__code__
    try:
        lines, first = inspect.getsourcelines(code)  # why: the code object, so @wraps is not unwrapped
    except (OSError, TypeError) as e:
        raise _NotConvertible(f"its source is not available ({e})") from None
    node = _parse_function(lines, first, code.co_name)
    _convert_function_def(node)
    module = ast.Module(body=[_factory(node, code.co_freevars)], type_ignores=[])
    _fix_locations(module, node.lineno, node.col_offset)
    flags = code.co_flags & __future__.annotations.compiler_flag
    module_code = compile(module, code.co_filename, "exec", flags=flags, dont_inherit=True)
    inner = _code_named(_code_named(module_code, "_pj_factory"), node.name)
    source = ast.unparse(node)
    if config.get("DEBUG") >= 2:
        print(f"=== popjit: autograph {fn.__qualname__} ({code.co_filename}:{first}) ===\n{source}",
              file=sys.stderr)
    return _Converted(inner, source)


def _parse_function(lines: list[str], first: int, name: str) -> ast.FunctionDef:
    """The ``def`` in ``lines`` (which start at line ``first`` of their file), at its real line numbers."""
    indented = lines[0][:1] in (" ", "\t")
    # why: wrapping an indented def in `if 1:` parses it without dedenting, so columns stay right
    text = ("if 1:\n" if indented else "") + "".join(lines)
    try:
        tree = ast.parse(text)
    except SyntaxError as e:
        raise _NotConvertible(f"its source does not parse on its own ({e.msg})") from None
    body = tree.body[0].body if indented and tree.body else tree.body  # type: ignore[attr-defined]
    node = body[0] if body else None
    if not isinstance(node, ast.FunctionDef) or node.name != name:
        raise _NotConvertible("its source is not a `def` statement")
    ast.increment_lineno(node, first - 1 - int(indented))
    return node


def _factory(node: ast.FunctionDef, freevars: Sequence[str]) -> ast.FunctionDef:
    """``def _pj_factory(): ag__ = x = … = None; def f…`` so f's free variables keep their names."""
    inits: list[ast.stmt] = [ast.Assign(targets=[_store(v)], value=ast.Constant(None))
                             for v in dict.fromkeys([_AG, *freevars])]
    fac = _def("_pj_factory", [], [*inits, node, ast.Return(_load(node.name))])
    return _located([fac], node)[0]  # type: ignore[return-value]


def _code_named(code: types.CodeType, name: str) -> types.CodeType:
    for c in code.co_consts:
        if isinstance(c, types.CodeType) and c.co_name == name:
            return c
    raise _NotConvertible(f"no code object named {name}")


def _convert_function_def(node: ast.FunctionDef) -> None:
    """Rewrite a ``def`` in place: the four passes (flags, liveness, statements, expressions)."""
    node.decorator_list = []
    globals_ = _declared(node.body, ast.Global)
    nonlocals = _declared(node.body, ast.Nonlocal)
    namer = _Namer()
    node.body = _Lowering(namer).block(node.body, tail=True)
    live = _Liveness()
    live.block(node.body, frozenset(nonlocals))
    bound = _param_names(node.args) | nonlocals
    converter = _Converter(live, namer, globals_)
    node.body = converter.block(node.body, _Bound(set(bound), set(bound), set(bound)))
    params = [*node.args.posonlyargs, *node.args.args]
    expressions = _Expressions(converter.sentinels, params[0].arg if params else None)
    node.body = [expressions.visit(s) for s in node.body]


# ============================================================================================
# Pass 3: statements become nested defs and runtime calls
# ============================================================================================


@dataclass
class _Bound:
    """What is known about the locals at one point of the function being converted."""

    must: set[str]  # surely bound (perhaps to an Undefined sentinel): nested defs may declare them nonlocal
    may: set[str]  # perhaps bound (shared by all branches: it only grows)
    defined: set[str]  # surely assigned a real value: reading them needs no `ag__.ld`

    def branch(self) -> _Bound:
        return _Bound(set(self.must), self.may, set(self.defined))

    def assign(self, names: set[str]) -> None:
        self.must |= names
        self.may |= names
        self.defined |= names

    def mark_reads(self, node: ast.AST | None) -> None:
        """Flag the reads in ``node`` of names that may be unassigned (pass 4 may wrap them in ``ld``)."""
        for n in ast.walk(node) if node is not None else ():
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id not in self.defined:
                n._pj_maybe_undefined = True  # type: ignore[attr-defined]


class _Converter:
    """Rewrites loops and ifs into nested defs and runtime calls."""

    def __init__(self, live: _Liveness, namer: _Namer, globals_: set[str]) -> None:
        self.live = live
        self.namer = namer
        self.globals = globals_
        self.sentinels: set[str] = set()

    def block(self, stmts: list[ast.stmt], b: _Bound) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        for s in stmts:
            out.extend(self.stmt(s, b))
        return out

    def stmt(self, s: ast.stmt, b: _Bound) -> list[ast.stmt]:
        if isinstance(s, ast.If):
            return self.if_(s, b)
        if isinstance(s, (ast.For, ast.While, ast.AsyncFor)):
            if getattr(s, "_pj_native", None) or isinstance(s, ast.AsyncFor):
                return self.native_loop(s, b)
            return self.for_(s, b) if isinstance(s, ast.For) else self.while_(s, b)
        if isinstance(s, (ast.With, ast.AsyncWith)):
            for item in s.items:
                b.mark_reads(item.context_expr)
            b.assign(_bound_names([i.optional_vars for i in s.items if i.optional_vars]))
            s.body = self.block(s.body, b)
            return [s]
        if isinstance(s, (ast.Try, getattr(ast, "TryStar", ast.Try))):
            return self.try_(s, b)  # type: ignore[arg-type]
        if isinstance(s, ast.Match):
            b.mark_reads(s.subject)
            b.may |= _bound_names([s])
            for c in s.cases:
                c.body = self.block(c.body, b.branch())
            return [s]
        if not isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            b.mark_reads(s)
        deleted = _deleted_names(s)
        b.assign(_bound_names([s]) - deleted)
        b.must -= deleted
        b.defined -= deleted
        return [s]

    def try_(self, s: ast.Try, b: _Bound) -> list[ast.stmt]:
        b.may |= _bound_names([s])
        s.body = self.block(s.body, b.branch())
        for h in s.handlers:
            h.body = self.block(h.body, b.branch())
        s.orelse = self.block(s.orelse, b.branch())
        s.finalbody = self.block(s.finalbody, b)
        return [s]

    # -- helpers -------------------------------------------------------------------------------
    def modified(self, nodes: Iterable[ast.AST]) -> set[str]:
        return _bound_names(nodes) - self.globals

    def sentinels_for(self, names: set[str], b: _Bound, at: ast.stmt) -> list[ast.stmt]:
        """Bind each of ``names`` not surely bound yet to ``ag__.Undefined(name)`` (keeping a value
        it may already have), so nested defs can declare it ``nonlocal``."""
        out: list[ast.stmt] = []
        for name in sorted(names - b.must):
            undefined = _assign(name, _call(_ag("Undefined"), [ast.Constant(name)]))
            if name in b.may:
                probe = ast.Expr(value=_load(name))
                undefined = ast.Try(body=[probe], handlers=[ast.ExceptHandler(
                    type=_load("NameError"), name=None, body=[undefined])], orelse=[], finalbody=[])
            undefined._pj_raw = True  # type: ignore[attr-defined]
            out.append(undefined)
            self.sentinels.add(name)
        b.must |= names
        b.may |= names
        return _located(out, at)

    def declarations(self, names: set[str], body: list[ast.stmt]) -> list[ast.stmt]:
        decls: list[ast.stmt] = []
        if names:
            decls.append(ast.Nonlocal(names=sorted(names)))
        globals_ = _bound_names(body) & self.globals
        if globals_:
            decls.append(ast.Global(names=sorted(globals_)))
        return decls

    def state(self, n: int, names: list[str]) -> tuple[ast.expr, ast.expr, list[ast.stmt]]:
        """``get_state``/``set_state`` closures over ``names`` (None when there are none)."""
        if not names:
            return ast.Constant(None), ast.Constant(None), []
        get = _def(f"_pj_get_state_{n}", [], [ast.Return(ast.Tuple(elts=[_load(x) for x in names], ctx=ast.Load()))])
        set_ = _def(f"_pj_set_state_{n}", ["_pj_state"], [
            ast.Nonlocal(names=list(names)),
            ast.Assign(targets=[ast.Tuple(elts=[_store(x) for x in names], ctx=ast.Store())], value=_load("_pj_state")),
        ])
        get._pj_raw = set_._pj_raw = True  # type: ignore[attr-defined]
        return _load(get.name), _load(set_.name), [get, set_]

    # -- if ------------------------------------------------------------------------------------
    def if_(self, s: ast.If, b: _Bound) -> list[ast.stmt]:
        blockers = _blockers(s.body + s.orelse, own_jumps=True)
        tail = getattr(s, "_pj_tail", False)
        if blockers and not (tail and blockers.keys() == {"return"}):
            return self.native_if(s, *_describe_blockers(blockers), b)
        b.mark_reads(s.test)
        mod = self.modified(s.body + s.orelse)
        pre = self.sentinels_for(mod, b, s)
        # why: each branch starts from the state before the `if` (all of `mod`); the live ones merge
        names = sorted(mod)
        outputs = [] if tail else sorted(mod & self.live.live_out.get(id(s), frozenset()))
        n = self.namer.next()
        then_b, else_b = b.branch(), b.branch()
        then_def = _def(f"_pj_if_true_{n}", [], [*self.declarations(mod, s.body), *self.block(s.body, then_b)])
        else_def = _def(f"_pj_if_false_{n}", [], [*self.declarations(mod, s.orelse), *self.block(s.orelse, else_b)])
        b.defined |= then_b.defined & else_b.defined
        get, set_, state_defs = self.state(n, names)
        call = _call(_ag("if_stmt"), [s.test, _load(then_def.name), _load(else_def.name), get, set_,
                                      _names_tuple(names), _names_tuple(outputs)])
        last: ast.stmt = ast.Return(value=call) if tail else ast.Expr(value=call)
        return [*pre, *_located([then_def, else_def, *state_defs, last], s)]

    def native_if(self, s: ast.If, what: str, advice: str, b: _Bound) -> list[ast.stmt]:
        b.mark_reads(s.test)
        s.test = _call(_ag("python_condition"), [s.test, ast.Constant("if"), ast.Constant(what), ast.Constant(advice)])
        then_b, else_b = b.branch(), b.branch()
        s.body = self.block(s.body, then_b)
        s.orelse = self.block(s.orelse, else_b)
        b.must |= then_b.must & else_b.must
        b.defined |= then_b.defined & else_b.defined
        return [s]

    # -- loops ---------------------------------------------------------------------------------
    def for_(self, s: ast.For, b: _Bound) -> list[ast.stmt]:
        b.mark_reads(s.iter)
        mod = self.modified([*s.body, s.target])
        pre = self.sentinels_for(mod, b, s)
        names = sorted(mod & self.live.header.get(id(s), frozenset()))
        n = self.namer.next()
        target = ast.copy_location(ast.Assign(targets=[s.target], value=_load("_pj_itr")), s.target)
        body_b = b.branch()
        body_b.assign(_bound_names([s.target]))
        body = self.block(s.body, body_b)
        body_def = _def(f"_pj_for_body_{n}", ["_pj_itr"], [*self.declarations(mod, s.body), target, *body])
        flag = getattr(s, "_pj_extra_test", None)
        extra = _lambda(_Jumps(flag, None).go()) if flag else ast.Constant(None)
        get, set_, state_defs = self.state(n, names)
        _mark_iterable(s.iter)
        call = _call(_ag("for_stmt"), [s.iter, extra, _load(body_def.name), get, set_, _names_tuple(names)])
        return [*pre, *_located([body_def, *state_defs, ast.Expr(value=call)], s)]

    def while_(self, s: ast.While, b: _Bound) -> list[ast.stmt]:
        b.mark_reads(s.test)
        mod = self.modified(s.body)
        pre = self.sentinels_for(mod, b, s)
        names = sorted(mod & self.live.header.get(id(s), frozenset()))
        n = self.namer.next()
        test_def = _def(f"_pj_while_test_{n}", [], [ast.Return(value=s.test)])
        body = self.block(s.body, b.branch())
        body_def = _def(f"_pj_while_body_{n}", [], [*self.declarations(mod, s.body), *body])
        get, set_, state_defs = self.state(n, names)
        call = _call(_ag("while_stmt"), [_load(test_def.name), _load(body_def.name), get, set_, _names_tuple(names)])
        return [*pre, *_located([test_def, body_def, *state_defs, ast.Expr(value=call)], s)]

    def native_loop(self, s: ast.For | ast.While | ast.AsyncFor, b: _Bound) -> list[ast.stmt]:
        """A loop left as Python (it holds a ``return``…); refused at trace time if it is over a tensor."""
        what, advice = getattr(s, "_pj_native", ("`async for`", "It runs as Python."))
        b.may |= _bound_names([s])
        body_b = b.branch()
        reason = [ast.Constant(what), ast.Constant(advice)]
        if isinstance(s, ast.While):
            b.mark_reads(s.test)
            s.test = _call(_ag("python_condition"), [s.test, ast.Constant("while"), *reason])
        else:
            b.mark_reads(s.iter)
            _mark_iterable(s.iter)
            s.iter = _call(_ag("python_iterable"), [s.iter, *reason])
            body_b.assign(_bound_names([s.target]))
        s.body = self.block(s.body, body_b)
        s.orelse = self.block(s.orelse, b.branch())
        return [s]


def _mark_iterable(node: ast.expr) -> None:
    """A call in a ``for`` header goes through ``ag__.for_iterable`` (so ``range`` stays lazy)."""
    if isinstance(node, ast.Call):
        node._pj_iterable = True  # type: ignore[attr-defined]


# ============================================================================================
# Pass 4: expressions (calls, and/or/not, conditional expressions, possibly-undefined loads)
# ============================================================================================


def _has_scope_sensitive(node: ast.AST) -> bool:
    """Would wrapping ``node`` in a lambda change its meaning?"""
    return any(isinstance(n, (ast.NamedExpr, ast.Yield, ast.YieldFrom, ast.Await))
               or (isinstance(n, ast.Name) and n.id == "super") for n in ast.walk(node))


def _is_runtime_call(node: ast.Call) -> bool:
    f = node.func
    return isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == _AG


class _Expressions(ast.NodeTransformer):
    def __init__(self, sentinels: set[str], self_name: str | None) -> None:
        self.sentinels = sentinels
        self.self_name = self_name

    def visit(self, node: ast.AST) -> Any:
        if getattr(node, "_pj_raw", False):
            return node
        return super().visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> Any:
        # why: the user's nested defs are converted when called (converted_call), not here
        if getattr(node, "_pj_generated", False):
            self.generic_visit(node)
        return node

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> Any:
        return node

    def visit_ClassDef(self, node: ast.ClassDef) -> Any:
        return node

    def visit_Call(self, node: ast.Call) -> Any:
        self.generic_visit(node)
        name = node.func.id if isinstance(node.func, ast.Name) else None
        if name == "super" and not node.args and self.self_name:
            # why: zero-argument super() would take a generated def's first argument for `self`
            node.args = [_load("__class__"), _load(self.self_name)]
            return node
        if _is_runtime_call(node) or name in _FRAME_BUILTINS:
            return node
        args = ast.Tuple(elts=list(node.args), ctx=ast.Load())
        kwargs = ast.Dict(keys=[ast.Constant(k.arg) if k.arg else None for k in node.keywords],
                          values=[k.value for k in node.keywords])
        helper = "for_iterable" if getattr(node, "_pj_iterable", False) else "converted_call"
        return ast.copy_location(_call(_ag(helper), [node.func, args, kwargs]), node)

    def visit_BoolOp(self, node: ast.BoolOp) -> Any:
        self.generic_visit(node)
        if _has_scope_sensitive(node):
            return node
        helper = "and_" if isinstance(node.op, ast.And) else "or_"
        return ast.copy_location(_call(_ag(helper), [_lambda(v) for v in node.values]), node)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> Any:
        self.generic_visit(node)
        if isinstance(node.op, ast.Not):
            return ast.copy_location(_call(_ag("not_"), [node.operand]), node)
        return node

    def visit_IfExp(self, node: ast.IfExp) -> Any:
        self.generic_visit(node)
        if _has_scope_sensitive(node):
            return node
        return ast.copy_location(_call(_ag("if_exp"), [node.test, _lambda(node.body), _lambda(node.orelse)]), node)

    def visit_Name(self, node: ast.Name) -> Any:
        if getattr(node, "_pj_maybe_undefined", False) and node.id in self.sentinels:
            return ast.copy_location(_call(_ag("ld"), [node]), node)
        return node

