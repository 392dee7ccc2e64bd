"""Random programs: the graph interpreter, the loop-IR interpreter and the compiled engine agree.

Hypothesis draws a small program — a list of steps over a pool of values that all broadcast to
one [m, n] shape (inputs [m, n], [1, n], [m, 1]): unary ops, broadcasting binary ops, keepdims
reductions, reversed slices, optionally inside a counted loop — and the three levels must compute
the same values. Fusion, dim collapsing, copy elision and code generation all get exercised on
shapes and structures no hand-written test has.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import popjit.tensorflow as tf
from popjit.graph.interpret import interpret as run_graph
from popjit.loop.interpret import interpret as run_loop
from popjit.pipeline import compile_graph, lower_graph, optimize_graph
from popjit.schedule import make_target
from tests.helpers import assert_close

UNARY = {
    "tanh": tf.tanh, "sigmoid": tf.sigmoid, "neg": tf.negative, "abs": tf.abs, "square": lambda x: x * x,
    "exp_small": lambda x: tf.exp(tf.clip_by_value(x, -5.0, 5.0)), "log1p_abs": lambda x: tf.math.log1p(tf.abs(x)),
    "relu": tf.nn.relu, "reverse_rows": lambda x: x[::-1], "reverse_cols": lambda x: x[:, ::-1],
}
BINARY = {
    "add": tf.add, "sub": tf.subtract, "mul": tf.multiply, "max": tf.maximum, "min": tf.minimum,
    "safe_div": lambda a, b: a / (tf.abs(b) + 1.0),
}
REDUCE = {"sum": tf.reduce_sum, "max": tf.reduce_max, "mean": tf.reduce_mean}


@dataclass(frozen=True)
class Step:
    kind: str  # unary | binary | reduce
    op: str
    a: int
    b: int = 0
    axis: int = 0


def steps(n_inputs: int) -> st.SearchStrategy[list[Step]]:
    @st.composite
    def draw(data: st.DrawFn) -> list[Step]:
        out: list[Step] = []
        for i in range(data(st.integers(1, 6))):
            pool = n_inputs + i
            kind = data(st.sampled_from(["unary", "binary", "binary", "reduce"]))
            a, b = data(st.integers(0, pool - 1)), data(st.integers(0, pool - 1))
            table = {"unary": UNARY, "binary": BINARY, "reduce": REDUCE}[kind]
            out.append(Step(kind, data(st.sampled_from(sorted(table))), a, b, data(st.integers(0, 1))))
        return out

    return draw()


def build(program: list[Step], loop: bool):
    def run_steps(values: list) -> object:
        for s in program:
            x = values[s.a]
            if s.kind == "unary":
                y = UNARY[s.op](x)
            elif s.kind == "binary":
                y = BINARY[s.op](x, values[s.b])
            else:
                y = REDUCE[s.op](x, axis=s.axis, keepdims=True)
            values.append(y)
        return values[-1]

    def f(x, row, col):
        if not loop:
            return run_steps([x, row, col])
        acc = tf.zeros_like(x)
        for _ in tf.range(3):
            acc = acc * 0.5 + run_steps([x + acc, row, col])
        return acc

    return f


@settings(max_examples=25, deadline=None)
@given(program=steps(3), m=st.integers(1, 5), n=st.integers(1, 6), loop=st.booleans(), seed=st.integers(0, 2**16))
def test__random_program__three_levels_agree(program, m, n, loop, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((m, n)).astype(np.float32)
    row = rng.standard_normal((1, n)).astype(np.float32)
    col = rng.standard_normal((m, 1)).astype(np.float32)
    graph = tf.function(build(program, loop)).get_concrete_function(x, row, col).graph
    (reference,), _ = run_graph(graph, [x, row, col])
    optimized = optimize_graph(graph)
    (via_loop_ir,), _ = run_loop(lower_graph(optimized), [x, row, col])
    (compiled,) = compile_graph(optimized, make_target()).run([x, row, col], {})
    assert_close(via_loop_ir, reference, rtol=1e-5, atol=1e-5)
    assert_close(compiled, reference, rtol=1e-4, atol=1e-5)
