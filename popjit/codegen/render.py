"""Loop-IR kernel → Numba codelet source.

A codelet's source depends on the kernel's *structure* (its expression tree, dtypes, ranks,
which strides are 0 or 1) and never on its sizes: every integer other than 0 and 1 and every
float constant becomes a parameter (``p<k>`` ints, ``f<k>`` floats). Two kernels that differ only
in sizes therefore render to the same text and share one compiled function; the caller passes
the numbers.

Codelet signature: ``def codelet(b0, b1, ..., p0, p1, ..., f0, ...)`` where ``b`` are flat
buffers (float16 as uint16 bit patterns), ``p`` int64 and ``f`` float64 scalars. A codelet whose
outermost loop's iterations are independent takes two more, ``lo, hi``: the range of that loop to
run, all of it or a thread's share (:attr:`Rendered.split` says how the engine cuts that loop;
:mod:`popjit.codegen.native`).

The program's :class:`~popjit.codegen.numerics.Numerics` (``IPUConfig.floating_point_behaviour``)
changes two things, and nothing at all when every option is off: how results round to float16
(NaN on overflow; stochastic rounding, where the codelet takes the device's rounding key and a call
number as three more arguments ``sk0, sk1, sc``), and trap checks (``inv``, ``div0``, ``oflo``):
flags the codelet returns as a mask instead of 0.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from popjit import dtypes
from popjit.codegen.numerics import DEFAULT, Numerics
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
    Substitute,
    ivar,
)
from popjit.ir.loop_printer import IndexFormatter
from popjit.ops import registry
from popjit.ops.reduce import REDUCTIONS, Reduction

HEADER = """import numpy as np
from popjit.kernels import math as km
from popjit.kernels import random as kr
from popjit.kernels import rounding as kq
from popjit.kernels.bits import f16_to_f32, f32_to_f16
"""
CHUNK = 1 << 15  # elements per parallel chunk
WIDEST_VECTORS = "# element-wise: the widest vectors"
"""Marks the source of a codelet that computes each element on its own (no reduction): its loops may
use the host's widest vectors (:mod:`popjit.codegen.library`), which changes nothing in its results."""
TRAP_FLAGS = "# floating-point traps: flags or-ed in its loops"
"""Marks the source of a codelet that keeps floating-point trap flags: LLVM vectorises its loops only
after Numba's function passes simplify them (:mod:`popjit.codegen.machine`), which other codelets skip."""
SERIAL = "@CODELET"  # the decorator placeholder, filled by codegen.compile


@dataclass
class Rendered:
    """A codelet: its source, the name of its function, and the actual arguments to pass."""

    source: str
    func: str
    buffers: list[Buffer]
    ints: list[int]
    floats: list[float]
    split: tuple[int, int] | None = None  # parallel: (outermost loop's trip count, iterations per task)
    rounding_state: bool = False  # takes the device's stochastic-rounding key and call number
    traps: bool = False  # returns a trap mask (0: no exception)

    @property
    def key(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()[:20]


@dataclass
class _Params:
    ints: list[int] = field(default_factory=list)
    floats: list[float] = field(default_factory=list)
    buffers: list[Buffer] = field(default_factory=list)

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


def _may_be_inf(e: Expr) -> bool:
    """Whether a float value can be ±inf (not a finite constant, nor the result of a bounded op)."""
    if isinstance(e, Const):
        return e.dtype.is_floating and not math.isfinite(float(e.value))
    return e.dtype.is_floating and not (isinstance(e, Apply) and e.op in _BOUNDED)


def _loop_vars(e: Expr | ILin) -> set[str]:
    found = _LoopVars()
    found.index(e) if isinstance(e, ILin) else found.expr(e)
    return found.names


# Ops whose result is not floating-point arithmetic on their operands: a NaN passing through them is
# no invalid operation (classifications, and select, which moves data).
_NO_TRAP = frozenset({"is_nan", "is_finite", "select"})
# Division-like ops and the argument whose zero makes an infinite result a division by zero.
_POLES = {"div": 1, "floordiv": 1, "truncdiv": 1, "reciprocal": 0, "rsqrt": 0, "log": 0, "pow": 0}
# Ops whose result is finite whatever their (non-NaN) arguments: never an overflow, never ±inf.
_BOUNDED = frozenset({"tanh", "sigmoid", "erf", "sin", "cos"})


class _FloatPoint:
    """The floating-point behaviour of one codelet being rendered (see the module docstring): how its
    results round to float16, and the trap flags it keeps (``tinv``, ``tdz``, ``tov``, plus ``rinf``:
    a reduction had an infinite input, so an infinite total is no overflow). Flags, not counts: a
    boolean or-reduction keeps the loops vectorised."""

    def __init__(self, numerics: Numerics, sizes: dict[str, str]) -> None:
        self.numerics = numerics
        self.sizes = sizes  # loop variable -> its trip count (source)
        self.lanes = 0  # stochastic rounding sites so far

    @property
    def traps(self) -> bool:
        return bool(self.numerics.traps)

    def convert(self) -> str:
        """The float32 → float16 function of this codelet (it takes random bits too when stochastic)."""
        n = self.numerics
        return f"kq.f32_to_f16_{'sr_' if n.sr else ''}nanoo" if n.nanoo else \
            ("kq.f32_to_f16_sr" if n.sr else "f32_to_f16")

    def index(self, names: set[str]) -> str:
        """The iteration's position over the loop variables ``names``, mixed-radix by their trip counts
        (domain variables first): distinct iterations draw distinct random bits."""
        code = ""
        for name in sorted(names, key=lambda v: (v[0] != "i", int(v[1:]))):
            code = name if not code else f"({code}) * {self.sizes[name]} + {name}"
        return code or "0"

    def round16(self, value: str, names: set[str], hoist: Any) -> str:
        """Source of float32 ``value`` rounded to float16 bits (``names``: the loop variables it depends on;
        ``hoist(code, key)``: a variable computed once per call, before the loops)."""
        if not self.numerics.sr:
            return f"{self.convert()}({value})"
        self.lanes += 1
        base = hoist(f"kq.sr_base(sk0, sk1, sc, {self.lanes - 1})", ("rounding site", self.lanes - 1))
        return f"{self.convert()}({value}, kq.sr_bits({base}, {self.index(names)}))"

    def prologue(self) -> list[str]:
        return ["tinv = False", "tdz = False", "tov = False", "rinf = False"] if self.traps else []

    def result(self) -> str:
        return "tinv * 1 + tdz * 2 + tov * 4" if self.traps else "0"

    def check_apply(self, e: Apply, value: str, args: list[str], infs: list[str], pre: str | None) -> list[str]:
        """Trap checks of the result ``value`` of ``e``. ``infs``: the ±inf flags of the result and of
        its float arguments (when ``oflo`` or ``div0`` is on); ``pre``: the float32 value before rounding
        to float16, when NaN on overflow may have hidden an overflow. NaN results are checked where
        they are stored (NaN propagates through arithmetic), and here only as arguments of ops that
        drop it (comparisons, casts to integers, select, pow)."""
        n = self.numerics
        floats = [a for a, x in zip(args, e.args) if x.dtype.is_floating]
        lines = []
        if n.inv and floats and e.op not in ("is_nan", "is_finite") and (
                not e.dtype.is_floating or e.op in ("select", "pow")):
            lines.append(f"tinv |= {' | '.join(f'({a} != {a})' for a in floats)}")
        if not (n.oflo or n.div0) or not e.dtype.is_floating or e.op in _NO_TRAP | _BOUNDED:
            return lines
        result, *operands = infs
        lines.append(f"ovf = {result} & (not ({' | '.join(operands)}))" if operands else f"ovf = {result}")
        pole = _POLES.get(e.op)
        if pole is not None and n.div0:
            lines.append(f"tdz |= ovf & ({args[pole]} == 0)")
        if n.oflo:
            over = f"ovf & ({args[pole]} != 0)" if pole is not None else "ovf"
            lines.append(f"tov |= {over}" + (f" | (({value} != {value}) & ({pre} == {pre}))" if pre else ""))
        return lines

    def check_store(self, value: str, e: Expr) -> list[str]:
        """Trap check of a computed float value that is stored: NaN is an invalid operation."""
        computed = isinstance(e, Apply) and e.op not in _NO_TRAP
        return [f"tinv |= {value} != {value}"] if self.numerics.inv and computed and e.dtype.is_floating else []

    def check_total(self, total: str, rounded: str | None = None) -> list[str]:
        """Trap checks of a reduction's or scan's result ``total`` (``rounded``: its float16 value):
        NaN is an invalid operation; an infinite total of finite inputs, or a finite total that
        rounds past float16, an overflow."""
        n = self.numerics
        lines = [f"tinv |= {total} != {total}"] if n.inv else []
        if n.oflo:
            lines.append(f"tov |= (abs({total}) == km.INF) & (not rinf)")
            if rounded is not None:
                past = f"(abs({rounded}) == km.INF) | ({rounded} != {rounded})"
                lines.append(f"tov |= (abs({total}) < km.INF) & ({past})")
        return lines

    def count_inputs(self, value: str, dtype: DType) -> list[str]:
        """Checks of a reduction's input: NaN is an invalid operation; a ±inf input means an infinite
        total is no overflow (see :meth:`check_total`)."""
        if not dtype.is_floating:
            return []
        return ([f"tinv |= {value} != {value}"] if self.numerics.inv else []) + \
            ([f"rinf |= abs({value}) == km.INF"] if self.numerics.oflo else [])


class _Body(IndexFormatter):
    """Renders expressions as a sequence of SSA assignments, one per distinct subexpression; indices
    as Python source with their integers as parameters.

    ``loop_levels`` maps each loop variable to its loop's depth (1 for the outermost): every line
    records the depth of the innermost loop it depends on (``levels``), so a renderer can place it
    in the outermost loop where its value is known, computed once instead of once per inner
    iteration (loop-invariant code motion, done here because LLVM's loop vectorizer can take
    minutes on an inner loop that recomputes a long invariant chain)."""

    def __init__(self, params: _Params, hoisted: list[str], loop_levels: dict[str, int] | None = None,
                 fp: _FloatPoint | None = None, prefix: str = "v") -> None:
        super().__init__(params.int, self.expr)
        self.prefix = prefix  # of its variables' names: two bodies in one codelet need two
        self.params = params
        self.lines: list[str] = []
        self.levels: list[int] = []
        self.loop_levels = loop_levels or {}
        self.memo: dict[Any, str] = {}
        self.hoisted = hoisted
        self.hoist_memo: dict[Any, str] = {}
        self.fp = fp or _FloatPoint(DEFAULT, {})
        self.infs: dict[str, str] = {}  # value -> its ±inf flag (trap checks)
        self.level_of: dict[str, int] = {}  # value -> the loop level it is computed at

    def tmp(self, code: str, key: Any, at: Expr | None = None) -> str:
        """A variable holding ``code``, the value of ``key`` (placed at the loop level of ``at``, else ``key``)."""
        if key in self.memo:
            return self.memo[key]
        name = f"{self.prefix}{len(self.memo)}"
        self.memo[key] = name
        self.lines.append(f"{name} = {code}")
        self.levels.append(self._level(key if at is None else at))
        self.level_of[name] = self.levels[-1]
        return name

    def inf_flag(self, value: str) -> str:
        """A variable that is True where ``value`` is ±inf, computed once where ``value`` is."""
        if value not in self.infs:
            flag = self.infs[value] = f"n{value}"
            line = f"{flag} = abs({value}) == km.INF"
            if value in self.level_of:
                self.lines.append(line)
                self.levels.append(self.level_of[value])
            else:  # a hoisted constant or load
                self.hoisted.append(line)
        return self.infs[value]

    def _level(self, e: Expr | ILin) -> int:
        if not self.loop_levels:
            return 0
        return max((self.loop_levels.get(n, 0) for n in _loop_vars(e)), default=0)

    def extra(self, lines: list[str], level: int | None = None) -> None:
        """Lines that belong with the last value computed (trap checks): the same loop level, or ``level``."""
        if level is None:
            level = self.levels[-1] if self.levels else 0
        self.lines += lines
        self.levels += [level] * len(lines)

    def round16(self, value: str, key: Expr) -> str:
        """Source of float32 ``value`` (the value of ``key``) rounded to float16 and widened back."""
        if self.fp.numerics == DEFAULT:
            return f"f16_to_f32(f32_to_f16(np.float32({value})))"
        return f"f16_to_f32({self.fp.round16(f'np.float32({value})', _loop_vars(key), self.hoist)})"

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
            self.memo[key] = name = f"{self.prefix}{len(self.memo)}"
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
            return self.tmp(self.round16(code, e), e)
        return self.tmp(code if not e.dtype.is_floating else f"{compute_type(e.dtype)}({code})", e)

    def visit_apply(self, e: Apply) -> str:
        args = [self.expr(a) for a in e.args]
        op = registry.get(e.op)
        in_dtype = e.args[1].dtype if e.op == "select" else e.args[0].dtype
        code = registry.facet(op, "scalar")(args, in_dtype, **e.attr_dict)
        pre = None
        if e.dtype == dtypes.float16 and not op.half_exact:
            # why: float16 computes in float32, but each op's result rounds to float16 as in
            # TensorFlow, XLA and on the IPU, also inside a fused chain.
            if self.fp.numerics.nanoo and self.fp.numerics.oflo:  # the overflow NaN hides: keep the float32 value
                pre = code = self.tmp(f"np.float32({code})", ("float32", e), e)
            code = self.round16(code, e)
        elif e.dtype.is_floating and not (e.args and e.args[-1].dtype.is_floating and e.op != "cast"):
            code = f"{compute_type(e.dtype)}({code})"
        elif e.dtype.is_integer:
            # why: Numba computes int32 arithmetic in int64; wrap each result to its dtype, so a
            # fused ``(a * b) // c`` overflows like TensorFlow's ``a * b`` does.
            code = f"{compute_type(e.dtype)}({code})"
        name = self.tmp(code, e)
        n = self.fp.numerics
        infs: list[str] = []
        if (n.oflo or n.div0) and e.dtype.is_floating and e.op not in _NO_TRAP | _BOUNDED:
            infs = [self.inf_flag(name)] + [self.inf_flag(v) for v, x in zip(args, e.args) if _may_be_inf(x)]
        # why: with the result's flags, not the last flag's (an operand's, perhaps computed outside the loop
        # the result is computed in, where the result's flag does not exist)
        self.extra(self.fp.check_apply(e, name, args, infs, pre), self.level_of.get(name, 0))
        return name

    def const(self, value: Any, dtype: DType) -> str:
        if dtype.is_bool:
            return "True" if value else "False"
        if dtype.is_floating:
            return self.hoist(f"{compute_type(dtype)}({self.params.float(value)})", ("f", float(value), dtype.name))
        return self.hoist(f"{compute_type(dtype)}({self.params.int(int(value))})", ("i", int(value), dtype.name))

    def store_value(self, buf: Buffer, value: str, rounds: ILin | None = None) -> str:
        """Source of ``value`` converted for a store into ``buf``. ``rounds``: ``value`` is a float32
        total (a reduction's) that rounds to float16 at the store, at that index; otherwise a float16
        value is exact already."""
        if buf.dtype == dtypes.float16:
            if rounds is not None:
                return self.fp.round16(value, _loop_vars(rounds), self.hoist)
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


def render_kernel(k: Kernel, parallel: bool = False, numerics: Numerics = DEFAULT) -> Rendered:
    """Render a kernel as a Numba codelet. ``parallel``: the codelet runs a range ``[lo, hi)`` of its
    outermost loop (two more arguments) so the engine can split that loop over threads;
    ``numerics``: the program's floating-point behaviour."""
    params = _Params()
    hoisted: list[str] = []
    fp = _FloatPoint(numerics, {})
    parallel = parallel and bool(k.domain) and _splittable(k)
    if k.reduce is None:
        lines = _render_elementwise(k, params, hoisted, parallel, fp)
    elif k.reduce.mode == "scan":
        lines = _render_scan(k, params, hoisted, fp)
    elif REDUCTIONS[k.reduce.op].is_arg:
        lines = _render_argreduce(k, params, hoisted, parallel, fp)
    else:
        lines = _render_reduce(k, params, hoisted, parallel, fp)
    args = [f"b{i}" for i in range(len(params.buffers))]
    args += [f"p{i}" for i in range(len(params.ints))] + [f"f{i}" for i in range(len(params.floats))]
    if fp.lanes:
        args += ["sk0", "sk1", "sc"]
    if parallel:
        args += ["lo", "hi"]
    body = _indent(fp.prologue() + hoisted, 1) + _indent(lines, 1) + [f"    return {fp.result()}"]
    sig_dtypes = ", ".join(f"{b.dtype.short}" for b in params.buffers)
    marks = f"# buffers: {sig_dtypes}\n" + (f"{WIDEST_VECTORS}\n" if k.reduce is None else "") + \
        (f"{TRAP_FLAGS}\n" if fp.traps else "")
    text = f"{marks}{SERIAL}\ndef NAME({', '.join(args)}):\n" + "\n".join(body) + "\n"
    name = "k_" + hashlib.sha256(text.encode()).hexdigest()[:20]
    split = (int(k.domain[0]), max(1, CHUNK // max(1, math.prod(int(d) for d in k.domain[1:])))) if parallel else None
    return Rendered(text.replace("NAME", name), name, params.buffers, params.ints, params.floats, split,
                    bool(fp.lanes), fp.traps)


def _splittable(k: Kernel) -> bool:
    """Whether the outermost loop's iterations are independent, so threads may run ranges of it:
    element-wise kernels, arg-reductions, reductions that accumulate in registers, and those that
    accumulate rows of their output of two axes or more (:func:`_render_reduce`: row by row, each row's
    reduction loops inside its outer axes' loops)."""
    if k.reduce is None:
        return True
    if k.reduce.mode == "scan":
        return False
    return REDUCTIONS[k.reduce.op].is_arg or _reduce_in_registers(k) or len(k.domain) >= 2


def _domain_loops(k: Kernel, params: _Params, chunked: bool, fp: _FloatPoint) -> tuple[list[str], int]:
    """Loop headers over the kernel's domain; with ``chunked`` the outermost runs over ``[lo, hi)``."""
    return _nest(*_axes(k, params, fp), chunked)


def _axes(k: Kernel, params: _Params, fp: _FloatPoint) -> tuple[list[str], list[str]]:
    """The names and trip counts (source) of the loops over the kernel's domain, outermost first."""
    names = [f"i{j}" for j in range(len(k.domain))]
    sizes = [params.int(d) for d in k.domain]
    fp.sizes.update(zip(names, sizes))
    return names, sizes


#: The header of a split codelet's outermost loop: the range ``[lo, hi)`` of ``i0`` its caller gave it.
_CHUNKED_HEAD = ("for j0 in range(hi - lo):", "    i0 = lo + j0")


def _nest(names: list[str], sizes: list[str], chunked: bool) -> tuple[list[str], int]:
    """Loop headers over the axes ``names`` (``i0`` first) of trip counts ``sizes``, and their depth; with
    ``chunked`` the outermost runs over ``[lo, hi)``."""
    if not names:
        return [], 0
    rest, depth = _loops(names[1:], sizes[1:])
    first = _CHUNKED_HEAD if chunked else (f"for {names[0]} in range({sizes[0]}):",)
    return [*first, *_indent(rest, 1)], depth + 1


def _reduction_sizes(k: Kernel, params: _Params, fp: _FloatPoint) -> list[str]:
    """The trip counts of the reduction loops ``r0, r1...``, as source."""
    assert k.reduce is not None
    sizes = [params.int(d) for d in k.reduce.rdomain]
    fp.sizes.update((f"r{j}", size) for j, size in enumerate(sizes))
    return sizes


def _loop_headers(k: Kernel, params: _Params, chunked: bool, fp: _FloatPoint) -> list[list[str]]:
    """The opening lines of each loop over the kernel's domain, outermost first; with ``chunked`` the
    outermost runs over ``[lo, hi)``."""
    headers = [[f"for {name} in range({size}):"] for name, size in zip(*_axes(k, params, fp), strict=True)]
    if chunked and headers:
        headers[0] = list(_CHUNKED_HEAD)
    return headers


def _render_elementwise(k: Kernel, params: _Params, hoisted: list[str], parallel: bool,
                        fp: _FloatPoint) -> list[str]:
    headers = _loop_headers(k, params, parallel, fp)
    depth = len(headers)
    body = _Body(params, hoisted, {f"i{j}": j + 1 for j in range(depth)}, fp)
    values = [(s, body.expr(s.value)) for s in k.stores]
    stores = [line for s, v in values for line in fp.check_store(v, s.value)]
    stores += [f"{_at(params.buf(s.buf), body.flat_index(s.index))} = "
               f"{body.store_value(s.buf, v, None if s.value.dtype == s.buf.dtype else s.index)}" for s, v in values]
    by_level: list[list[str]] = [[] for _ in range(depth + 1)]
    for line, level in zip(body.lines, body.levels):
        by_level[level].append(line)
    by_level[depth] += stores
    out = by_level[0]
    for level, header in enumerate(headers, start=1):
        out += _indent(header, level - 1) + _indent(by_level[level], level)
    return out


def _reduce_in_registers(k: Kernel) -> bool:
    """Whether a reduction accumulates in a register per output element (the outer loops run over the
    kept axes, the reduction loops inside), rather than over whole rows of its output buffer."""
    assert k.reduce is not None
    (store,) = k.stores
    acc_t = REDUCTIONS[k.reduce.op].accumulator(store.value.dtype)
    return _inner_reduce(k) or not k.domain or acc_t != store.buf.dtype


def _inner_reduce(k: Kernel) -> bool:
    """Reduce in registers (reduction loops innermost) unless a kept axis is the unit-stride one."""
    (store,) = k.stores
    innermost_kept = f"i{len(k.domain) - 1}" if k.domain else None
    for ld in store.value.loads():
        for atom, c in ld.index.terms:
            if c == 1 and isinstance(atom, IVar) and atom.name == innermost_kept:
                return False
    return True


def _store_total(body: _Body, store: Any, total: str) -> list[str]:
    """The lines storing a reduction's or scan's float32 ``total``: rounded to the buffer's type, with
    the trap checks of a total when they are on."""
    ref = _at(body.params.buf(store.buf), body.index(store.index))
    value = body.store_value(store.buf, total, store.index)
    fp = body.fp
    if not fp.traps or not store.value.dtype.is_floating:
        return [f"{ref} = {value}"]
    if store.buf.dtype != dtypes.float16:
        return [*fp.check_total(total), f"{ref} = {value}"]
    return [f"h = {value}", *fp.check_total(total, "f16_to_f32(h)"), f"{ref} = h"]


def _render_reduce(k: Kernel, params: _Params, hoisted: list[str], parallel: bool, fp: _FloatPoint) -> list[str]:
    assert k.reduce is not None
    (store,) = k.stores
    red = REDUCTIONS[k.reduce.op]
    acc_t = red.accumulator(store.value.dtype)
    rnames = [f"r{j}" for j in range(len(k.reduce.rdomain))]
    if _reduce_in_registers(k):
        head, depth = _domain_loops(k, params, parallel, fp)
        rloops, rdepth = _loops(rnames, _reduction_sizes(k, params, fp))
        body = _Body(params, hoisted, fp=fp)
        v = body.expr(store.value)
        inner = body.lines + fp.count_inputs(v, store.value.dtype) + [f"acc = {red.step('acc', v, acc_t)}"]
        out = _store_total(body, store, "acc")
        return head + _indent([f"acc = {_reduce_init(red, acc_t)}", *rloops, *_indent(inner, rdepth), *out], depth)
    # A kept axis is the contiguous one: accumulate whole output rows in the output buffer itself
    # (vectorises along the kept axis; the accumulator has the output's type, checked above).
    body = _Body(params, hoisted, fp=fp)
    v = body.expr(store.value)
    out = _at(params.buf(store.buf), body.index(store.index))
    rloops, rdepth = _loops(rnames, _reduction_sizes(k, params, fp))
    init = [f"{out} = {_reduce_init(red, acc_t)}"]
    update = body.lines + fp.count_inputs(v, store.value.dtype) + [f"{out} = {red.step(out, v, acc_t)}"]
    checks = fp.check_total(out) if fp.traps and acc_t.is_floating else []
    if len(k.domain) >= 2:  # row by row: the reduction loops inside the outer kept axes' loops (see _splittable)
        names, sizes = _axes(k, params, fp)
        head, depth = _nest(names[:-1], sizes[:-1], parallel)  # the rows inside
        row, _ = _loops(names[-1:], sizes[-1:])
        sweeps = [*row, *_indent(init, 1), *rloops, *_indent([*row, *_indent(update, 1)], rdepth)]
        return head + _indent(sweeps + ([*row, *_indent(checks, 1)] if checks else []), depth)
    head, depth = _domain_loops(k, params, False, fp)
    return head + _indent(init, depth) + rloops + _indent(head + _indent(update, depth), rdepth) + \
        (head + _indent(checks, depth) if checks else [])


def _render_argreduce(k: Kernel, params: _Params, hoisted: list[str], parallel: bool, fp: _FloatPoint) -> list[str]:
    assert k.reduce is not None
    if len(k.domain) >= 2 and len(k.reduce.rdomain) == 1 and not _inner_reduce(k):
        return _render_argreduce_rows(k, params, hoisted, parallel, fp)
    (store,) = k.stores
    red = REDUCTIONS[k.reduce.op]
    better = red.better
    head, depth = _domain_loops(k, params, parallel, fp)
    n = params.int(k.reduce.rdomain[0])
    body = _Body(params, hoisted, fp=fp)
    v = body.expr(store.value)
    init = _reduce_init(red, store.value.dtype)
    nan = store.value.dtype.is_floating
    cond = f"({v} {better} best or ({v} != {v} and best == best))" if nan else f"{v} {better} best"
    compared = [f"tinv |= {v} != {v}"] if nan and fp.numerics.inv else []  # comparing a NaN is invalid
    inner = [*body.lines, *compared, f"if {cond}:", f"    best = {v}", "    bi = r0"]
    out = f"{_at(params.buf(store.buf), body.index(store.index))} = {body.store_value(store.buf, 'bi')}"
    return head + _indent([f"best = {init}", "bi = 0", f"for r0 in range({n}):", *_indent(inner, 1), out], depth)


def _render_argreduce_rows(k: Kernel, params: _Params, hoisted: list[str], parallel: bool,
                           fp: _FloatPoint) -> list[str]:
    """An arg-reduction whose innermost kept axis is the unit-stride one (a max-pool gradient's argmax
    over a window, channels last): per row of that axis, the reduction loop outside and the row inside,
    branch-free, so the row loop vectorises (as the element-wise loop does) where one element at a time
    compared 4 values in a branchy scalar loop (5x slower). The output holds each element's best index
    so far; the best value rides beside it (:func:`_packed_rows`) or, where it cannot, is read again at
    it (``bi``), which keeps the codelet in the subset :mod:`popjit.codegen.direct` compiles (no
    scratch array). The first step compares the first value with itself and keeps index 0, as the
    scalar loop does from the identity; every later step makes the same comparison with the same best
    value, so the results are the same."""
    assert k.reduce is not None
    (store,) = k.stores
    names, sizes = _axes(k, params, fp)
    head, depth = _nest(names[:-1], sizes[:-1], parallel)  # the rows inside
    n = params.int(k.reduce.rdomain[0])
    row = len(names) + 1  # the row loop's level: inside the kept axes' loops and r0's
    levels = {**{name: level for level, name in enumerate(names[:-1], start=1)}, "r0": row - 1, names[-1]: row,
              "bi": row}
    body = _Body(params, hoisted, levels, fp=fp)
    out = _at(params.buf(store.buf), body.index(store.index))
    sweeps = _packed_rows if _packs_best(store) else _gathering_rows
    return [*head, *_indent(sweeps(k, body, fp, out, names[-1], sizes[-1], n), depth)]


def _row_sweep(body: _Body, row: str, size: str, n: str, update: Callable[[list[str]], list[str]]) -> list[str]:
    """``for r0: for row:`` around ``update(lines)``, ``lines`` being the body's lines that vary along the
    row; those that do not (a window offset ``r0 // 3 * c``) are computed once per ``r0``, before the row
    loop. why: LLVM took 0.45 s to compile a max-pool gradient's argmax whose row loop recomputed such a
    quotient, 0.2 s with it outside (same code in the loop)."""
    level = body.loop_levels[row]
    outer = [line for line, at in zip(body.lines, body.levels) if at < level]
    inner = [line for line, at in zip(body.lines, body.levels) if at >= level]
    return [f"for r0 in range({n}):", *_indent(outer, 1), f"    for {row} in range({size}):",
            *_indent(update(inner), 2)]


def _take(k: Kernel, v: str, best: str, fp: _FloatPoint) -> list[str]:
    """Whether value ``v`` beats ``best`` (``take``; a NaN beats any number), and the invalid-comparison
    flag where the program traps."""
    assert k.reduce is not None
    better = REDUCTIONS[k.reduce.op].better
    if not k.stores[0].value.dtype.is_floating:
        return [f"take = {v} {better} {best}"]
    compared = [f"tinv |= {v} != {v}"] if fp.numerics.inv else []  # comparing a NaN is invalid
    return [*compared, f"take = ({v} {better} {best}) | (({v} != {v}) & ({best} == {best}))"]


def _gathering_rows(k: Kernel, body: _Body, fp: _FloatPoint, out: str, row: str, size: str, n: str) -> list[str]:
    """The row sweeps of :func:`_render_argreduce_rows` where the output holds only the best index
    (``bi``): the best value is read again at it."""
    (store,) = k.stores
    v = body.expr(store.value)
    b = body.expr(Substitute({IVar("r0"): ivar("bi")}).expr(store.value))
    take = _take(k, v, b, fp)
    start = [f"for {row} in range({size}):", f"    {out} = {body.store_value(store.buf, '0')}"]
    return start + _row_sweep(body, row, size, n, lambda lines: [
        f"bi = {out}", *lines, *take, f"{out} = {body.store_value(store.buf, 'r0')} if take else bi"])


def _packs_best(store: Any) -> bool:
    """Whether an arg-reduction's int64 output can hold its best value's float32 bits beside the index."""
    return store.buf.dtype == dtypes.int64 and compute_type(store.value.dtype) == "np.float32"


_LOW32 = 0xFFFFFFFF


def _packed_rows(k: Kernel, body: _Body, fp: _FloatPoint, out: str, row: str, size: str, n: str) -> list[str]:
    """The row sweeps of :func:`_render_argreduce_rows` for float32 values and int64 indices: each output
    element holds ``index << 32 | bits(best value)`` while the rows are swept, so the best value comes
    back with the index in one load instead of a gather at the index; a last sweep keeps the index.
    The comparisons are those of :func:`_gathering_rows`, on the same values."""
    (store,) = k.stores
    first = _Body(body.params, body.hoisted, fp=fp, prefix="w")  # why w: body's v0 may be an index
    first.hoist_memo = body.hoist_memo  # why: one hoisted block, so one name for each constant or load
    v0 = first.expr(Substitute({IVar("r0"): ILin()}).expr(store.value))
    v = body.expr(store.value)
    start = [f"for {row} in range({size}):", *_indent(first.lines, 1),
             f"    {out} = np.int64(km.f32_bits({v0})) & {_LOW32}"]
    take = _take(k, v, "best", fp)
    sweep = _row_sweep(body, row, size, n, lambda lines: [
        f"packed = {out}", "best = km.f32_from_bits(packed)", *lines, *take,
        f"{out} = ((r0 << 32) | (np.int64(km.f32_bits({v})) & {_LOW32})) if take else packed"])
    finish = [f"for {row} in range({size}):", f"    {out} = {out} >> 32"]
    return start + sweep + finish


def _render_scan(k: Kernel, params: _Params, hoisted: list[str], fp: _FloatPoint) -> list[str]:
    assert k.reduce is not None
    (store,) = k.stores
    head, depth = _domain_loops(k, params, False, fp)
    (n,) = _reduction_sizes(k, params, fp)
    total = REDUCTIONS[k.reduce.op]
    acc_t = total.accumulator(store.value.dtype)
    body = _Body(params, hoisted, fp=fp)
    v = body.expr(store.value)
    out = _store_total(body, store, "acc")
    update = [*fp.count_inputs(v, store.value.dtype), f"acc = {total.step('acc', v, acc_t)}"]
    step = [*update, *out] if not k.reduce.exclusive else [*out, *update]
    r0 = f"({n} - 1 - rr)" if k.reduce.reverse else "rr"
    inner = [f"r0 = {r0}", *body.lines, *step]
    return head + _indent([f"acc = {_reduce_init(total, acc_t)}", f"for rr in range({n}):", *_indent(inner, 1)],
                          depth)
