"""Loop-IR program → one engine function (Numba source) that runs the whole program natively.

    def engine(B0, B1, B2, B3, P, F, S):   # argument, variable, constant, result, temporary buffers
        for _ in range(P[1]):               # Repeat: a native loop
            if S[0]:                        # Ctrl-C: stop at an iteration boundary
                return 1
            k_3f2a(B3, B0, P[2], F[0])      # a codelet call per compute set
            B1[:] = B3                      # Copy
        return 0

Like codelets, the engine's text depends only on the program's structure: every size, count
and constant is read from the ``P`` (int64) and ``F`` (float64) arrays, filled per program.
``S`` is the interrupt flag (:mod:`popjit.pipeline.interrupts`), polled at the start of every loop
iteration; the engine returns 1 when it stopped there, 0 when it ran to the end.

With floating-point traps on (:mod:`popjit.codegen.numerics`), every codelet returns a trap mask
and the engine stops at the first compute set that raised one, returning
``TRAPPED | mask | (compute set << 8)``. With stochastic rounding it takes one more array, ``R``:
the device's rounding key (two words) and a call number that each rounding codelet call advances.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np

from popjit import config, dtypes
from popjit.codegen.numerics import DEFAULT, TRAPPED, Numerics
from popjit.codegen.render import Rendered, render_kernel
from popjit.dtypes import DType
from popjit.ir.loop import Buffer, Copy, If, Kernel, MatMul, Program, Repeat, Stmt, StmtVisitor, While
from popjit.loop.passes import scatters


@dataclass
class EngineSource:
    """Everything needed to build and call one engine."""

    source: str
    name: str
    codelets: dict[str, Rendered]
    arguments: list[Buffer]  # the engine's buffer parameters, in order
    ints: np.ndarray
    floats: np.ndarray
    library: dict[str, str] = field(default_factory=dict)  # hand-written codelets used: name -> module
    native: bool = True  # compiled; False: one codelet call, run from Python (see `needs_native`)
    numerics: Numerics = DEFAULT
    compute_sets: list[str] = field(default_factory=list)  # a trap's compute set number -> its name

    @property
    def rounding_state(self) -> bool:
        """Whether the engine takes the device's stochastic-rounding state ``R``."""
        return self.numerics.sr


#: Polled at the start of every loop iteration: an interrupted run returns 1 at that boundary.
STOP_CHECK = "if S[0]: return 1"


def storage_dtype(dtype: DType) -> np.dtype:
    """How a dtype is stored in engine buffers (float16 as its uint16 bit pattern)."""
    return np.dtype(np.uint16) if dtype == dtypes.float16 else dtype.np


def matmul_codelet(dtype: DType) -> str:
    if dtype == dtypes.float32:
        return "matmul_f32"
    if dtype == dtypes.float64:
        return "matmul_f64"
    if dtype == dtypes.float16:
        return "matmul_f16"
    return "matmul_int"


class _Emitter(StmtVisitor):
    """Writes the engine's lines: a codelet call per kernel, library calls, native control flow."""

    def __init__(self, program: Program, numerics: Numerics = DEFAULT) -> None:
        self.program = program
        self.numerics = numerics
        self.compute_sets: list[str] = []
        self.ints: list[int] = []
        self.floats: list[float] = []
        self.codelets: dict[str, Rendered] = {}
        self.library: dict[str, str] = {}
        self.names: dict[int, str] = {}
        # why: temporaries come from the host too; `np.empty` inside the engine would make Numba compile
        # its error-message path (string formatting), over a second of every cold compile.
        args = [*program.args, *program.variables, *program.consts, *program.outs, *program.stream_in,
                *program.stream_out, *program.temps]
        for k, b in enumerate(args):
            self.names[b.uid] = f"B{k}"
        self.arguments = args
        self.loop_depth = 0
        self.lines: list[str] = []
        self.depth = 1

    def int(self, v: int) -> str:
        self.ints.append(int(v))
        return f"P[{len(self.ints) - 1}]"

    def float(self, v: float) -> str:
        self.floats.append(float(v))
        return f"F[{len(self.floats) - 1}]"

    def buf(self, b: Buffer) -> str:
        return self.names[b.uid]

    def emit(self, line: str) -> None:
        self.lines.append("    " * self.depth + line)

    def nested(self, stmts: list[Stmt]) -> None:
        """``stmts`` one level deeper (``pass`` for an empty block)."""
        self.depth += 1
        before = len(self.lines)
        self.block(stmts)
        if len(self.lines) == before:
            self.emit("pass")
        self.depth -= 1

    def call(self, call: str, name: str, traps: bool, rounds: bool) -> None:
        """Emit a compute set's call: with ``traps`` its mask stops the engine, with ``rounds`` it
        advances the rounding call number."""
        if not traps:
            self.emit(f"{call}  # {name}")
        else:
            self.emit(f"_t = {call}  # {name}")
            self.emit(f"if _t: return {TRAPPED} | _t | ({len(self.compute_sets)} << 8)")
            self.compute_sets.append(name)
        if rounds:
            self.emit("R[2] += 1")

    def visit_kernel(self, s: Kernel) -> None:
        parallel = (s.size >= config.get("PARALLEL_MIN_ELEMENTS") and not config.get("DISABLE_NUMBA")
                    and not scatters(s))
        r = render_kernel(s, parallel, self.numerics)
        self.codelets[r.func] = r
        args = [self.buf(b) for b in r.buffers] + [self.int(v) for v in r.ints] + [self.float(v) for v in r.floats]
        if r.rounding_state:
            args += ["R[0]", "R[1]", "R[2]"]
        self.call(f"{r.func}({', '.join(args)})", s.name, r.traps, r.rounding_state)

    def visit_matmul(self, s: MatMul) -> None:
        fn = matmul_codelet(s.out.dtype)
        nums = [s.batch, s.m, s.n, s.k]
        args = [self.buf(s.out), self.buf(s.a), self.buf(s.b), *map(self.int, nums),
                str(bool(s.ta)), str(bool(s.tb)), self.int(s.a_batch_stride), self.int(s.b_batch_stride),
                self.float(s.alpha), self.float(s.beta)]
        half = s.out.dtype == dtypes.float16
        n = self.numerics
        if half and (n.sr or n.nanoo):
            fn = "matmul_f16_rounded"
            args += [str(n.nanoo), str(n.sr)] + (["R[0]", "R[1]", "R[2]"] if n.sr else ["0", "0", "0"])
        self.library[fn] = "popjit.kernels.matmul"
        traps = bool(n.inv or n.oflo) and s.out.dtype.is_floating
        if not traps:
            self.call(f"{fn}({', '.join(args)})", s.name, False, half and n.sr)
            return
        check = "product_traps_half" if half else "product_traps_float"
        self.library[check] = "popjit.kernels.rounding"
        self.emit(f"{fn}({', '.join(args)})  # {s.name}")
        self.call(f"{check}({self.buf(s.out)}, {self.buf(s.a)}, {self.buf(s.b)}, {n.inv}, {n.oflo})", s.name, True,
                  half and n.sr)

    def visit_copy(self, s: Copy) -> None:
        self.library["copy"] = "popjit.kernels.copy"
        self.emit(f"copy({self.buf(s.dst)}, {self.buf(s.src)})")

    def visit_repeat(self, s: Repeat) -> None:
        self.loop_depth += 1
        self.emit(f"for _r{self.loop_depth} in range({self.int(s.count)}):")
        self.emit(f"    {STOP_CHECK}")
        self.nested(s.body)
        self.loop_depth -= 1

    def visit_while(self, s: While) -> None:
        self.loop_depth += 1
        n = f"_n{self.loop_depth}"
        self.emit(f"{n} = 0")
        self.emit("while True:")
        self.nested(s.cond)
        self.emit(f"    if not {self.buf(s.pred)}[0]:")
        self.emit("        break")
        if s.max_iterations is not None:
            self.emit(f"    if {n} >= {self.int(s.max_iterations)}:")
            self.emit("        break")
        self.emit(f"    {STOP_CHECK}")
        self.nested(s.body)
        self.emit(f"    {n} += 1")
        self.loop_depth -= 1

    def visit_if(self, s: If) -> None:
        self.emit(f"if {self.buf(s.pred)}[0]:")
        self.nested(s.then)
        self.emit("else:")
        self.nested(s.orelse)


def needs_native(program: Program) -> bool:
    """Whether the engine must be compiled. A program that is one codelet call gains nothing from a
    compiled engine around it (the call is the whole run), and compiling one would double the
    compiles of every eager op on the IPU; anything with loops, branches or several steps is native."""
    return not (len(program.body) == 1 and isinstance(program.body[0], (Kernel, MatMul)))


def render_engine(program: Program, numerics: Numerics = DEFAULT) -> EngineSource:
    """Render ``program`` as an engine function plus the codelets it calls (``numerics``: the
    program's floating-point behaviour)."""
    em = _Emitter(program, numerics)
    em.block(program.body)
    body = em.lines or ["    pass"]
    params = ", ".join([*(em.buf(b) for b in em.arguments), "P", "F", "S", *(["R"] if numerics.sr else [])])
    text = "\n".join([f"def engine({params}):", *body, "    return 0", ""])
    name = "e_" + hashlib.sha256(text.encode()).hexdigest()[:20]
    text = text.replace("def engine(", f"def {name}(", 1)
    return EngineSource(text, name, em.codelets, em.arguments, np.array(em.ints, dtype=np.int64),
                        np.array(em.floats, dtype=np.float64), em.library, needs_native(program), numerics,
                        em.compute_sets)
