"""The loop-IR interpreter: runs a program with NumPy, a whole kernel domain at a time.

It evaluates index expressions and scalar expressions over every point of a kernel's domain at
once (arrays of loop-variable values), using each op's NumPy reference for ``Apply``. It is the
executable meaning of the loop IR; tests check it against the graph interpreter, and the
compiled engine against it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from popjit.ir.loop import (
    Apply,
    Buffer,
    Collective,
    Const,
    Copy,
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
    StmtVisitor,
    While,
)
from popjit.ops import registry
from popjit.ops.collectives import statement_result
from popjit.ops.reduce import REDUCTIONS

Memory = dict[int, np.ndarray]


class Evaluator(LoopFunctor):
    """Index and value expressions over ``n`` points at once: ``env`` holds each loop variable's
    values (int64 arrays of length ``n``), ``mem`` the buffers by uid."""

    def __init__(self, env: dict[str, np.ndarray], mem: Memory, n: int) -> None:
        self.env = env
        self.mem = mem
        self.n = n

    def index(self, ix: ILin) -> np.ndarray:
        out = np.full(self.n, ix.const, dtype=np.int64)
        for atom, c in ix.terms:
            out += c * self.atom(atom)
        return out

    def visit_var(self, a: IVar) -> np.ndarray:
        return self.env[a.name]

    def visit_div(self, a: IDiv) -> np.ndarray:
        return self.index(a.x) // a.c

    def visit_mod(self, a: IMod) -> np.ndarray:
        return self.index(a.x) % a.c

    def visit_min(self, a: IMin) -> np.ndarray:
        return np.minimum(self.index(a.a), self.index(a.b))

    def visit_max(self, a: IMax) -> np.ndarray:
        return np.maximum(self.index(a.a), self.index(a.b))

    def visit_value(self, a: IValue) -> np.ndarray:
        return self.expr(a.expr).astype(np.int64)

    def visit_load(self, e: Load) -> np.ndarray:
        return self.mem[e.buf.uid][self.index(e.index)]

    def visit_const(self, e: Const) -> np.ndarray:
        return np.full(self.n, e.value, dtype=e.dtype.np)

    def visit_index_value(self, e: IndexValue) -> np.ndarray:
        return self.index(e.index).astype(e.dtype.np)

    def visit_apply(self, e: Apply) -> np.ndarray:
        args = [self.expr(a) for a in e.args]
        with np.errstate(all="ignore"):
            out = registry.get(e.op).reference(*args, **e.attr_dict)
        return np.asarray(out, dtype=e.dtype.np)


def _grid(dims: Sequence[int], names: Sequence[str]) -> tuple[dict[str, np.ndarray], int]:
    n = int(np.prod(dims, dtype=np.int64)) if dims else 1
    if not dims:
        return {}, 1
    idx = np.indices(dims).reshape(len(dims), -1)
    return {name: idx[k].astype(np.int64) for k, name in enumerate(names)}, n


def run_kernel(k: Kernel, mem: Memory) -> None:
    (store,) = k.stores if k.reduce else (None,)
    if k.reduce is None:
        env, n = _grid(k.domain, [f"i{j}" for j in range(len(k.domain))])
        ev = Evaluator(env, mem, n)
        values = [(s, ev.expr(s.value), ev.index(s.index)) for s in k.stores]
        for s, v, ix in values:
            mem[s.buf.uid][ix] = v.astype(s.buf.dtype.np)
        return
    assert store is not None
    r = k.reduce
    names = [f"i{j}" for j in range(len(k.domain))] + [f"r{j}" for j in range(len(r.rdomain))]
    env, n = _grid(tuple(k.domain) + tuple(r.rdomain), names)
    nd = int(np.prod(k.domain, dtype=np.int64)) if k.domain else 1
    nr = n // nd if nd else 0
    body = Evaluator(env, mem, n).expr(store.value).reshape(nd, nr)
    target = mem[store.buf.uid]
    if r.mode == "reduce":
        with np.errstate(all="ignore"):
            red = REDUCTIONS[r.op].numpy(body if nr else np.zeros((nd, 0), body.dtype), (1,), False)
        denv, _ = _grid(k.domain, [f"i{j}" for j in range(len(k.domain))])
        ix = Evaluator(denv, mem, nd).index(store.index)
        target[ix] = np.asarray(red).astype(target.dtype)
        return
    acc = np.flip(body, 1) if r.reverse else body
    with np.errstate(all="ignore"):
        c = np.cumsum(acc, axis=1, dtype=np.float32 if acc.dtype == np.float16 else None)
    if r.exclusive:
        c = np.concatenate([np.zeros((nd, 1), c.dtype), c[:, :-1]], axis=1)
    c = np.flip(c, 1) if r.reverse else c
    target[Evaluator(env, mem, n).index(store.index)] = c.reshape(-1).astype(target.dtype)


def run_matmul(m: MatMul, mem: Memory) -> None:
    a, b, out = mem[m.a.uid], mem[m.b.uid], mem[m.out.uid]
    acc = np.float32 if out.dtype == np.float16 else out.dtype
    for i in range(m.batch):
        am = a[i * m.a_batch_stride:][: m.m * m.k].reshape((m.k, m.m) if m.ta else (m.m, m.k))
        bm = b[i * m.b_batch_stride:][: m.k * m.n].reshape((m.n, m.k) if m.tb else (m.k, m.n))
        am = am.T if m.ta else am
        bm = bm.T if m.tb else bm
        prod = (am.astype(acc) @ bm.astype(acc)).reshape(-1)
        rows = slice(i * m.m * m.n, (i + 1) * m.m * m.n)
        if m.alpha != 1.0 or m.beta != 0.0:
            prod = m.alpha * prod + m.beta * out[rows].astype(acc)
        out[rows] = prod.astype(out.dtype)


class Runner(StmtVisitor):
    """Runs statements on ``mem``: kernels and matmuls with NumPy, control flow in Python."""

    def __init__(self, mem: Memory) -> None:
        self.mem = mem

    def visit_kernel(self, s: Kernel) -> None:
        run_kernel(s, self.mem)

    def visit_matmul(self, s: MatMul) -> None:
        run_matmul(s, self.mem)

    def visit_copy(self, s: Copy) -> None:
        self.mem[s.dst.uid][...] = self.mem[s.src.uid]

    def visit_collective(self, s: Collective) -> None:
        """One replica alone: a group of one (a replicated program runs on the engine, not here)."""
        if s.group > 1:
            raise ValueError(f"{s.name}: a collective over groups of {s.group} replicas needs a replicated run")
        src = self.mem[s.src.uid].reshape(s.operand_shape)
        self.mem[s.dst.uid][...] = statement_result(s, [src], 0).reshape(-1)

    def visit_repeat(self, s: Repeat) -> None:
        for _ in range(s.count):
            self.block(s.body)

    def visit_while(self, s: While) -> None:
        count = 0
        self.block(s.cond)
        while bool(self.mem[s.pred.uid][0]) and (s.max_iterations is None or count < s.max_iterations):
            self.block(s.body)
            count += 1
            self.block(s.cond)

    def visit_if(self, s: If) -> None:
        self.block(s.then if bool(self.mem[s.pred.uid][0]) else s.orelse)


def _alloc(buf: Buffer) -> np.ndarray:
    if buf.kind == "const":
        assert buf.value is not None
        return np.array(buf.value, dtype=buf.dtype.np).reshape(-1)
    return np.zeros(buf.size, dtype=buf.dtype.np)


def interpret(prog: Program, args: Sequence[Any], variables: dict[int, np.ndarray] | None = None,
              ) -> tuple[list[np.ndarray], dict[int, np.ndarray]]:
    """Run ``prog``: returns (outputs in order, new variable values)."""
    variables = variables or {}
    mem: Memory = {b.uid: _alloc(b) for b in prog.buffers()}
    for b in prog.args:
        mem[b.uid][...] = np.asarray(args[b.binding]).reshape(-1)
    for b in prog.variables:
        if b.binding in variables:
            mem[b.uid][...] = np.asarray(variables[b.binding]).reshape(-1)
    Runner(mem).block(prog.body)
    outs = [mem[b.uid].reshape(b.shape) for b in prog.outs]
    return outs, {b.binding: mem[b.uid].reshape(b.shape) for b in prog.variables}
