"""Gradients of composites against their closed forms, eagerly (float64) and compiled (float32).

softmax cross-entropy (``softmax - onehot``, dense and sparse labels), log_softmax, a dense layer
(``dW = xᵀ·dh``, ``db = Σ dh`` through relu or tanh, with variables), a two-layer MLP trained one
step, and mean squared error.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import popjit.tensorflow as tf

RNG = np.random.default_rng(7)
BATCH, IN, HIDDEN, CLASSES = 5, 4, 6, 3


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _both_ways(fn: Callable[..., Any], *args: np.ndarray) -> list[tuple[str, list[np.ndarray], float]]:
    """``fn`` run eagerly in float64 and compiled in float32: (name, outputs as NumPy, rtol)."""
    eager = [np.asarray(o) for o in fn(*[tf.constant(a) for a in args])]
    f32 = [a.astype(np.float32) if a.dtype.kind == "f" else a for a in args]
    compiled = tf.function(fn, jit_compile=True)(*[tf.constant(a) for a in f32])
    return [("eager", eager, 1e-12), ("compiled", [np.asarray(o) for o in compiled], 2e-5)]


def _close(actual: np.ndarray, expected: np.ndarray, rtol: float, what: str) -> None:
    scale = max(1.0, float(np.max(np.abs(expected))))
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=rtol * scale, err_msg=what)


LABELS = RNG.integers(0, CLASSES, BATCH).astype(np.int32)
LOGITS = RNG.normal(size=(BATCH, CLASSES))


@pytest.mark.parametrize("sparse", [False, True], ids=["onehot", "sparse"])
def test__softmax_cross_entropy__gradient_is_softmax_minus_onehot(sparse: bool) -> None:
    def grad(z: Any, labels: Any) -> Any:
        with tf.GradientTape() as tape:
            tape.watch(z)
            logp = tf.nn.log_softmax(z)
            if sparse:
                picked = tf.gather(logp, labels[:, None], axis=1, batch_dims=1)
            else:
                picked = tf.one_hot(labels, CLASSES, dtype=z.dtype) * logp
            loss = -tf.reduce_sum(picked)
        return [tape.gradient(loss, z)]

    expected = _softmax(LOGITS) - np.eye(CLASSES)[LABELS]
    for how, (g,), rtol in _both_ways(grad, LOGITS, LABELS):
        _close(g, expected, rtol, how)


def test__log_softmax__gradient_is_weights_minus_softmax_times_their_sum() -> None:
    w = RNG.uniform(-1, 1, (BATCH, CLASSES))

    def grad(z: Any, w: Any) -> Any:
        with tf.GradientTape() as tape:
            tape.watch(z)
            y = tf.nn.log_softmax(z, axis=0)
        return [tape.gradient(y, z, output_gradients=w)]

    expected = w - _softmax(LOGITS.T).T * w.sum(axis=0, keepdims=True)
    for how, (g,), rtol in _both_ways(grad, LOGITS, w):
        _close(g, expected, rtol, how)


@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test__dense_layer__dW_is_xT_dh_and_db_the_sum_of_dh(activation: str) -> None:
    x = RNG.normal(size=(BATCH, IN))
    w0, b0 = RNG.normal(size=(IN, HIDDEN)), RNG.normal(size=(HIDDEN,))
    dy = RNG.uniform(-1, 1, (BATCH, HIDDEN))
    act = {"relu": tf.nn.relu, "tanh": tf.tanh}[activation]

    h = x @ w0 + b0
    dh = dy * ((h > 0) if activation == "relu" else 1 - np.tanh(h) ** 2)
    expected = [x.T @ dh, dh.sum(axis=0), dh @ w0.T]

    for dtype, rtol in ((np.float64, 1e-12), (np.float32, 2e-5)):
        w, b = tf.Variable(w0.astype(dtype)), tf.Variable(b0.astype(dtype))

        def grad(x: Any, dy: Any, w: Any = w, b: Any = b) -> Any:
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = act(tf.matmul(x, w) + b)
            return tape.gradient(y, [w, b, x], output_gradients=dy)

        args = (tf.constant(x.astype(dtype)), tf.constant(dy.astype(dtype)))
        run = grad if dtype == np.float64 else tf.function(grad, jit_compile=True)
        for got, want, name in zip(run(*args), expected, ["dW", "db", "dx"]):
            assert got.dtype == tf.as_dtype(dtype)
            _close(got.numpy(), want, rtol, f"{name} ({np.dtype(dtype).name})")


def test__mlp_training_step__matches_numpy_backprop() -> None:
    """A 2-layer MLP with softmax cross-entropy: one compiled SGD step against NumPy backprop."""
    x = RNG.normal(size=(BATCH, IN)).astype(np.float32)
    w1, b1 = RNG.normal(size=(IN, HIDDEN)) * 0.5, np.zeros(HIDDEN)
    w2, b2 = RNG.normal(size=(HIDDEN, CLASSES)) * 0.5, RNG.normal(size=CLASSES) * 0.1
    lr = 0.1
    params = [tf.Variable(p.astype(np.float32)) for p in (w1, b1, w2, b2)]

    @tf.function(jit_compile=True)
    def step(x: Any, labels: Any) -> Any:
        with tf.GradientTape() as tape:
            hidden = tf.nn.relu(tf.matmul(x, params[0]) + params[1])
            logits = tf.matmul(hidden, params[2]) + params[3]
            onehot = tf.one_hot(labels, CLASSES)
            loss = -tf.reduce_mean(tf.reduce_sum(onehot * tf.nn.log_softmax(logits), axis=1))
        grads = tape.gradient(loss, params)
        for p, g in zip(params, grads):
            p.assign_sub(lr * g)
        return loss

    loss = step(tf.constant(x), tf.constant(LABELS)).numpy()

    h_pre = x @ w1 + b1
    h = np.maximum(h_pre, 0)
    p = _softmax(h @ w2 + b2)
    onehot = np.eye(CLASSES)[LABELS]
    dlogits = (p - onehot) / BATCH
    dh = (dlogits @ w2.T) * (h_pre > 0)
    grads = [x.T @ dh, dh.sum(0), h.T @ dlogits, dlogits.sum(0)]
    _close(loss, -np.mean(np.sum(onehot * np.log(p), axis=1)), 2e-5, "loss")
    for var, start, g, name in zip(params, (w1, b1, w2, b2), grads, ["w1", "b1", "w2", "b2"]):
        _close(var.numpy(), start - lr * g, 2e-5, name)


def test__mean_squared_error__gradient_is_two_residuals_over_n() -> None:
    pred, target = RNG.normal(size=(BATCH, 2)), RNG.normal(size=(BATCH, 2))

    def grad(p: Any, t: Any) -> Any:
        with tf.GradientTape() as tape:
            tape.watch([p, t])
            loss = tf.reduce_mean(tf.square(p - t))
        return tape.gradient(loss, [p, t])

    expected = 2.0 * (pred - target) / pred.size
    for how, (gp, gt), rtol in _both_ways(grad, pred, target):
        _close(gp, expected, rtol, f"{how}: d/dpred")
        _close(gt, -expected, rtol, f"{how}: d/dtarget")
