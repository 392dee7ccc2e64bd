"""``tf.nn`` cross-entropies on logits: values against NumPy, gradients against their closed forms,
and the errors for mismatched labels."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import popjit.tensorflow as tf
from popjit.errors import InvalidArgumentError


def np_log_softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    x = x.astype(np.float64)
    shifted = x - x.max(axis=axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))


def np_softmax(x: np.ndarray) -> np.ndarray:
    return np.exp(np_log_softmax(x))


@st.composite
def logits_and_labels(draw: Any) -> tuple[np.ndarray, np.ndarray]:
    batch = tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=2)))
    classes = draw(st.integers(1, 12))
    logits = draw(hnp.arrays(np.float32, (*batch, classes),
                             elements=st.floats(-60, 60, width=32, allow_nan=False)))
    labels = draw(hnp.arrays(np.int32, batch, elements=st.integers(0, classes - 1)))
    return logits, labels


def loss_and_grad(loss_fn: Any, logits: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``loss_fn(labels=, logits=)`` and the gradient of its sum w.r.t. the logits, compiled."""

    @tf.function(jit_compile=True)
    def run(x, y):
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = loss_fn(labels=y, logits=x)
            total = tf.reduce_sum(loss)
        return loss, tape.gradient(total, x)

    loss, grad = run(tf.constant(logits), tf.constant(labels))
    return loss.numpy(), grad.numpy()


@given(logits_and_labels())
def test_sparse_softmax_cross_entropy_value_and_gradient(case: tuple[np.ndarray, np.ndarray]) -> None:
    logits, labels = case
    loss, grad = loss_and_grad(tf.nn.sparse_softmax_cross_entropy_with_logits, logits, labels)
    picked = np.take_along_axis(np_log_softmax(logits), labels[..., None].astype(np.int64), -1)[..., 0]
    np.testing.assert_allclose(loss, -picked, rtol=1e-5, atol=1e-5)
    onehot = np.eye(logits.shape[-1])[labels]
    np.testing.assert_allclose(grad, np_softmax(logits) - onehot, rtol=1e-4, atol=1e-5)


@given(logits_and_labels())
def test_softmax_cross_entropy_with_distributions(case: tuple[np.ndarray, np.ndarray]) -> None:
    logits, _ = case
    target = np_softmax(np.sin(logits * 3.0)).astype(np.float32)  # any distribution per example

    loss, grad = loss_and_grad(tf.nn.softmax_cross_entropy_with_logits, logits, target)
    np.testing.assert_allclose(loss, -(target * np_log_softmax(logits)).sum(-1), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(grad, np_softmax(logits) - target, rtol=1e-4, atol=1e-5)


@given(hnp.arrays(np.float32, hnp.array_shapes(max_dims=2, max_side=6),
                  elements=st.floats(-100, 100, width=32)), st.randoms())
def test_sigmoid_cross_entropy_is_stable_for_large_logits(x: np.ndarray, rnd: Any) -> None:
    z = np.float32(rnd.random() > 0.5) * np.ones_like(x)
    got = tf.nn.sigmoid_cross_entropy_with_logits(labels=z, logits=x).numpy()
    x64 = x.astype(np.float64)
    expected = np.maximum(x64, 0) - x64 * z + np.log1p(np.exp(-np.abs(x64)))
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_label_rank_mismatch_names_both_ranks_and_the_call_site() -> None:
    with pytest.raises(InvalidArgumentError, match=r"Rank of labels \(received 2\).*minus 1 \(received 2\)") as e:
        tf.nn.sparse_softmax_cross_entropy_with_logits(labels=np.zeros((2, 3), np.int32),
                                                       logits=np.zeros((2, 3), np.float32))
    assert "test_nn_losses.py" in str(e.value)


def test_float_labels_for_sparse_loss_are_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="labels must be int32 or int64"):
        tf.nn.sparse_softmax_cross_entropy_with_logits(labels=np.zeros(2, np.float32),
                                                       logits=np.zeros((2, 3), np.float32))


def test_backward_of_the_softmaxes_does_not_differentiate_the_max_shift() -> None:
    # the max subtracted for stability changes no value, so its gradient (an argmax mask) is never built
    @tf.function(jit_compile=True)
    def grads(x, y):
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=x))
            loss += tf.reduce_sum(tf.nn.softmax(x) * x)
        return tape.gradient(loss, x)

    x, y = np.linspace(-3, 3, 12, dtype=np.float32).reshape(3, 4), np.array([0, 3, 1], np.int32)
    ops = [node.op for node in grads.get_concrete_function(tf.constant(x), tf.constant(y)).graph.walk()]
    assert ops.count("reduce_max") == 2 and "equal" not in ops  # one per softmax, no argmax masks
    s = np_softmax(x)
    expected = s - np.eye(4)[y] + s * (x - (s * x).sum(-1, keepdims=True)) + s
    np.testing.assert_allclose(grads(tf.constant(x), tf.constant(y)).numpy(), expected, rtol=1e-5, atol=1e-6)
