"""Loop-IR kernel → Numba codelet source.

A codelet's source depends on the kernel's *structure* (its expression tree, dtypes, ranks,
which strides are 0 or 1) and never on its sizes: every integer other than 0 and 1 and every
float constant becomes a parameter (``p<k>`` ints, ``f<k>`` floats). Two kernels that differ only
in sizes therefore render to the same text and share one compiled function; the caller passes
the numbers.

Codelet signature: ``def codelet(b0, b1, ..., p0, p1, ..., f0, ...)`` where ``b`` are flat
buffers (float16 as uint16 bit patterns), ``p`` int64 and ``f`` float64 scalars.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from typing import Any

from popjit import dtypes
from popjit.dtypes import DType
from popjit.ir.loop import (
    Apply,
    Buffer,
    Const,
    Expr,
    ExprVisitor,
    ILin,
    IndexValue,
    IValue,
    IVar,
    Kernel,
    Load,
)
from popjit.ir.loop_printer import IndexFormatter
from popjit.ops import registry
from popjit.ops.reduce import REDUCTIONS, Reduction

HEADER = """import numpy as np
from numba import prange
from popjit.kernels import math as km
from popjit.kernels import random as kr
from popjit.kernels.bits import f16_to_f32, f32_to_f16
"""
CHUNK = 1 << 15  # elements per parallel chunk
SERIAL, PARALLEL = "@CODELET", "@PARALLEL_CODELET"  # decorator placeholders, filled by codegen.compile


@dataclass
class Rendered:
    """A codelet: its source, the name of its function, and the actual arguments to pass."""

    source: str
    func: str
    buffers: list[Buffer]
    ints: list[int]
    floats: list[float]
    parallel: bool = False

    @property
    def key(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()[:20]


@dataclass
class _Params:
    ints: list[int] = field(default_factory=list)
    floats: list[float] = field(default_factory=list)
    buffers: list[Buffer] = field(default_factory=list)
    domain_sizes: list[str] = field(default_factory=list)

    def int(self, v: int) -> str:
        v = int(v)
        if v in (0, 1):
            return str(v)
        self.ints.append(v)
        return f"p{len(self.ints) - 1}"

    def float(self, v: float) -> str:
        self.floats.append(float(v))
        return f"f{len(self.floats) - 1}"

    def buf(self, b: Buffer) -> str:
        for k, x in enumerate(self.buffers):
            if x is b:
                return f"b{k}"
        self.buffers.append(b)
        return f"b{len(self.buffers) - 1}"


def compute_type(dtype: DType) -> str:
    """The Numba scalar constructor of a dtype's compute form (float16 computes as float32)."""
    if dtype.is_floating:
        return "np.float32" if dtype != dtypes.float64 else "np.float64"
    if dtype.is_bool:
        return "bool"
    return f"np.{dtype.np.name}"


class _LoopVars(ExprVisitor):
    """The loop variables an expression reads, through its indices and gathered values."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def visit_var(self, a: IVar) -> None:
        self.names.add(a.name)


class _Body(IndexFormatter):
    """Renders expressions as a sequence of SSA assignments, one per distinct subexpression; indices
    as Python source with their integers as parameters.

    ``loop_levels`` maps each loop variable to its loop's depth (1 for the outermost): every line
    records the depth of the innermost loop it depends on (``levels``), so a renderer can place it
    in the outermost loop where its value is known, computed once instead of once per inner
    iteration (loop-invariant code motion, done here because LLVM's loop vectorizer can take
    minutes on an inner loop that recomputes a long invariant chain)."""

    def __init__(self, params: _Params, hoisted: list[str], loop_levels: dict[str, int] | None = None) -> None:
        super().__init__(params.int, self.expr)
        self.params = params
        self.lines: list[str] = []
        self.levels: list[int] = []
        self.loop_levels = loop_levels or {}
        self.memo: dict[Any, str] = {}
        self.hoisted = hoisted
        self.hoist_memo: dict[Any, str] = {}

    def tmp(self, code: str, key: Expr) -> str:
        if key in self.memo:
            return self.memo[key]
        name = f"v{len(self.memo)}"
        self.memo[key] = name
        self.lines.append(f"{name} = {code}")
        self.levels.append(self._level(key))
        return name

    def _level(self, e: Expr | ILin) -> int:
        if not self.loop_levels:
            return 0
        found = _LoopVars()
        found.index(e) if isinstance(e, ILin) else found.expr(e)
        return max((self.loop_levels.get(n, 0) for n in found.names), default=0)

    def flat_index(self, ix: ILin) -> str:
        """``ix`` as source, its terms that stay fixed in the innermost loop it depends on summed
        once, in the outer loop where they are known (``v3 + i3`` inside the loop). why: LLVM does
        not hoist a long clamped, divided sum out of the inner loop itself, and a load at such an
        index is not vectorised (the col2im of a max-pool gradient ran 11 times slower)."""
        if not self.loop_levels or len(ix.terms) < 2:
            return self.index(ix)
        levels = [self._level(ILin(((atom, 1),))) for atom, _ in ix.terms]
        top = max(levels)
        outer = tuple(t for t, level in zip(ix.terms, levels) if level < top)
        if not outer:
            return self.index(ix)
        base = ILin(outer, ix.const)
        key = ("index base", base)
        if key not in self.memo:
            code = self.index(base)
            self.memo[key] = name = f"v{len(self.memo)}"
            self.lines.append(f"{name} = {code}")
            self.levels.append(max(level for level in levels if level < top))
        inner = ILin(tuple(t for t, level in zip(ix.terms, levels) if level == top))
        return f"{self.memo[key]} + {self.index(inner)}"

    def hoist(self, code: str, key: Any) -> str:
        if key not in self.hoist_memo:
            name = f"c{len(self.hoist_memo)}"
            self.hoist_memo[key] = name
            self.hoisted.append(f"{name} = {code}")
        return self.hoist_memo[key]

    # value expressions -------------------------------------------------------------------------
    def expr(self, e: Expr) -> str:
        if e in self.memo:
            return self.memo[e]
        return super().expr(e)

    def visit_load(self, e: Load) -> str:
        ref = _at(self.params.buf(e.buf), self.flat_index(e.index))
        code = f"f16_to_f32({ref})" if e.buf.dtype == dtypes.float16 else ref
        if _loop_invariant(e.index):
            # why: LLVM cannot prove the loop's stores don't alias a scalar load such as `b0[0]`,
            # so it would reload it every iteration and not vectorise; the kernel never writes a
            # buffer it reads elsewhere (in-place updates read only the element they write).
            return self.hoist(code, ("load", e))
        return self.tmp(code, e)

    def visit_const(self, e: Const) -> str:
        return self.const(e.value, e.dtype)

    def visit_index_value(self, e: IndexValue) -> str:
        code = self.index(e.index)
        if e.dtype == dtypes.float16:
            return self.tmp(f"f16_to_f32(f32_to_f16(np.float32({code})))", e)
        return self.tmp(code if not e.dtype.is_floating else f"{compute_type(e.dtype)}({code})", e)

    def visit_apply(self, e: Apply) -> str:
        args = [self.expr(a) for a in e.args]
        op = registry.get(e.op)
        in_dtype = e.args[1].dtype if e.op == "select" else e.args[0].dtype
        code = registry.facet(op, "scalar")(args, in_dtype, **e.attr_dict)
        if e.dtype == dtypes.float16 and not op.half_exact:
            # why: float16 computes in float32, but each op's result rounds to float16 as in
            # TensorFlow, XLA and on the IPU, also inside a fused chain.
            code = f"f16_to_f32(f32_to_f16(np.float32({code})))"
        elif e.dtype.is_floating and not (e.args and e.args[-1].dtype.is_floating and e.op != "cast"):
            code = f"{compute_type(e.dtype)}({code})"
        elif e.dtype.is_integer:
            # why: Numba computes int32 arithmetic in int64; wrap each result to its dtype, so a
            # fused ``(a * b) // c`` overflows like TensorFlow's ``a * b`` does.
            code = f"{compute_type(e.dtype)}({code})"
        return self.tmp(code, e)

    def const(self, value: Any, dtype: DType) -> str:
        if dtype.is_bool:
            return "True" if value else "False"
        if dtype.is_floating:
            return self.hoist(f"{compute_type(dtype)}({self.params.float(value)})", ("f", float(value), dtype.name))
        return self.hoist(f"{compute_type(dtype)}({self.params.int(int(value))})", ("i", int(value), dtype.name))

    def store_value(self, buf: Buffer, value: str) -> str:
        if buf.dtype == dtypes.float16:
            return f"f32_to_f16({value})"
        if buf.dtype.is_floating:
            return f"{compute_type(buf.dtype)}({value})"
        if buf.dtype.is_bool:
            return f"bool({value})"
        return f"{compute_type(buf.dtype)}({value})"


def _at(buf: str, index: str) -> str:
    """``buf[index]`` with an unsigned index: every index is non-negative by construction, and Numba's
    negative-index wraparound check on a signed one (``lo + j0``) keeps LLVM from vectorising."""
    return f"{buf}[np.uint64({index})]"


def _loop_invariant(ix: ILin) -> bool:
    """An index that no loop variable (``i*``/``r*``/``j*``) reaches, directly or through a gather."""
    return not any(isinstance(a, (IVar, IValue)) for a in ix.atoms())


def _indent(lines: list[str], n: int) -> list[str]:
    return [" " * (4 * n) + ln for ln in lines]


def _loops(names: list[str], sizes: list[str]) -> tuple[list[str], int]:
    lines = [" " * (4 * k) + f"for {n} in range({s}):" for k, (n, s) in enumerate(zip(names, sizes))]
    return lines, len(names)


def _reduce_init(red: Reduction, dtype: DType) -> str:
    """Source of the identity ``red`` starts an accumulator of ``dtype`` from."""
    v = red.identity(dtype)
    if isinstance(v, bool):
        return str(v)
    if dtype.is_floating and math.isinf(v):
        return f"np.float32({'-' if v < 0 else ''}np.inf)"
    return f"{compute_type(dtype)}({v})"


def render_kernel(k: Kernel, parallel: bool = False) -> Rendered:
    """Render a kernel as a Numba codelet. ``parallel`` splits the outermost loop over threads."""
    params = _Params()
    hoisted: list[str] = []
    if k.reduce is None:
        lines = _render_elementwise(k, params, hoisted, parallel)
    elif k.reduce.mode == "scan":
        lines = _render_scan(k, params, hoisted)
        parallel = False
    elif REDUCTIONS[k.reduce.op].is_arg:
        lines = _render_argreduce(k, params, hoisted)
        parallel = False
    else:
        lines = _render_reduce(k, params, hoisted, parallel)
        parallel = parallel and bool(k.domain) and _inner_reduce(k)  # only that form has a prange loop
    args = [f"b{i}" for i in range(len(params.buffers))]
    args += [f"p{i}" for i in range(len(params.ints))] + [f"f{i}" for i in range(len(params.floats))]
    body = _indent(hoisted, 1) + _indent(lines, 1) + ["    return 0"]
    sig_dtypes = ", ".join(f"{b.dtype.short}" for b in params.buffers)
    head = f"# buffers: {sig_dtypes}\n"
    if parallel:
        text = head + _parallel_source(", ".join(args), body, params.domain_sizes)
    else:
        text = head + f"{SERIAL}\ndef NAME({', '.join(args)}):\n" + "\n".join(body) + "\n"
    name = "k_" + hashlib.sha256(text.encode()).hexdigest()[:20]
    return Rendered(text.replace("NAME", name), name, params.buffers, params.ints, params.floats, parallel)


def _parallel_source(args: str, body: list[str], sizes: list[str]) -> str:
    """A serial ``NAME_chunk`` over outer rows ``[lo, hi)`` (it vectorises: Numba inlines the scalar math
    into it, which it does not inside a ``prange`` body) and a ``prange`` driver calling it per chunk."""
    inner = " * ".join(sizes[1:]) or "1"
    return "\n".join([
        f"{SERIAL}", f"def NAME_chunk({args}, lo, hi):", *body, "", "",
        f"{PARALLEL}", f"def NAME({args}):",
        f"    rows = max(1, {CHUNK} // max(1, {inner}))",
        f"    for ch in prange(({sizes[0]} + rows - 1) // rows):",
        "        lo = ch * rows",
        f"        NAME_chunk({args}, lo, min(lo + rows, {sizes[0]}))",
        "    return 0", "",
    ])


def _domain_loops(k: Kernel, params: _Params, chunked: bool) -> tuple[list[str], int]:
    """Loop headers over the kernel's domain; with ``chunked`` the outermost runs over ``[lo, hi)``."""
    names = [f"i{j}" for j in range(len(k.domain))]
    sizes = [params.int(d) for d in k.domain]
    params.domain_sizes = sizes
    if not names:
        return [], 0
    if not chunked:
        return _loops(names, sizes)
    rest, depth = _loops(names[1:], sizes[1:])
    return ["for j0 in range(hi - lo):", "    i0 = lo + j0", *_indent(rest, 1)], depth + 1


def _loop_headers(k: Kernel, params: _Params, chunked: bool) -> list[list[str]]:
    """The opening lines of each loop over the kernel's domain, outermost first; with ``chunked`` the
    outermost runs over ``[lo, hi)``."""
    sizes = [params.int(d) for d in k.domain]
    params.domain_sizes = sizes
    headers = [[f"for i{j} in range({size}):"] for j, size in enumerate(sizes)]
    if chunked and headers:
        headers[0] = ["for j0 in range(hi - lo):", "    i0 = lo + j0"]
    return headers


def _render_elementwise(k: Kernel, params: _Params, hoisted: list[str], parallel: bool) -> list[str]:
    headers = _loop_headers(k, params, parallel)
    depth = len(headers)
    body = _Body(params, hoisted, {f"i{j}": j + 1 for j in range(depth)})
    values = [(s, body.expr(s.value)) for s in k.stores]
    stores = [f"{_at(params.buf(s.buf), body.flat_index(s.index))} = {body.store_value(s.buf, v)}"
              for s, v in values]
    by_level: list[list[str]] = [[] for _ in range(depth + 1)]
    for line, level in zip(body.lines, body.levels):
        by_level[level].append(line)
    by_level[depth] += stores
    out = by_level[0]
    for level, header in enumerate(headers, start=1):
        out += _indent(header, level - 1) + _indent(by_level[level], level)
    return out


def _inner_reduce(k: Kernel) -> bool:
    """Reduce in registers (reduction loops innermost) unless a kept axis is the unit-stride one."""
    (store,) = k.stores
    innermost_kept = f"i{len(k.domain) - 1}" if k.domain else None
    for ld in store.value.loads():
        for atom, c in ld.index.terms:
            if c == 1 and isinstance(atom, IVar) and atom.name == innermost_kept:
                return False
    return True


def _render_reduce(k: Kernel, params: _Params, hoisted: list[str], parallel: bool) -> list[str]:
    assert k.reduce is not None
    (store,) = k.stores
    red, rdomain = REDUCTIONS[k.reduce.op], k.reduce.rdomain
    acc_t = red.accumulator(store.value.dtype)
    rnames = [f"r{j}" for j in range(len(rdomain))]
    if _inner_reduce(k) or not k.domain or acc_t != store.buf.dtype:
        head, depth = _domain_loops(k, params, parallel)
        rloops, rdepth = _loops(rnames, [params.int(d) for d in rdomain])
        body = _Body(params, hoisted)
        v = body.expr(store.value)
        inner = body.lines + [f"acc = {red.step('acc', v, acc_t)}"]
        out = f"{_at(params.buf(store.buf), body.index(store.index))} = {body.store_value(store.buf, 'acc')}"
        return head + _indent([f"acc = {_reduce_init(red, acc_t)}", *rloops, *_indent(inner, rdepth), out], depth)
    # A kept axis is the contiguous one: accumulate whole output rows in the output buffer itself
    # (vectorises along the kept axis; the accumulator has the output's type, checked above).
    body = _Body(params, hoisted)
    v = body.expr(store.value)
    out = _at(params.buf(store.buf), body.index(store.index))
    head, depth = _loops([f"i{j}" for j in range(len(k.domain))], [params.int(d) for d in k.domain])
    rloops, rdepth = _loops(rnames, [params.int(d) for d in rdomain])
    init = head + _indent([f"{out} = {_reduce_init(red, acc_t)}"], depth)
    update = body.lines + [f"{out} = {red.step(out, v, acc_t)}"]
    return init + rloops + _indent(head + _indent(update, depth), rdepth)


def _render_argreduce(k: Kernel, params: _Params, hoisted: list[str]) -> list[str]:
    assert k.reduce is not None
    (store,) = k.stores
    red = REDUCTIONS[k.reduce.op]
    better = red.better
    head, depth = _domain_loops(k, params, False)
    n = params.int(k.reduce.rdomain[0])
    body = _Body(params, hoisted)
    v = body.expr(store.value)
    init = _reduce_init(red, store.value.dtype)
    nan = store.value.dtype.is_floating
    cond = f"({v} {better} best or ({v} != {v} and best == best))" if nan else f"{v} {better} best"
    inner = [*body.lines, f"if {cond}:", f"    best = {v}", "    bi = r0"]
    out = f"{_at(params.buf(store.buf), body.index(store.index))} = {body.store_value(store.buf, 'bi')}"
    return head + _indent([f"best = {init}", "bi = 0", f"for r0 in range({n}):", *_indent(inner, 1), out], depth)


def _render_scan(k: Kernel, params: _Params, hoisted: list[str]) -> list[str]:
    assert k.reduce is not None
    (store,) = k.stores
    head, depth = _domain_loops(k, params, False)
    n = params.int(k.reduce.rdomain[0])
    total = REDUCTIONS[k.reduce.op]
    acc_t = total.accumulator(store.value.dtype)
    body = _Body(params, hoisted)
    v = body.expr(store.value)
    out = f"{_at(params.buf(store.buf), body.index(store.index))} = {body.store_value(store.buf, 'acc')}"
    update = f"acc = {total.step('acc', v, acc_t)}"
    step = [update, out] if not k.reduce.exclusive else [out, update]
    r0 = f"({n} - 1 - rr)" if k.reduce.reverse else "rr"
    inner = [f"r0 = {r0}", *body.lines, *step]
    return head + _indent([f"acc = {_reduce_init(total, acc_t)}", f"for rr in range({n}):", *_indent(inner, 1)],
                          depth)
