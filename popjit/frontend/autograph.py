"""Autograph: Python control flow on tensors becomes graph loops and conditionals.

:func:`convert` parses a function's source, rewrites its ``for``, ``while``, ``if``, ``and``,
``or``, ``not``, conditional expressions and calls into calls of the runtime functions at the end
of this module, and compiles the result with the original file name and line numbers, so a
tracing error names the user's line. Each rewritten statement decides at trace time, from the
values it sees, what it becomes:

=========================================  ==================================================
Python                                     while tracing
=========================================  ==================================================
``for i in tf.range(a, b, d)``             one ``while`` node; ``trip_count`` when a, b, d are
                                           known while tracing
``for i in range(n)``                      the same if ``n`` is a tensor; a Python (unrolled)
                                           loop if it is a Python int
``for x in t`` (``t`` a tensor)            a counted loop over dim 0 that gathers ``t[i]``
``for x in <Python iterable>``             a Python loop
``while <cond>:``                          a ``while`` node if ``cond`` is a tensor, else Python
                                           (iterations before it first is a tensor, as in
                                           ``while True: … break``, stay unrolled)
``if``/``elif``/``else``, ``a if p else b``  an ``if`` node if the predicate is a tensor, else
                                           Python
``and``/``or``/``not`` on tensors          ``logical_and``/``logical_or``/``logical_not``
``break``/``continue`` in a loop           boolean flags the loop carries
``return`` in the function's last ``if``   an ``if`` node whose branches return the value
calls of user functions and methods        converted the same way (once per code object)
=========================================  ==================================================

**Loop-carried state** is the set of Python locals a loop body (or branch) assigns that are live
afterwards or in the next iteration (a liveness analysis over the function). Each loop body
becomes a nested ``def`` that declares those names ``nonlocal``; ``get_state``/``set_state``
closures read and write them. Tensors, Python numbers (converted to tensors, as TensorFlow does)
and structures of them are carried; other objects (models, optimizers, iterators, unmodified
lists) pass through untouched, and replacing one in a graph loop is an error. A name first
assigned inside a graph loop or in one branch of a graph conditional and used after it is an
error naming the variable and the line.

**Not supported** on tensors (each raises :class:`UnsupportedControlFlowError` naming the
statement and line, and works unchanged on Python values): ``return`` inside a loop, or inside an
``if`` that is not the last statement of the function (an early ``return`` whose ``if`` always
returns is fine: what follows becomes its ``else``); ``yield``/``await``/``global``/``nonlocal``
inside a converted statement; ``:=`` in a ``while`` condition; a ``break`` on a tensor in a loop
over a Python iterable. ``print()`` stays Python's ``print``: inside a traced function it prints
the symbolic tensor once, while tracing. Python objects mutated inside a graph loop
(``list.append``) are mutated once, while tracing. Functions that popjit itself calls back (the
bodies given to ``tf.while_loop``/``tf.cond``, ``strategy.run``) are converted only if the caller
converts them (:func:`convert`).

``to_code(fn)`` returns the converted source; ``POPJIT_DEBUG>=2`` prints it at each conversion.
Functions without source (REPL lambdas, builtins, C functions), generators, lambdas and library
code (popjit, the standard library, site-packages) are never converted.
"""

from __future__ import annotations
import __future__

import ast
import builtins
import functools
import inspect
import logging
import os
import sys
import sysconfig
import types
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from popjit import config, dtypes
from popjit.errors import InvalidArgumentError, UnimplementedError
from popjit.frontend import array_ops, control_flow, math_ops, nest
from popjit.frontend.convert import convert_to_tensor
from popjit.frontend.tensor import Tensor
from popjit.frontend.tracing import current_trace
from popjit.frontend.variables import Variable
from popjit.source import SourceLoc, user_location, where

log = logging.getLogger("popjit")

__all__ = [
    "LoopVariableError",
    "Undefined",
    "UnsupportedControlFlowError",
    "convert",
    "converted_call",
    "do_not_convert",
    "to_code",
]

_AG = "ag__"  # the name converted code uses for this module


class UnsupportedControlFlowError(UnimplementedError, NotImplementedError):  # type: ignore[misc, valid-type]
    """A statement that autograph cannot turn into graph control flow on a tensor."""


class LoopVariableError(InvalidArgumentError, ValueError):  # type: ignore[misc, valid-type]
    """A loop-carried or branch-merged Python local that a graph loop or conditional cannot carry."""


# ============================================================================================
# Public API
# ============================================================================================


def convert(fn: Callable) -> Callable:
    """``fn`` with its Python control flow on tensors rewritten into graph control flow.

    Functions, methods, ``functools.partial`` objects and callable objects of user classes are
    converted; anything that cannot be (no source, library code, lambdas) is returned unchanged.
    """
    return _target(fn)


def to_code(fn: Callable) -> str:
    """The source autograph generates for ``fn`` (a function, method or ``tf.function``)."""
    fn = getattr(fn, "python_function", fn)
    while isinstance(fn, (functools.partial, types.MethodType)):
        fn = fn.func if isinstance(fn, functools.partial) else fn.__func__
    if not isinstance(fn, types.FunctionType):
        raise ValueError(f"autograph converts Python functions, not {type(fn).__name__}")
    entry = _converted_code(fn)
    if isinstance(entry, str):
        raise ValueError(f"autograph cannot convert {fn.__qualname__}: {entry}")
    return entry.source


def do_not_convert(fn: Callable) -> Callable:
    """Decorator: autograph calls ``fn`` as written (``tf.autograph.experimental.do_not_convert``)."""
    fn.__pj_do_not_convert__ = True  # type: ignore[attr-defined]
    return fn


def converted_call(f: Any, args: tuple, kwargs: dict) -> Any:
    """Call ``f``, converting it first if it is user code (every call in converted code goes here)."""
    if f is builtins.range and current_trace() is not None and any(_is_graph_value(a) for a in args):
        return array_ops.range_(*args)
    return _target(f)(*args, **kwargs)


# ============================================================================================
# Which callables are converted, and the caches
# ============================================================================================


@dataclass(frozen=True)
class _Converted:
    code: types.CodeType
    source: str


class _NotConvertible(Exception):
    """Why a function is left as written."""


_CODE_CACHE: dict[types.CodeType, _Converted | str] = {}
_FUNCTION_CACHE: weakref.WeakKeyDictionary[Callable, Callable | None] = weakref.WeakKeyDictionary()
_AG_CELL = types.CellType(sys.modules[__name__])
_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_LIBRARY_PREFIXES = tuple(
    os.path.abspath(p) + os.sep
    for p in {_PKG_DIR, os.path.join(os.path.dirname(_PKG_DIR), "kernels"),
              sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"]}
)
_NON_CODE_FLAGS = (inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR
                   | inspect.CO_ITERABLE_COROUTINE)


def _target(f: Any) -> Any:
    """What to call instead of ``f``: its converted version, or ``f`` itself."""
    if isinstance(f, types.FunctionType):
        return _convert_function(f)
    if isinstance(f, types.MethodType):
        func = _target(f.__func__)
        return f if func is f.__func__ else types.MethodType(func, f.__self__)
    if isinstance(f, functools.partial):
        func = _target(f.func)
        return f if func is f.func else functools.partial(func, *f.args, **f.keywords)
    if isinstance(f, (type, types.BuiltinFunctionType, types.BuiltinMethodType)):
        return f
    call = type(f).__call__ if callable(f) else None
    if isinstance(call, types.FunctionType):
        converted = _convert_function(call)
        return f if converted is call else types.MethodType(converted, f)
    return f


def _convert_function(fn: types.FunctionType) -> Callable:
    try:
        cached = _FUNCTION_CACHE[fn]
        return fn if cached is None else cached
    except KeyError:
        pass
    converted = _instantiate(fn) if _wants_conversion(fn) else fn
    # why: storing fn itself as the value would keep the weak key alive forever
    _FUNCTION_CACHE[fn] = None if converted is fn else converted
    return converted


def _wants_conversion(fn: types.FunctionType) -> bool:
    if getattr(fn, "__pj_converted__", False) or getattr(fn, "__pj_do_not_convert__", False):
        return False
    code = fn.__code__
    return code.co_name != "<lambda>" and not code.co_flags & _NON_CODE_FLAGS and _is_user_file(code.co_filename)


def _is_user_file(filename: str) -> bool:
    if filename.startswith(("<popjit", "<frozen")):
        return False
    path = os.path.abspath(filename)
    parts = path.split(os.sep)
    return not path.startswith(_LIBRARY_PREFIXES) and "site-packages" not in parts and "dist-packages" not in parts


def _instantiate(fn: types.FunctionType) -> Callable:
    """A new function object running the converted code with ``fn``'s globals, closure and defaults."""
    entry = _converted_code(fn)
    if isinstance(entry, str):
        log.debug("autograph: %s runs as written: %s", fn.__qualname__, entry)
        return fn
    cells = dict(zip(fn.__code__.co_freevars, fn.__closure__ or ()))
    cells[_AG] = _AG_CELL
    new = types.FunctionType(entry.code, fn.__globals__, fn.__name__, fn.__defaults__,
                             tuple(cells[name] for name in entry.code.co_freevars))
    new.__kwdefaults__ = dict(fn.__kwdefaults__) if fn.__kwdefaults__ else None
    new.__dict__.update(fn.__dict__)
    new.__qualname__ = fn.__qualname__
    new.__module__ = fn.__module__
    new.__doc__ = fn.__doc__
    new.__annotations__ = fn.__annotations__
    new.__pj_converted__ = True  # type: ignore[attr-defined]
    return new


def _converted_code(fn: types.FunctionType) -> _Converted | str:
    """The converted code object for ``fn``'s code (cached), or why there is none."""
    code = fn.__code__
    entry = _CODE_CACHE.get(code)
    if entry is None:
        try:
            entry = _transform(fn)
        except _NotConvertible as e:
            entry = str(e)
        except Exception as e:  # why: a converter bug must not stop the program; it runs as written
            log.warning("autograph could not convert %s (it runs as written): %r", fn.__qualname__, e)
            entry = f"internal error: {e!r}"
        _CODE_CACHE[code] = entry
    return entry


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
# AST helpers
# ============================================================================================

_NEW_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda,
               ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_FRAME_BUILTINS = frozenset({"super", "locals", "globals", "vars", "eval", "exec", "dir"})


def _load(name: str) -> ast.Name:
    return ast.Name(id=name, ctx=ast.Load())


def _store(name: str) -> ast.Name:
    return ast.Name(id=name, ctx=ast.Store())


def _ag(attr: str) -> ast.Attribute:
    return ast.Attribute(value=_load(_AG), attr=attr, ctx=ast.Load())


def _call(func: ast.expr, args: Sequence[ast.expr]) -> ast.Call:
    return ast.Call(func=func, args=list(args), keywords=[])


def _arguments(params: Sequence[str]) -> ast.arguments:
    return ast.arguments(posonlyargs=[], args=[ast.arg(arg=p) for p in params], vararg=None, kwonlyargs=[],
                         kw_defaults=[], kwarg=None, defaults=[])


def _def(name: str, params: Sequence[str], body: list[ast.stmt]) -> ast.FunctionDef:
    fd = ast.FunctionDef(name=name, args=_arguments(params), body=body or [ast.Pass()], decorator_list=[],
                         returns=None, type_comment=None)
    fd._pj_generated = True  # type: ignore[attr-defined]
    return fd


def _lambda(body: ast.expr) -> ast.Lambda:
    return ast.Lambda(args=_arguments([]), body=body)


def _assign(name: str, value: ast.expr) -> ast.Assign:
    return ast.Assign(targets=[_store(name)], value=value)


def _names_tuple(names: Sequence[str]) -> ast.Tuple:
    return ast.Tuple(elts=[ast.Constant(n) for n in names], ctx=ast.Load())


def _located(nodes: list[ast.stmt], at: ast.AST) -> list[ast.stmt]:
    """Generated statements placed at the first line of ``at`` (a single-line span)."""
    for n in nodes:
        n.lineno, n.col_offset = at.lineno, at.col_offset  # type: ignore[attr-defined]
        n.end_lineno, n.end_col_offset = at.lineno, at.col_offset  # type: ignore[attr-defined]
    return nodes


def _fix_locations(node: ast.AST, line: int, col: int) -> None:
    """Give generated nodes their parent's start as a one-line span.

    why: not ``ast.fix_missing_locations``: it copies a compound statement's end line, and Python
    3.11 reports a method call at its attribute's end line, so frames would point past the loop.
    """
    if "lineno" in node._attributes:
        if getattr(node, "lineno", None) is None:
            node.lineno, node.col_offset = line, col  # type: ignore[attr-defined]
            node.end_lineno, node.end_col_offset = line, col  # type: ignore[attr-defined]
        line, col = node.lineno, node.col_offset  # type: ignore[attr-defined]
    for child in ast.iter_child_nodes(node):
        _fix_locations(child, line, col)


def _scope_nodes(roots: Iterable[ast.AST], stop: tuple[type, ...] = ()) -> Iterator[ast.AST]:
    """``roots`` and everything below them in the same scope; nested scopes and ``stop`` nodes are
    yielded but not entered."""
    stack = list(roots)
    while stack:
        n = stack.pop()
        yield n
        if not isinstance(n, _NEW_SCOPES + stop):
            stack.extend(ast.iter_child_nodes(n))


def _bound_names(roots: Iterable[ast.AST]) -> set[str]:
    """Names the statements bind in the current scope (assign, augassign, for, with, import, def…)."""
    out: set[str] = set()
    for n in _scope_nodes(roots):
        if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load):
            out.add(n.id)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(n.name)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            out.update((a.asname or a.name).split(".")[0] for a in n.names if a.name != "*")
        elif isinstance(n, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and n.name:
            out.add(n.name)
        elif isinstance(n, ast.MatchMapping) and n.rest:
            out.add(n.rest)
        elif isinstance(n, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            # why: an assignment expression in a comprehension binds in the enclosing scope
            out.update(w.target.id for w in ast.walk(n) if isinstance(w, ast.NamedExpr))
    return out


def _deleted_names(s: ast.stmt) -> set[str]:
    return {n.id for n in _scope_nodes([s]) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Del)}


def _read_names(node: ast.AST | None) -> frozenset[str]:
    """Every name ``node`` may read, including inside nested functions (a conservative answer)."""
    if node is None:
        return frozenset()
    out = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Store):
            out.add(n.id)
        elif isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name):
            out.add(n.target.id)
    return frozenset(out)


def _declared(body: list[ast.stmt], kind: type) -> set[str]:
    return {name for n in _scope_nodes(body) if isinstance(n, kind) for name in n.names}  # type: ignore[attr-defined]


def _param_names(args: ast.arguments) -> set[str]:
    params = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
    return {a.arg for a in params if a is not None}


def _blockers(stmts: list[ast.stmt], own_jumps: bool) -> dict[str, int]:
    """Statements that keep a block from moving into a nested ``def``: kind → first line.

    ``own_jumps``: also ``break``/``continue`` that leave the block (not those of inner loops).
    """
    kinds = {ast.Return: "return", ast.Yield: "yield", ast.YieldFrom: "yield", ast.Await: "await",
             ast.Global: "global", ast.Nonlocal: "nonlocal"}
    found: dict[str, int] = {}
    for n in _scope_nodes(stmts):
        kind = kinds.get(type(n))
        if kind and kind not in found:
            found[kind] = n.lineno  # type: ignore[attr-defined]
    if own_jumps:
        for n in _scope_nodes(stmts, stop=_LOOPS):
            if isinstance(n, (ast.Break, ast.Continue)):
                found.setdefault("break" if isinstance(n, ast.Break) else "continue", n.lineno)
    return found


_ADVICE = {
    "return": "Assign the result to a variable (and `break` out of a loop), then return it at the end of the "
              "function; a `return` in the last `if` of a function is supported.",
    "yield": "Generators run as Python: compute the values with tensor ops, then yield them.",
    "await": "Coroutines run as Python: await outside the statement.",
    "global": "Declare the name at the top of the function.",
    "nonlocal": "Declare the name at the top of the function.",
    "break": "Its loop stays a Python loop because it also holds a `return`; without it the loop becomes a "
             "graph loop that can break on a tensor.",
    "`:=` in the condition": "Assign the value before the loop and again at the end of its body instead.",
}
_ADVICE["continue"] = _ADVICE["break"].replace("break on", "continue on")


def _describe_blockers(found: dict[str, int]) -> tuple[str, str]:
    """(what, advice) for the first statement that keeps a block as Python."""
    kind, line = min(found.items(), key=lambda kv: kv[1])
    return f"{kind if kind.startswith('`') else f'`{kind}`'} (line {line})", _ADVICE[kind]


def _terminates(stmts: list[ast.stmt]) -> bool:
    """Does every path through ``stmts`` end in ``return`` or ``raise``?"""
    if not stmts:
        return False
    last = stmts[-1]
    if isinstance(last, (ast.Return, ast.Raise)):
        return True
    if isinstance(last, ast.If):
        return _terminates(last.body) and _terminates(last.orelse)
    if isinstance(last, (ast.With, ast.AsyncWith)):
        return _terminates(last.body)
    return False


class _Namer:
    """Fresh names for generated functions and flags."""

    def __init__(self) -> None:
        self.count = 0

    def next(self) -> int:
        self.count += 1
        return self.count


# ============================================================================================
# Pass 1: break/continue become flags; the function's final `if` absorbs what follows an early
# return; a loop's `else` moves after the loop.
# ============================================================================================


@dataclass
class _Jumps:
    brk: str | None
    cont: str | None

    def go(self) -> ast.expr:
        """``ag__.not_any(flags)``: true while neither ``break`` nor ``continue`` has run."""
        flags = [f for f in (self.cont, self.brk) if f]
        return _call(_ag("not_any"), [_load(f) for f in flags])


class _Lowering:
    def __init__(self, namer: _Namer) -> None:
        self.namer = namer

    def block(self, stmts: list[ast.stmt], tail: bool) -> list[ast.stmt]:
        """``tail``: falling off the end of this block returns from the function."""
        out: list[ast.stmt] = []
        for k, s in enumerate(stmts):
            last = k == len(stmts) - 1
            if tail and not last and isinstance(s, ast.If) and _blockers(s.body + s.orelse, False).get("return"):
                rest = stmts[k + 1:]
                if _terminates(s.body):
                    s.orelse = [*s.orelse, *rest]
                    last = True
                elif _terminates(s.orelse):
                    s.body = [*s.body, *rest]
                    last = True
                if last:
                    out.extend(self.stmt(s, tail=True))
                    return out
            out.extend(self.stmt(s, tail and last))
        return out

    def stmt(self, s: ast.stmt, tail: bool) -> list[ast.stmt]:
        if isinstance(s, ast.If):
            s._pj_tail = tail  # type: ignore[attr-defined]
            s.body, s.orelse = self.block(s.body, tail), self.block(s.orelse, tail)
            return [s]
        if isinstance(s, (ast.For, ast.While)):
            return self.loop(s)
        for name in ("body", "orelse", "finalbody"):
            if isinstance(getattr(s, name, None), list):
                setattr(s, name, self.block(getattr(s, name), False))
        for h in getattr(s, "handlers", []):
            h.body = self.block(h.body, False)
        for c in getattr(s, "cases", []):
            c.body = self.block(c.body, False)
        return [s]

    def loop(self, s: ast.For | ast.While) -> list[ast.stmt]:
        blockers = _blockers(s.body, own_jumps=False)
        if isinstance(s, ast.While):
            # why: a graph loop's condition and body are separate regions; the body cannot see a
            # value the condition assigned
            walrus = [n.lineno for n in _scope_nodes([s.test]) if isinstance(n, ast.NamedExpr)]
            if walrus:
                blockers["`:=` in the condition"] = walrus[0]
        if blockers:
            s._pj_native = _describe_blockers(blockers)  # type: ignore[attr-defined]
            s.body, s.orelse = self.block(s.body, False), self.block(s.orelse, False)
            return [s]
        jumps = _blockers(s.body, own_jumps=True)
        n = self.namer.next()
        flags = _Jumps(f"_pj_break_{n}" if "break" in jumps else None,
                       f"_pj_continue_{n}" if "continue" in jumps else None)
        pre: list[ast.stmt] = []
        post = s.orelse
        s.orelse = []
        if flags.brk or flags.cont:
            s.body = self.guard(s.body, flags)
        if flags.cont:
            s.body = [*_located([_assign(flags.cont, ast.Constant(False))], s), *s.body]
        if flags.brk:
            pre = _located([_assign(flags.brk, ast.Constant(False))], s)
            if post:
                post = _located([ast.If(test=_Jumps(flags.brk, None).go(), body=post, orelse=[])], post[0])
            if isinstance(s, ast.For):
                s._pj_extra_test = flags.brk  # type: ignore[attr-defined]
            else:
                s.test = _call(_ag("and_"), [_lambda(_Jumps(flags.brk, None).go()), _lambda(s.test)])
        s.body = self.block(s.body, False)
        return [*pre, s, *self.block(post, False)]

    def guard(self, stmts: list[ast.stmt], flags: _Jumps) -> list[ast.stmt]:
        """``break``/``continue`` set their flag; what follows a statement that may set one runs
        under ``if ag__.not_any(flags):``."""
        out: list[ast.stmt] = []
        for k, s in enumerate(stmts):
            if isinstance(s, (ast.Break, ast.Continue)):
                flag = flags.brk if isinstance(s, ast.Break) else flags.cont
                out.extend(_located([_assign(flag, ast.Constant(True))], s))  # type: ignore[arg-type]
                return out
            out.append(s)
            if not _blockers([s], own_jumps=True).keys() & {"break", "continue"}:
                continue
            for name in ("body", "orelse", "finalbody"):
                if isinstance(getattr(s, name, None), list):
                    setattr(s, name, self.guard(getattr(s, name), flags))
            for h in getattr(s, "handlers", []):
                h.body = self.guard(h.body, flags)
            for c in getattr(s, "cases", []):
                c.body = self.guard(c.body, flags)
            rest = stmts[k + 1:]
            if rest:
                out.extend(_located([ast.If(test=flags.go(), body=self.guard(rest, flags), orelse=[])], rest[0]))
            return out
        return out


# ============================================================================================
# Pass 2: liveness (backwards, over structured control flow)
# ============================================================================================


class _Liveness:
    """Names live after each ``if`` and at the head of each loop."""

    def __init__(self) -> None:
        self.live_out: dict[int, frozenset[str]] = {}
        self.header: dict[int, frozenset[str]] = {}
        self.loops: list[tuple[frozenset[str], frozenset[str]]] = []  # (continue target, break target)
        self.always: frozenset[str] = frozenset()  # live everywhere in a `try` body (its handlers)

    def block(self, stmts: list[ast.stmt], out: frozenset[str]) -> frozenset[str]:
        live = out
        for s in reversed(stmts):
            live = self.stmt(s, live | self.always)
        return live

    def stmt(self, s: ast.stmt, out: frozenset[str]) -> frozenset[str]:
        handler = getattr(self, f"_{type(s).__name__}", None)
        if handler is not None:
            return handler(s, out)
        return (out - (_bound_names([s]) - _deleted_names(s))) | _read_names(s)

    def _If(self, s: ast.If, out: frozenset[str]) -> frozenset[str]:
        self.live_out[id(s)] = out
        return _read_names(s.test) | self.block(s.body, out) | self.block(s.orelse, out)

    def _loop(self, s: ast.stmt, out: frozenset[str], head_reads: frozenset[str],
              targets: set[str]) -> frozenset[str]:
        fixed = self.block(s.orelse, out) | head_reads  # type: ignore[attr-defined]
        header = fixed
        while True:
            self.loops.append((header, out))
            body_in = self.block(s.body, header)  # type: ignore[attr-defined]
            self.loops.pop()
            new = fixed | (body_in - targets)
            if new == header:
                break
            header = new
        self.live_out[id(s)] = out
        self.header[id(s)] = header
        return header

    def _For(self, s: ast.For, out: frozenset[str]) -> frozenset[str]:
        flag = getattr(s, "_pj_extra_test", None)
        head = frozenset([flag]) if flag else frozenset()
        return self._loop(s, out, head, _bound_names([s.target])) | _read_names(s.iter)

    _AsyncFor = _For

    def _While(self, s: ast.While, out: frozenset[str]) -> frozenset[str]:
        return self._loop(s, out, _read_names(s.test), set())

    def _Try(self, s: ast.Try, out: frozenset[str]) -> frozenset[str]:
        fin = self.block(s.finalbody, out)
        handlers = frozenset().union(*(self.block(h.body, fin) | _read_names(h.type) for h in s.handlers))
        orelse = self.block(s.orelse, fin)
        saved = self.always
        self.always = saved | handlers | fin
        body = self.block(s.body, orelse)
        self.always = saved
        return body | handlers | fin

    _TryStar = _Try

    def _With(self, s: ast.With, out: frozenset[str]) -> frozenset[str]:
        items = frozenset().union(*(_read_names(i.context_expr) for i in s.items))
        return items | self.block(s.body, out)

    _AsyncWith = _With

    def _Match(self, s: ast.Match, out: frozenset[str]) -> frozenset[str]:
        live = _read_names(s.subject) | out
        for c in s.cases:
            live |= self.block(c.body, out) | _read_names(c.pattern) | _read_names(c.guard)
        return live

    def _Return(self, s: ast.stmt, out: frozenset[str]) -> frozenset[str]:
        return _read_names(s) | self.always

    _Raise = _Return

    def _Break(self, s: ast.Break, out: frozenset[str]) -> frozenset[str]:
        return self.loops[-1][1] if self.loops else out

    def _Continue(self, s: ast.Continue, out: frozenset[str]) -> frozenset[str]:
        return self.loops[-1][0] if self.loops else out


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


# ============================================================================================
# Runtime: what converted code calls
# ============================================================================================


class Undefined:
    """The value of a local that has not been assigned yet (set before a converted statement)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<undefined {self.name!r}>"

    def fail(self, *args: Any, **kwargs: Any) -> Any:
        raise UnboundLocalError(
            f"local variable '{self.name}' is used before it is assigned: it is assigned only in a branch or "
            f"loop body that did not assign it on this path{where(user_location(2))}"
        )

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return self.fail()


for _dunder in ("bool", "iter", "len", "call", "getitem", "setitem", "neg", "pos", "abs", "invert", "index",
                "int", "float", "add", "radd", "sub", "rsub", "mul", "rmul", "truediv", "rtruediv", "floordiv",
                "rfloordiv", "mod", "rmod", "pow", "rpow", "matmul", "rmatmul", "and", "rand", "or", "ror",
                "xor", "rxor", "lt", "le", "gt", "ge", "iadd", "isub", "imul", "itruediv", "array"):
    setattr(Undefined, f"__{_dunder}__", Undefined.fail)


def ld(value: Any) -> Any:
    """A read of a local that may still be :class:`Undefined`."""
    if isinstance(value, Undefined):
        value.fail()
    return value


def _is_graph_value(x: Any) -> bool:
    """A symbolic tensor, or a variable while tracing (its read is symbolic)."""
    return (isinstance(x, Tensor) and x.is_symbolic) or (isinstance(x, Variable) and current_trace() is not None)


def _as_predicate(x: Any) -> Any:
    return x.read_value() if isinstance(x, Variable) and current_trace() is not None else x


def not_(x: Any) -> Any:
    """``not x``."""
    x = _as_predicate(x)
    return math_ops.logical_not(x) if _is_graph_value(x) else not x


def not_any(*flags: Any) -> Any:
    """``not (f1 or f2 …)`` for break/continue flags."""
    flags = tuple(_as_predicate(f) for f in flags)
    if not any(_is_graph_value(f) for f in flags):
        return not any(flags)
    out = flags[0]
    for f in flags[1:]:
        out = math_ops.logical_or(out, f)
    return math_ops.logical_not(out)


def and_(*operands: Callable[[], Any]) -> Any:
    """``a and b …``: Python's short-circuit on Python values, ``logical_and`` once one is a tensor."""
    value = operands[0]()
    for operand in operands[1:]:
        if _is_graph_value(value):
            value = math_ops.logical_and(value, operand())
        elif not value:
            return value
        else:
            value = operand()
    return value


def or_(*operands: Callable[[], Any]) -> Any:
    """``a or b …``: Python's short-circuit on Python values, ``logical_or`` once one is a tensor."""
    value = operands[0]()
    for operand in operands[1:]:
        if _is_graph_value(value):
            value = math_ops.logical_or(value, operand())
        elif value:
            return value
        else:
            value = operand()
    return value


def python_condition(value: Any, kind: str, what: str, advice: str) -> Any:
    """The test of an ``if``/``while`` left as Python because it holds ``what``; refuses a tensor."""
    if _is_graph_value(value):
        statement, becomes = ("an `if` statement", "conditional") if kind == "if" else ("a `while` loop", "loop")
        raise UnsupportedControlFlowError(
            f"{what} inside {statement} whose condition is a tensor is not supported: autograph turns such a "
            f"statement into a graph {becomes}, which cannot hold it. {advice}{where(user_location(2))}"
        )
    return value


def python_iterable(iterable: Any, what: str, advice: str) -> Any:
    """The iterable of a ``for`` left as Python because it holds ``what``; refuses a tensor."""
    if isinstance(iterable, _Range) or _is_graph_value(iterable):
        raise UnsupportedControlFlowError(
            f"{what} inside a `for` loop over a tensor is not supported: autograph turns the loop into a graph "
            f"loop, which cannot hold it. {advice}{where(user_location(2))}"
        )
    return iterable


# -- loop-carried and branch-merged state -------------------------------------------------------


def _is_number(x: Any) -> bool:
    return isinstance(x, (bool, int, float, np.generic, np.ndarray))


def _carriable(x: Any) -> bool:
    return isinstance(x, Tensor) or _is_number(x)


def _describe(x: Any) -> str:
    if isinstance(x, Tensor):
        return f"a {x.aval} tensor"
    if isinstance(x, Undefined):
        return "not assigned"
    return "None" if x is None else f"a Python {type(x).__name__}"


def _state_fns(get_state: Callable | None, set_state: Callable | None) -> tuple[Callable, Callable]:
    if get_state is None or set_state is None:
        return (lambda: ()), (lambda values: None)
    return get_state, set_state


class _Carry:
    """The Python locals a traced loop carries: their tensor leaves become loop variables; the other
    leaves (models, undefined names…) must come out of each iteration unchanged."""

    def __init__(self, names: Sequence[str], values: Sequence[Any], kind: str, loc: SourceLoc | None) -> None:
        self.names, self.kind, self.loc = list(names), kind, loc
        self.leaves, self.tree = nest.flatten_with_tree(tuple(values))
        self.owner = [name for name, v in zip(names, values) for _ in nest.flatten(v)]
        self.slots = [k for k, x in enumerate(self.leaves) if _carriable(x)]
        self.init = [convert_to_tensor(self.leaves[k]) for k in self.slots]

    def values(self, carried: Sequence[Any]) -> tuple:
        leaves = list(self.leaves)
        for k, t in zip(self.slots, carried):
            leaves[k] = t
        return nest.unflatten(self.tree, leaves)

    def next_leaves(self, values: Sequence[Any]) -> list[Tensor]:
        """The loop variables after one iteration, checked against those before it."""
        leaves, tree = nest.flatten_with_tree(tuple(values))
        if repr(tree) != repr(self.tree):
            self.structure_error(values)
        slots = dict(zip(self.slots, self.init))
        out = []
        for k, (old, new) in enumerate(zip(self.leaves, leaves)):
            if k in slots:
                out.append(self.checked(self.owner[k], slots[k], new))
            elif new is not old:
                raise self.replaced_error(self.owner[k], old, new)
        return out

    def checked(self, name: str, before: Tensor, new: Any) -> Tensor:
        if not _carriable(new):
            raise LoopVariableError(
                f"'{name}' is {_describe(before)} before the {self.kind} loop but {_describe(new)} after one "
                f"iteration: a graph loop carries tensors of a fixed shape and dtype{where(self.loc)}"
            )
        t = convert_to_tensor(new, dtype_hint=before.dtype) if not isinstance(new, Tensor) else new
        if t.aval != before.aval:
            raise LoopVariableError(
                f"'{name}' is {_describe(before)} before the {self.kind} loop but {_describe(t)} after one "
                "iteration. A graph loop carries values of a fixed shape and dtype (XLA needs static shapes): "
                f"give it its final shape and dtype before the loop, or cast/reshape it in the body{where(self.loc)}"
            )
        return t

    def replaced_error(self, name: str, old: Any, new: Any) -> LoopVariableError:
        if isinstance(old, Undefined):
            return LoopVariableError(
                f"'{name}' is assigned inside the {self.kind} loop but not before it, and is used after the loop "
                "or in the next iteration. A graph loop can only carry a value that exists before it: assign "
                f"'{name}' before the loop (e.g. `{name} = tf.zeros(shape)`){where(self.loc)}"
            )
        return LoopVariableError(
            f"'{name}' is {_describe(old)} before the {self.kind} loop and the loop body makes it "
            f"{_describe(new)}. A graph loop over a tensor can only carry tensors and Python numbers: initialize "
            f"it with a tensor of its final shape and dtype before the loop{where(self.loc)}"
        )

    def structure_error(self, values: Sequence[Any]) -> None:
        before = nest.unflatten(self.tree, self.leaves)
        for name, old, new in zip(self.names, before, values):
            if repr(nest.flatten_with_tree(old)[1]) != repr(nest.flatten_with_tree(new)[1]):
                if isinstance(old, Undefined):
                    raise self.replaced_error(name, old, new)
                raise LoopVariableError(
                    f"'{name}' changes structure in the {self.kind} loop: {old!r} before it, {new!r} after one "
                    f"iteration. A graph loop carries a fixed structure of tensors{where(self.loc)}"
                )


# -- loops ---------------------------------------------------------------------------------------


@dataclass
class _Range:
    """``range``/``tf.range`` bounds in a ``for`` header, kept lazy so the loop needs no ``iota``."""

    start: Any
    limit: Any
    delta: Any
    dtype: Any

    def tensors(self) -> tuple[Tensor, Tensor, Tensor]:
        """start, limit, delta as tensors of one dtype (tf.range's: the float one if any, else limit's)."""
        ts = [convert_to_tensor(x) for x in (self.start, self.limit, self.delta)]
        if self.dtype is not None:
            dtype = dtypes.as_dtype(self.dtype)
        else:
            dtype = next((t.dtype for t in ts if t.dtype.is_floating), ts[1].dtype)
        trace = current_trace()
        delta = trace.constant_value(ts[2]) if trace is not None else None
        if delta is not None and not np.all(delta):
            raise InvalidArgumentError(f"Requires delta != 0: 0 [Op:Range]{where(user_location(2))}")
        return tuple(math_ops.cast(t, dtype) for t in ts)  # type: ignore[return-value]


_TF_RANGE_SIGNATURE = inspect.signature(array_ops.range_)


def for_iterable(func: Any, args: tuple, kwargs: dict) -> Any:
    """The iterable of a ``for`` whose header is a call: ``range``/``tf.range`` stay lazy while tracing."""
    tracing = current_trace() is not None
    if func is builtins.range and tracing and not kwargs and any(_is_graph_value(a) for a in args):
        start, limit, delta = _range_args(args)
        return _Range(start, limit, delta, None)
    if func is array_ops.range_ and tracing:
        bound = _TF_RANGE_SIGNATURE.bind(*args, **kwargs)
        bound.apply_defaults()
        a = bound.arguments
        start, limit = (0, a["start"]) if a["limit"] is None else (a["start"], a["limit"])
        return _Range(start, limit, a["delta"], a["dtype"])
    return converted_call(func, args, kwargs)


def _range_args(args: Sequence[Any]) -> tuple[Any, Any, Any]:
    """(start, limit, delta) from ``range``'s positional forms."""
    if len(args) == 1:
        return 0, args[0], 1
    return args[0], args[1], args[2] if len(args) > 2 else 1


def for_stmt(iterable: Any, extra_test: Callable[[], Any] | None, body: Callable[[Any], None],
             get_state: Callable | None, set_state: Callable | None, names: Sequence[str]) -> None:
    """A ``for`` statement: a graph loop over a tensor or a tensor range, else a Python loop."""
    if current_trace() is not None:
        rng, item = _graph_iteration(iterable)
        if rng is not None:
            get, put = _state_fns(get_state, set_state)
            _traced_for(rng, item, extra_test, body, get, put, names, user_location(2))
            return
    _python_for(iterable, extra_test, body)


def _graph_iteration(iterable: Any) -> tuple[_Range | None, Callable[[Tensor], Any] | None]:
    """How a graph loop iterates over ``iterable``: its index range and the item for each index."""
    if isinstance(iterable, _Range):
        return iterable, None
    if isinstance(iterable, Variable):
        iterable = iterable.read_value()
    if not (isinstance(iterable, Tensor) and iterable.is_symbolic):
        return None, None
    if iterable.ndim == 0:
        raise TypeError(f"Cannot iterate over a scalar tensor{where(user_location(3))}")
    producer = iterable._sym.producer  # type: ignore[union-attr]
    if producer is not None and producer.op == "iota" and iterable.ndim == 1:
        # why: `r = tf.range(n); for i in r` needs no gather: the iota's own bounds drive the loop
        a, n = producer.attrs, iterable.shape[0]
        return _Range(a["start"], a["start"] + n * a["delta"], a["delta"], iterable.dtype), None
    t = iterable
    return _Range(0, t.shape[0], 1, dtypes.int32), (lambda i: _row(t, i))


def _row(t: Tensor, i: Tensor) -> Tensor:
    """``t[i]`` for a loop index ``i`` (never negative, so no wrap-around select)."""
    from popjit.frontend import gather_ops

    return gather_ops.gather(t, i, axis=0)


def _python_for(iterable: Any, extra_test: Callable[[], Any] | None, body: Callable[[Any], None]) -> None:
    it = iter(iterable)
    while extra_test is None or _python_flag(extra_test()):
        try:
            item = next(it)
        except StopIteration:
            return
        body(item)


def _python_flag(value: Any) -> bool:
    if _is_graph_value(value):
        raise UnsupportedControlFlowError(
            "A `break` that depends on a tensor cannot stop a Python `for` loop (one over a Python iterable, "
            "unrolled while tracing): iterate over tf.range(...) or a tensor so that it becomes a graph loop"
            f"{where(user_location(3))}"
        )
    return bool(value)


def _traced_for(rng: _Range, item: Callable[[Tensor], Any] | None, extra_test: Callable[[], Any] | None,
                body: Callable[[Any], None], get_state: Callable, set_state: Callable, names: Sequence[str],
                loc: SourceLoc | None) -> None:
    carry = _Carry(names, get_state(), "for", loc)

    def step(i: Tensor, *leaves: Any) -> list[Tensor]:
        set_state(carry.values(leaves))
        body(item(i) if item is not None else i)
        return carry.next_leaves(get_state())

    start, limit, delta = rng.tensors()
    trace = current_trace()
    # why: for_range counts up unless delta is a known negative constant
    if extra_test is None and start.dtype.is_integer and trace is not None and trace.constant_value(delta) is not None:
        out = control_flow.for_range(start, limit, delta, step, carry.init)
    else:
        out = _guarded_range(start, limit, delta, step, extra_test, carry, set_state)
    set_state(carry.values(out))


def _guarded_range(start: Tensor, limit: Tensor, delta: Tensor, step: Callable[..., list[Tensor]],
                   extra_test: Callable[[], Any] | None, carry: _Carry, set_state: Callable) -> list[Tensor]:
    """A range loop that also stops when ``extra_test()`` is false (``break``), or over floats."""
    trace = current_trace()
    d = trace.constant_value(delta) if trace is not None else None

    def in_range(i: Tensor) -> Tensor:
        if d is not None:
            return math_ops.less(i, limit) if d > 0 else math_ops.greater(i, limit)
        up = math_ops.logical_and(math_ops.greater(delta, 0), math_ops.less(i, limit))
        down = math_ops.logical_and(math_ops.less(delta, 0), math_ops.greater(i, limit))
        return math_ops.logical_or(up, down)

    def cond(i: Tensor, *leaves: Any) -> Tensor:
        go = in_range(i)
        if extra_test is not None:
            set_state(carry.values(leaves))
            go = math_ops.logical_and(go, extra_test())
        return go

    def body(i: Tensor, *leaves: Any) -> list[Tensor]:
        return [math_ops.add(i, delta), *step(i, *leaves)]

    return list(control_flow.while_loop(cond, body, [start, *carry.init])[1:])


def while_stmt(test: Callable[[], Any], body: Callable[[], None], get_state: Callable | None,
               set_state: Callable | None, names: Sequence[str]) -> None:
    """A ``while`` statement: a Python loop while its condition is a Python value, a graph loop from
    the first time it is a tensor.

    A condition that becomes a tensor after some iterations (``while True:`` with a ``break`` on a
    tensor, or a counter that becomes a tensor) leaves those iterations unrolled and runs the rest
    as a graph loop, which is what Python would have done.
    """
    loc = user_location(2)
    while True:
        value = _as_predicate(test())
        if _is_graph_value(value):
            _graph_while(test, body, *_state_fns(get_state, set_state), names, loc)
            return
        if not value:
            return
        body()


def _graph_while(test: Callable[[], Any], body: Callable[[], None], get: Callable, put: Callable,
                 names: Sequence[str], loc: SourceLoc | None) -> None:
    carry = _Carry(names, get(), "while", loc)

    def cond(*leaves: Any) -> Any:
        put(carry.values(leaves))
        return test()

    def step(*leaves: Any) -> list[Tensor]:
        put(carry.values(leaves))
        body()
        return carry.next_leaves(get())

    out = control_flow.while_loop(cond, step, list(carry.init))
    put(carry.values(out))


# -- conditionals ------------------------------------------------------------------------------


def if_stmt(pred: Any, then_fn: Callable[[], Any], else_fn: Callable[[], Any], get_state: Callable | None,
            set_state: Callable | None, names: Sequence[str], outputs: Sequence[str]) -> Any:
    """An ``if`` statement: a graph conditional if ``pred`` is a tensor, else Python's ``if``.

    ``names`` are the locals the branches assign (each branch starts from their values before the
    ``if``), ``outputs`` those of them used afterwards (merged). Returns what the branch returns
    (the function's return value for the function's last ``if``).
    """
    pred = _as_predicate(pred)
    if not _is_graph_value(pred):
        return then_fn() if pred else else_fn()
    loc = user_location(2)
    get, put = _state_fns(get_state, set_state)
    init = get()
    keep = [list(names).index(n) for n in outputs]

    def branch(fn: Callable[[], Any]) -> Callable[[], tuple]:
        def run() -> tuple:
            put(init)
            ret = fn()
            state = get()
            return (*(state[k] for k in keep), ret)

        return run

    labels = [*(f"'{n}'" for n in outputs), "the return value"]
    out = _graph_cond(pred, branch(then_fn), branch(else_fn), labels, loc)
    final = list(init)
    for k, value in zip(keep, out):
        final[k] = value
    put(tuple(final))
    return out[-1]


def if_exp(pred: Any, true_fn: Callable[[], Any], false_fn: Callable[[], Any]) -> Any:
    """``a if pred else b``."""
    pred = _as_predicate(pred)
    if not _is_graph_value(pred):
        return true_fn() if pred else false_fn()
    out = _graph_cond(pred, lambda: (true_fn(),), lambda: (false_fn(),), ["the conditional expression"],
                      user_location(2))
    return out[0]


def _graph_cond(pred: Any, true_fn: Callable[[], tuple], false_fn: Callable[[], tuple], labels: list[str],
                loc: SourceLoc | None) -> tuple:
    """``control_flow.cond`` over tuples of values labelled for errors; Python numbers become tensors."""
    seen: list[tuple] = []

    def wrap(fn: Callable[[], tuple]) -> Callable[[], tuple]:
        def run() -> tuple:
            values = fn()
            other = seen[0] if seen else (None,) * len(values)
            values = tuple(_tensorize(v, o) for v, o in zip(values, other))
            if seen:
                _check_branches(seen[0], values, labels, loc)
            seen.append(values)
            return values

        return run

    return tuple(control_flow.cond(pred, wrap(true_fn), wrap(false_fn)))


def _tensorize(value: Any, other: Any) -> Any:
    """``value`` with Python numbers as tensors (dtype from the matching tensor of ``other``)."""
    leaves, tree = nest.flatten_with_tree(value)
    hints: list[Any] = [None] * len(leaves)
    if other is not None:
        other_leaves, other_tree = nest.flatten_with_tree(other)
        if repr(other_tree) == repr(tree):
            hints = [o.dtype if isinstance(o, Tensor) else None for o in other_leaves]
    out = [convert_to_tensor(x, dtype_hint=h) if _is_number(x) else x for x, h in zip(leaves, hints)]
    return nest.unflatten(tree, out)


def _check_branches(true: tuple, false: tuple, labels: list[str], loc: SourceLoc | None) -> None:
    for label, a, b in zip(labels, true, false):
        if isinstance(a, Undefined) != isinstance(b, Undefined):
            side = "false" if isinstance(a, Undefined) else "true"
            raise LoopVariableError(
                f"{label} is assigned in the {side} branch of this `if` but not in the other, and is used after "
                "the `if`. Its condition is a tensor, so both branches become part of the graph: assign it in "
                f"both branches, or before the `if`{where(loc)}"
            )
        (al, at), (bl, bt) = nest.flatten_with_tree(a), nest.flatten_with_tree(b)
        if repr(at) != repr(bt):
            raise LoopVariableError(
                f"{label} has a different structure in the two branches of this `if`: {a!r} in the true branch, "
                f"{b!r} in the false branch. Both branches of a graph conditional must produce the same "
                f"structure{where(loc)}"
            )
        for x, y in zip(al, bl):
            if isinstance(x, Tensor) and isinstance(y, Tensor) and x.aval == y.aval:
                continue
            if not isinstance(x, Tensor) and not isinstance(y, Tensor) and (x is y or _same(x, y)):
                continue
            fell_off = " (a branch that ends without `return` returns None)" if label == "the return value" else ""
            raise LoopVariableError(
                f"{label} is {_describe(x)} in the true branch but {_describe(y)} in the false branch of this "
                f"`if`{fell_off}. Its condition is a tensor, so both branches must produce tensors of the same "
                f"shape and dtype{where(loc)}"
            )


def _same(x: Any, y: Any) -> bool:
    try:
        return bool(x == y)
    except Exception:  # why: arbitrary objects may not compare
        return False
