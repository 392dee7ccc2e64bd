"""Text form of the loop IR: indented loop nests.

    program f(a0:f32[1024] @arg:0) -> (o0 @out:0)
      kernel k0_add_exp [1024]:
        o0[i0] = add(exp(a0[i0]), 1.0)
"""

from __future__ import annotations

from collections.abc import Callable

from popjit.ir.loop import (
    Apply,
    Buffer,
    Collective,
    Const,
    Copy,
    Expr,
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
    LoopFunctor,
    MatMul,
    Program,
    Repeat,
    Stmt,
    StmtVisitor,
    While,
)


class IndexFormatter(LoopFunctor):
    """Index expressions as Python source. ``literal`` renders non-negative integers (the code
    generator turns them into parameters), ``value`` renders a gathered value (default: as text)."""

    def __init__(self, literal: Callable[[int], str] = str, value: Callable[[Expr], str] | None = None) -> None:
        self.literal = literal
        self.value = value or format_expr

    def index(self, ix: ILin) -> str:
        parts = []
        for a, c in ix.terms:
            sign, mag = ("-" if c < 0 else ""), abs(c)
            parts.append(f"{sign}{self.atom(a)}" + ("" if mag == 1 else f"*{self.literal(mag)}"))
        if ix.const or not parts:
            parts.append(("-" if ix.const < 0 else "") + self.literal(abs(ix.const)))
        return " + ".join(parts).replace("+ -", "- ")

    def visit_var(self, a: IVar) -> str:
        return a.name

    def visit_div(self, a: IDiv) -> str:
        return f"(({self.index(a.x)}) // {self.literal(a.c)})"

    def visit_mod(self, a: IMod) -> str:
        return f"(({self.index(a.x)}) % {self.literal(a.c)})"

    def visit_min(self, a: IMin) -> str:
        return f"min({self.index(a.a)}, {self.index(a.b)})"

    def visit_max(self, a: IMax) -> str:
        return f"max({self.index(a.a)}, {self.index(a.b)})"

    def visit_value(self, a: IValue) -> str:
        return f"int({self.value(a.expr)})"


def format_index(ix: ILin, literal: Callable[[int], str] = str, value: Callable[[Expr], str] | None = None) -> str:
    """An index expression as Python source (see :class:`IndexFormatter`)."""
    return IndexFormatter(literal, value).index(ix)


class ExprFormatter(IndexFormatter):
    """Value expressions as text: ``add(exp(a0[i0]), 1.0)``."""

    def visit_load(self, e: Load) -> str:
        return f"{e.buf.name}[{self.index(e.index)}]"

    def visit_const(self, e: Const) -> str:
        return repr(e.value) if not isinstance(e.value, bool) else str(e.value)

    def visit_index_value(self, e: IndexValue) -> str:
        return f"{e.dtype.short}({self.index(e.index)})"

    def visit_apply(self, e: Apply) -> str:
        attrs = "".join(f", {k}={v}" for k, v in e.attrs)
        return f"{e.op}({', '.join(self.expr(a) for a in e.args)}{attrs})"


def format_expr(e: Expr) -> str:
    """A value expression as text."""
    return ExprFormatter().expr(e)


class StmtFormatter(StmtVisitor):
    """Statements as indented lines, appended to ``out``."""

    def __init__(self, out: list[str], indent: str) -> None:
        self.out = out
        self.ind = indent
        self.exprs = ExprFormatter()

    def nested(self, stmts: list[Stmt], extra: str = "  ") -> None:
        self.ind += extra
        self.block(stmts)
        self.ind = self.ind[: -len(extra)]

    def line(self, text: str) -> None:
        self.out.append(self.ind + text)

    def visit_kernel(self, k: Kernel) -> None:
        head = f"kernel {k.name} [{','.join(map(str, k.domain))}]"
        if k.reduce:
            r = k.reduce
            flags = "".join(f" {f}" for f in ("exclusive", "reverse") if getattr(r, f))
            head += f" {r.mode} {r.op} over [{','.join(map(str, r.rdomain))}]{flags}"
        self.line(head + _on(k) + ":")
        for s in k.stores:
            self.line(f"  {s.buf.name}[{self.exprs.index(s.index)}] = {self.exprs.expr(s.value)}")

    def visit_matmul(self, s: MatMul) -> None:
        scale = f"{s.alpha!r} * " if s.alpha != 1.0 else ""
        acc = f" + {s.beta!r} * {s.out.name}" if s.beta else ""
        self.line(f"matmul {s.name} {s.out.name} = {scale}{s.a.name}{'.T' if s.ta else ''} @ {s.b.name}"
                  f"{'.T' if s.tb else ''}{acc}  batch={s.batch} m={s.m} n={s.n} k={s.k} "
                  f"strides=({s.a_batch_stride},{s.b_batch_stride}){' convolution' if s.convolution else ''}"
                  f"{f' plan={s.plan}' if s.plan else ''}{_on(s)}")

    def visit_copy(self, s: Copy) -> None:
        self.line(f"copy {s.dst.name} <- {s.src.name}{_on(s)}")

    def visit_collective(self, s: Collective) -> None:
        group = f" group {s.group}" if s.group else ""
        self.line(f"{s.dst.name} = replicas.{s.op}({s.src.name}){group}{_on(s)}")

    def visit_repeat(self, s: Repeat) -> None:
        pipeline = (f" as a {s.pipeline[0]} pipeline over IPUs {list(s.pipeline[1])}"
                    f"{' recomputing' if s.pipeline[2] else ''}" if s.pipeline else "")
        self.line(f"repeat {s.count}{pipeline}:")
        self.nested(s.body)

    def visit_while(self, s: While) -> None:
        limit = f" (at most {s.max_iterations})" if s.max_iterations is not None else ""
        self.line(f"while {s.pred.name}{limit}:")
        self.line("  cond:")
        self.nested(s.cond, "    ")
        self.line("  body:")
        self.nested(s.body, "    ")

    def visit_if(self, s: If) -> None:
        self.line(f"if {s.pred.name}:")
        self.nested(s.then)
        self.line("else:")
        self.nested(s.orelse)


def _on(s: Stmt) -> str:
    """`` on ipu<k>`` (`` backward``) for a statement placed on a shard."""
    if s.shard is None:
        return ""
    return f" on ipu{s.shard}" + (" backward" if s.backward else "")


def format_stmts(stmts: list[Stmt], ind: str, out: list[str]) -> None:
    """Append the text of ``stmts`` to ``out``, indented by ``ind``."""
    StmtFormatter(out, ind).block(stmts)


def print_program(p: Program) -> str:
    """The whole program: its signature, constants, temporaries and statements."""
    def decl(b: Buffer) -> str:
        return f"{b!r} @{b.kind}:{b.binding}"

    ins = ", ".join(decl(b) for b in [*p.args, *p.variables])
    out = [f"program {p.name}({ins}) -> ({', '.join(decl(b) for b in p.outs)})"]
    if p.consts:
        out.append("  consts: " + ", ".join(repr(b) for b in p.consts))
    if p.temps:
        out.append("  temps: " + ", ".join(repr(b) for b in p.temps))
    format_stmts(p.body, "  ", out)
    return "\n".join(out)
