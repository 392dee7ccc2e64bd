"""Gradients through ``tf.cond`` and ``tf.range`` loops traced into a compiled step.

Each case compares ``tape.gradient`` of the compiled function with central finite differences of
a float64 NumPy version of the same computation, and the traced loops are also checked to
differentiate the same way when run through the graph interpreter (``jit_compile=False``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np
import pytest

import popjit.tensorflow as tf
from popjit.errors import UnimplementedError
from tests.autodiff.rules import finite_difference

RNG = np.random.default_rng(7)
W0 = RNG.normal(0, 0.5, (3, 3)).astype(np.float32)
X0 = RNG.normal(0, 1.0, (2, 3)).astype(np.float32)


def compiled_grads(step: Callable, *args: object, jit: bool = True) -> tuple[np.ndarray, ...]:
    w = tf.Variable(W0)

    @tf.function(jit_compile=jit)
    def run(*a):
        with tf.GradientTape() as tape:
            tape.watch(a[0])
            y = step(w, *a)
        gw, gx = tape.gradient(y, [w, a[0]])
        return y, gw, gx

    return tuple(v.numpy() for v in run(*[tf.constant(a) for a in args]))


def loop_model(w: np.ndarray, x: np.ndarray, n: int) -> float:
    h = x
    for _ in range(n):
        h = np.tanh(h @ w) + 0.5 * h
    return float((h * h).sum())


def traced_loop(w, x, n):
    h = x
    for _ in tf.range(n):
        h = tf.tanh(h @ w) + 0.5 * h
    return tf.reduce_sum(h * h)


@pytest.mark.parametrize("jit", [True, False], ids=["native", "interpreted"])
@pytest.mark.parametrize("n", [0, 1, 4])
def test_counted_loop_gradient_matches_finite_differences(n: int, jit: bool) -> None:
    y, gw, gx = compiled_grads(functools.partial(traced_loop, n=n), X0, jit=jit)
    np.testing.assert_allclose(y, loop_model(W0, X0, n), rtol=1e-5)
    np.testing.assert_allclose(gw, finite_difference(lambda w: loop_model(w, X0, n), W0), rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(gx, finite_difference(lambda x: loop_model(W0, x, n), X0), rtol=1e-3, atol=1e-4)


def cond_model(w: np.ndarray, x: np.ndarray) -> float:
    s = x.sum()
    h = np.tanh(x @ w) if s > 0 else np.exp(0.1 * (x @ w.T))
    return float((h * x).sum())


@pytest.mark.parametrize("sign", [1.0, -1.0], ids=["then", "else"])
def test_cond_on_a_tensor_predicate_differentiates_the_branch_taken(sign: float) -> None:
    def step(w, x):
        h = tf.cond(tf.reduce_sum(x) > 0, lambda: tf.tanh(x @ w), lambda: tf.exp(0.1 * (x @ tf.transpose(w))))
        return tf.reduce_sum(h * x)

    x = np.abs(X0) * np.float32(sign)
    y, gw, gx = compiled_grads(step, x)
    np.testing.assert_allclose(y, cond_model(W0, x), rtol=1e-5)
    np.testing.assert_allclose(gw, finite_difference(lambda w: cond_model(w, x), W0), rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(gx, finite_difference(lambda v: cond_model(W0, v), x), rtol=1e-3, atol=1e-4)


def gated_model(w: np.ndarray, x: np.ndarray, n: int) -> float:
    h = x
    for i in range(n):
        h = h @ w if i % 2 == 0 else np.tanh(h)
    return float(h.sum())


def test_cond_inside_a_loop_body() -> None:
    def step(w, x):
        h = x
        for i in tf.range(5):
            h = tf.cond(i % 2 == 0, lambda: h @ w, lambda: tf.tanh(h))  # noqa: B023 (called at once)
        return tf.reduce_sum(h)

    y, gw, gx = compiled_grads(step, X0)
    np.testing.assert_allclose(y, gated_model(W0, X0, 5), rtol=1e-5)
    np.testing.assert_allclose(gw, finite_difference(lambda w: gated_model(w, X0, 5), W0), rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(gx, finite_difference(lambda x: gated_model(W0, x, 5), X0), rtol=1e-3, atol=1e-4)


def nested_model(w: np.ndarray, x: np.ndarray) -> float:
    h = x
    for _ in range(3):
        for _ in range(2):
            h = np.tanh(h @ w)
        h = h * 1.5
    return float(h.sum())


def test_nested_counted_loops() -> None:
    def step(w, x):
        h = x
        for _ in tf.range(3):
            for _ in tf.range(2):
                h = tf.tanh(h @ w)
            h = h * 1.5
        return tf.reduce_sum(h)

    y, gw, gx = compiled_grads(step, X0)
    np.testing.assert_allclose(y, nested_model(W0, X0), rtol=1e-5)
    np.testing.assert_allclose(gw, finite_difference(lambda w: nested_model(w, X0), W0), rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(gx, finite_difference(lambda x: nested_model(W0, x), X0), rtol=1e-3, atol=1e-4)


def test_a_loop_with_a_run_time_trip_count_is_refused_with_advice() -> None:
    def step(w, x):
        h = x
        while tf.reduce_sum(h * h) < 100.0:
            h = h * 2.0 + tf.reduce_sum(w)
        return tf.reduce_sum(h)

    with pytest.raises(UnimplementedError, match="trip count is only known at run time"):
        compiled_grads(step, X0)


def test_loop_without_a_tape_is_unchanged_by_gradient_support() -> None:
    @tf.function(jit_compile=True)
    def forward(x):
        return traced_loop(tf.constant(W0), x, 3)

    np.testing.assert_allclose(forward(tf.constant(X0)).numpy(), loop_model(W0, X0, 3), rtol=1e-5)
