"""Autograph's first pass over a function: ``break``/``continue`` become boolean flags the loop
carries, the function's last ``if`` absorbs what follows an early ``return``, a loop's ``else``
moves after the loop, and loops that must stay Python (they hold a ``return``…) are marked."""

from __future__ import annotations

import ast
from dataclasses import dataclass

from popjit.frontend.autograph.analysis import _blockers, _describe_blockers, _scope_nodes, _terminates
from popjit.frontend.autograph.nodes import _ag, _assign, _call, _lambda, _load, _located, _Namer


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

