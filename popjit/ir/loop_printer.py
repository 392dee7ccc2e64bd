"""Text form of the loop IR: indented loop nests.

    program f(a0:f32[1024] @arg:0) -> (o0 @out:0)
      kernel k0_add_exp [1024]:
        o0[i0] = add(exp(a0[i0]), 1.0)
"""

from __future__ import annotations

from collections.abc import Callable

from popjit.ir.loop import (
    Apply,
    Const,
    Copy,
    Expr,
    IAtom,
    IDiv,
    If,
    ILin,
    IMax,
    IMin,
    IMod,
    IndexValue,
    IValue,
    IVar,
    Kernel,
    Load,
    MatMul,
    Program,
    Repeat,
    Stmt,
    While,
)


def format_index(ix: ILin, literal: Callable[[int], str] = str, value: Callable[[Expr], str] | None = None) -> str:
    """An index expression as Python source. ``literal`` renders non-negative integers (the code
    generator turns them into parameters), ``value`` renders a gathered value (default: as text)."""
    value = value or format_expr

    def atom(a: IAtom) -> str:
        if isinstance(a, IVar):
            return a.name
        if isinstance(a, IDiv):
            return f"(({format_index(a.x, literal, value)}) // {literal(a.c)})"
        if isinstance(a, IMod):
            return f"(({format_index(a.x, literal, value)}) % {literal(a.c)})"
        if isinstance(a, (IMin, IMax)):
            fn = "min" if isinstance(a, IMin) else "max"
            return f"{fn}({format_index(a.a, literal, value)}, {format_index(a.b, literal, value)})"
        if isinstance(a, IValue):
            return f"int({value(a.expr)})"
        raise TypeError(a)

    parts = []
    for a, c in ix.terms:
        sign, mag = ("-" if c < 0 else ""), abs(c)
        parts.append(f"{sign}{atom(a)}" + ("" if mag == 1 else f"*{literal(mag)}"))
    if ix.const or not parts:
        parts.append(("-" if ix.const < 0 else "") + literal(abs(ix.const)))
    return " + ".join(parts).replace("+ -", "- ")


def format_expr(e: Expr) -> str:
    if isinstance(e, Load):
        return f"{e.buf.name}[{format_index(e.index)}]"
    if isinstance(e, Const):
        return repr(e.value) if not isinstance(e.value, bool) else str(e.value)
    if isinstance(e, IndexValue):
        return f"{e.dtype.short}({format_index(e.index)})"
    if isinstance(e, Apply):
        attrs = "".join(f", {k}={v}" for k, v in e.attrs)
        return f"{e.op}({', '.join(format_expr(a) for a in e.args)}{attrs})"
    raise TypeError(e)


def _format_kernel(k: Kernel, ind: str, out: list[str]) -> None:
    head = f"{ind}kernel {k.name} [{','.join(map(str, k.domain))}]"
    if k.reduce:
        r = k.reduce
        flags = "".join(f" {f}" for f in ("exclusive", "reverse") if getattr(r, f))
        head += f" {r.mode} {r.op} over [{','.join(map(str, r.rdomain))}]{flags}"
    out.append(head + ":")
    for s in k.stores:
        out.append(f"{ind}  {s.buf.name}[{format_index(s.index)}] = {format_expr(s.value)}")


def format_stmts(stmts: list[Stmt], ind: str, out: list[str]) -> None:
    for s in stmts:
        if isinstance(s, Kernel):
            _format_kernel(s, ind, out)
        elif isinstance(s, MatMul):
            scale = f"{s.alpha!r} * " if s.alpha != 1.0 else ""
            acc = f" + {s.beta!r} * {s.out.name}" if s.beta else ""
            out.append(
                f"{ind}matmul {s.name} {s.out.name} = {scale}{s.a.name}{'.T' if s.ta else ''} @ {s.b.name}"
                f"{'.T' if s.tb else ''}{acc}  batch={s.batch} m={s.m} n={s.n} k={s.k} "
                f"strides=({s.a_batch_stride},{s.b_batch_stride})"
            )
        elif isinstance(s, Copy):
            out.append(f"{ind}copy {s.dst.name} <- {s.src.name}")
        elif isinstance(s, Repeat):
            out.append(f"{ind}repeat {s.count}:")
            format_stmts(s.body, ind + "  ", out)
        elif isinstance(s, While):
            limit = f" (at most {s.max_iterations})" if s.max_iterations is not None else ""
            out.append(f"{ind}while {s.pred.name}{limit}:")
            out.append(f"{ind}  cond:")
            format_stmts(s.cond, ind + "    ", out)
            out.append(f"{ind}  body:")
            format_stmts(s.body, ind + "    ", out)
        elif isinstance(s, If):
            out.append(f"{ind}if {s.pred.name}:")
            format_stmts(s.then, ind + "  ", out)
            out.append(f"{ind}else:")
            format_stmts(s.orelse, ind + "  ", out)
        else:
            out.append(f"{ind}{s!r}")


def print_program(p: Program) -> str:
    def decl(b: object) -> str:
        return f"{b!r} @{b.kind}:{b.binding}"

    ins = ", ".join(decl(b) for b in [*p.args, *p.variables])
    out = [f"program {p.name}({ins}) -> ({', '.join(decl(b) for b in p.outs)})"]
    if p.consts:
        out.append("  consts: " + ", ".join(repr(b) for b in p.consts))
    if p.temps:
        out.append("  temps: " + ", ".join(repr(b) for b in p.temps))
    format_stmts(p.body, "  ", out)
    return "\n".join(out)
