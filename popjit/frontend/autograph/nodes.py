"""Building blocks for the AST that autograph generates: node constructors, the ``ag__`` runtime
reference, source locations for generated nodes, and fresh names."""

from __future__ import annotations

import ast
from collections.abc import Sequence

_AG = "ag__"  # the name converted code uses for the runtime (the popjit.frontend.autograph package)


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


class _Namer:
    """Fresh names for generated functions and flags."""

    def __init__(self) -> None:
        self.count = 0

    def next(self) -> int:
        self.count += 1
        return self.count

