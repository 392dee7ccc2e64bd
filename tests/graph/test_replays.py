"""``merge_replayed_loops``: a differentiated counted loop runs its forward pass once (the replay that
stacks states for the backward pass also gives the primal results); loops that only look alike, or
that have effects, are left alone. Values unchanged: graph interpreter before and after, compiled."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import popjit.tensorflow as tf
from popjit.frontend.control_flow import for_range
from popjit.graph.interpret import interpret
from popjit.graph.verify import verify
from popjit.ir.graph import Graph
from popjit.pipeline.compiler import optimize_graph


def loops(graph: Graph) -> int:
    return sum(node.op == "while" for node in graph.walk())


def rnn_gradient(steps: int) -> Any:
    """Loss and gradients of a tiny recurrent cell run ``steps`` times (the primal loop's result
    feeds the loss before the backward pass is built)."""

    def f(h0, w, u):
        with tf.GradientTape() as tape:
            tape.watch([w, u])
            h = for_range(0, steps, 1, lambda i, h: [tf.tanh(tf.matmul(h, w) + u * tf.cast(i, tf.float32))],
                          [h0])[0]
            loss = tf.reduce_sum(h * h)
        gw, gu = tape.gradient(loss, [w, u])
        return loss, gw, gu

    return f


@given(st.integers(1, 6), st.integers(1, 4), st.data())
def test__a_differentiated_loop_runs_forward_once_with_the_same_values(steps: int, n: int,
                                                                       data: st.DataObject) -> None:
    h0 = data.draw(hnp.arrays(np.float32, (2, n), elements=st.floats(-1, 1, width=32)))
    w = data.draw(hnp.arrays(np.float32, (n, n), elements=st.floats(-1, 1, width=32)))
    u = data.draw(hnp.arrays(np.float32, (n,), elements=st.floats(-1, 1, width=32)))
    fn = rnn_gradient(steps)
    graph = tf.function(fn).get_concrete_function(h0, w, u).graph
    assert loops(graph) == 3  # primal, replay with stacks, backward
    optimized = optimize_graph(graph.copy())
    verify(optimized)
    assert loops(optimized) == 2
    before, _ = interpret(graph, [h0, w, u])
    after, _ = interpret(optimized, [h0, w, u])
    for b, a in zip(before, after, strict=True):
        np.testing.assert_array_equal(a, b)
    compiled = tf.function(fn, jit_compile=True)(h0, w, u)
    for c, b in zip(compiled, before, strict=True):
        np.testing.assert_allclose(c.numpy(), b, rtol=1e-5, atol=1e-5)


def test__only_a_loop_that_steps_the_same_values_the_same_way_replaces_another() -> None:
    """Loops shaped like a replay of ``a`` (a counter of their own, then ``a``'s carried values from
    the same start, then more): ``c`` steps ``v`` differently and ``d`` runs one step less, so they
    are kept; ``e`` steps it exactly as ``a`` does, so ``a``'s result is taken from ``e``."""

    def like_a_replay(trip: int, step: Any) -> Any:
        def body(j, i, v, s):
            return [i + 1, step(v), s + v]

        return lambda x: for_range(0, trip, 1, body, [tf.constant(0), x, tf.zeros([3])])

    def f(x):
        a = for_range(0, 8, 1, lambda i, v: [tf.sin(v)], [x])[0]
        c = like_a_replay(8, tf.cos)(x)
        d = like_a_replay(7, tf.sin)(x)
        e = like_a_replay(8, tf.sin)(x)
        return a * 2.0, c[2], d[2], e[2]

    x = np.linspace(-1, 1, 3).astype(np.float32)
    graph = tf.function(f).get_concrete_function(x).graph
    assert loops(graph) == 4
    optimized = optimize_graph(graph.copy())
    verify(optimized)
    assert loops(optimized) == 3
    before, _ = interpret(graph, [x])
    after, _ = interpret(optimized, [x])
    for b, a in zip(before, after, strict=True):
        np.testing.assert_array_equal(a, b)
