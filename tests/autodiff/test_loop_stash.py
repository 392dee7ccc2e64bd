"""A differentiated loop keeps its matrix products for the backward pass (``stashed_products``).

The forward loop stacks each iteration's value of the body's products that depend on the carried
values; the backward loop reads them instead of multiplying again, and still differentiates through
the product's own rule. Checked: the gradients (against central finite differences of a float64
NumPy LSTM), the number of products left in the traced loops (one fewer per iteration), and that a
product too large to keep is computed again with the same results.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import popjit.tensorflow as tf
from popjit.graph.interpret import interpret
from popjit.ops import control_flow
from tests.autodiff.rules import finite_difference


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


def lstm_numpy(xs: np.ndarray, w: np.ndarray, u: np.ndarray) -> float:
    """The loss of :func:`lstm_loss` in float64."""
    batch, units = xs.shape[1], u.shape[0]
    h, c = np.zeros((batch, units)), np.zeros((batch, units))
    for x in xs:
        a, f, g, o = np.split(x @ w + h @ u, 4, axis=1)
        c = _sigmoid(f) * c + _sigmoid(a) * np.tanh(g)
        h = _sigmoid(o) * np.tanh(c)
    return float((h * h).sum())


def lstm_loss(xs, w, u):
    """An LSTM over the leading axis of ``xs`` in a ``tf.range`` loop (two products a step: ``x_i @ w``
    and ``h @ u``), and the sum of squares of its last output."""
    steps, batch = xs.shape[0], xs.shape[1]
    units = u.shape[0]
    h, c = tf.zeros([batch, units]), tf.zeros([batch, units])
    for i in tf.range(steps):
        a, f, g, o = tf.split(tf.matmul(xs[i], w) + tf.matmul(h, u), 4, axis=1)
        c = tf.sigmoid(f) * c + tf.sigmoid(a) * tf.tanh(g)
        h = tf.sigmoid(o) * tf.tanh(c)
    return tf.reduce_sum(h * h)


def lstm_grads(xs, w, u):
    with tf.GradientTape() as tape:
        tape.watch([w, u, xs])
        loss = lstm_loss(xs, w, u)
    return [loss, *tape.gradient(loss, [w, u, xs])]


def lstm_inputs(seed: int, steps: int, batch: int, features: int, units: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.normal(0, 1, (steps, batch, features)).astype(np.float32),
            rng.normal(0, 0.5, (features, 4 * units)).astype(np.float32),
            rng.normal(0, 0.5, (units, 4 * units)).astype(np.float32)]


def loop_products(graph) -> list[int]:
    """How many matmuls each while loop of ``graph`` has in its body, outermost loops first."""
    return [sum(n.op == "matmul" for n in node.regions[1].walk()) for node in graph.walk() if node.op == "while"]


@settings(max_examples=8, deadline=None)
@given(st.integers(0, 2**16), st.integers(1, 4), st.integers(1, 3), st.integers(1, 3), st.integers(1, 3))
def test__lstm_gradients_with_kept_products__match_finite_differences(seed, steps, batch, features, units):
    xs, w, u = lstm_inputs(seed, steps, batch, features, units)
    loss, gw, gu, gx = (v.numpy() for v in tf.function(lstm_grads, jit_compile=True)(xs, w, u))
    np.testing.assert_allclose(loss, lstm_numpy(xs, w, u), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(gw, finite_difference(lambda v: lstm_numpy(xs, v, u), w, 1e-6), rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(gu, finite_difference(lambda v: lstm_numpy(xs, w, v), u, 1e-6), rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(gx, finite_difference(lambda v: lstm_numpy(v, w, u), xs, 1e-6), rtol=1e-3, atol=1e-4)


def test__the_backward_loop_reads_the_kept_products_instead_of_multiplying_again() -> None:
    xs, w, u = lstm_inputs(0, 5, 2, 3, 4)
    graph = tf.function(lstm_grads).get_concrete_function(xs, w, u).graph
    # forward loop 2, the loop that keeps them 2, backward: 2 gradients for each of the 2 (no replay)
    assert loop_products(graph) == [2, 2, 4]


def test__products_past_the_budget_are_computed_again_with_the_same_results(monkeypatch) -> None:
    xs, w, u = lstm_inputs(1, 6, 3, 2, 3)
    kept_graph = tf.function(lstm_grads).get_concrete_function(xs, w, u).graph
    kept = tf.function(lstm_grads, jit_compile=True)(xs, w, u)
    monkeypatch.setattr(control_flow, "STASH_BYTES", 0)
    graph = tf.function(lstm_grads).get_concrete_function(xs, w, u).graph
    assert loop_products(graph) == [2, 2, 6]  # the backward loop multiplies forwards again
    again = tf.function(lstm_grads, jit_compile=True)(xs, w, u)
    for a, b in zip(kept, again):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(interpret(kept_graph, [xs, w, u])[0][1], kept[1].numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("steps", [0, 1, 3])
def test__a_product_of_loop_invariant_operands_is_not_kept(steps: int) -> None:
    rng = np.random.default_rng(steps)
    x, w = rng.normal(0, 1, (2, 3)).astype(np.float32), rng.normal(0, 0.5, (3, 3)).astype(np.float32)

    def f(x, w):
        with tf.GradientTape() as tape:
            tape.watch(w)
            h = x
            for _ in tf.range(steps):
                h = tf.tanh(h + tf.matmul(x, w))  # x @ w depends on no carried value
            loss = tf.reduce_sum(h * h)
        return tape.gradient(loss, w)

    graph = tf.function(f).get_concrete_function(x, w).graph
    body = next(node.regions[1] for node in graph.walk() if node.op == "while")
    assert control_flow.stashed_products(body, max(steps, 1)) == []

    def model(w64: np.ndarray) -> float:
        h = x.astype(np.float64)
        for _ in range(steps):
            h = np.tanh(h + x @ w64)
        return float((h * h).sum())

    got = tf.function(f, jit_compile=True)(x, w).numpy()
    np.testing.assert_allclose(got, finite_difference(model, w, 1e-6), rtol=1e-3, atol=1e-4)


def test__after_the_graph_passes_the_forward_loop_runs_once_and_keeps_its_products() -> None:
    from popjit.pipeline.compiler import optimize_graph

    xs, w, u = lstm_inputs(0, 5, 2, 3, 4)
    graph = optimize_graph(tf.function(lstm_grads).get_concrete_function(xs, w, u).graph)
    assert loop_products(graph) == [2, 4]  # the primal loop merged with the one that keeps the products


def test__the_stacks_a_loop_keeps_are_not_filled_before_it_writes_them() -> None:
    """The forward loop writes row ``i`` of every stack at iteration ``i`` of exactly ``n``, before the
    backward loop reads one, so its stacks are reserved (``reserve``), not zeros: no kernel writes them
    before that loop (the Keras LSTM's three, 6.4 MB, were filled at every step), and the gradients
    still match finite differences."""
    from popjit.ir.loop import Const, Kernel, Repeat
    from popjit.pipeline.compiler import lower_graph, optimize_graph

    xs, w, u = lstm_inputs(3, 6, 2, 3, 4)
    graph = optimize_graph(tf.function(lstm_grads).get_concrete_function(xs, w, u).graph)
    program = lower_graph(graph)
    first_loop = next(at for at, s in enumerate(program.body) if isinstance(s, Repeat))
    stacks = {s.buf.uid for k in program.body[first_loop].body if isinstance(k, Kernel) for s in k.stores
              if s.buf.shape[:1] == (6,)}
    filled = [k.name for k in program.body[:first_loop] if isinstance(k, Kernel)
              for s in k.stores if s.buf.uid in stacks and isinstance(s.value, Const)]
    assert stacks and not filled, filled
    loss, gw, gu, gx = (v.numpy() for v in tf.function(lstm_grads, jit_compile=True)(xs, w, u))
    np.testing.assert_allclose(loss, lstm_numpy(xs, w, u), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(gw, finite_difference(lambda v: lstm_numpy(xs, v, u), w, 1e-6), rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(gu, finite_difference(lambda v: lstm_numpy(xs, w, v), u, 1e-6), rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(gx, finite_difference(lambda v: lstm_numpy(v, w, u), xs, 1e-6), rtol=1e-3, atol=1e-4)
