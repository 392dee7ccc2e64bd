"""Static analysis of a function's AST for autograph: the names statements bind, read and declare
(per scope), what keeps a block from moving into a nested ``def`` (``return``, ``yield``, jumps…),
and a liveness analysis giving the names live after each ``if`` and at the head of each loop."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator

_NEW_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda,
               ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_LOOPS = (ast.For, ast.AsyncFor, ast.While)


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
        live = self.block(s.body, out)
        for item in reversed(s.items):  # `with e as t`: evaluate e, then bind t (which kills t)
            if item.optional_vars is not None:
                live = (live - _bound_names([item.optional_vars])) | _read_names(item.optional_vars)
            live = live | _read_names(item.context_expr)
        return live

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

