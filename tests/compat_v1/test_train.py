"""TF1 optimizers: the same linear regression trained by popjit and by stock TensorFlow's graph mode
(same initial values, same batches) gives the same losses and weights; ``global_step`` counts steps."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from popjit.tensorflow.compat import v1 as tf1

OPTIMIZERS = {
    "sgd": lambda tf: tf.train.GradientDescentOptimizer(0.1),
    "momentum": lambda tf: tf.train.MomentumOptimizer(0.05, 0.9),
    "nesterov": lambda tf: tf.train.MomentumOptimizer(0.05, 0.9, use_nesterov=True),
    "adam": lambda tf: tf.train.AdamOptimizer(0.05),
    "rmsprop": lambda tf: tf.train.RMSPropOptimizer(0.01, momentum=0.5),
    "rmsprop_centered": lambda tf: tf.train.RMSPropOptimizer(0.01, centered=True),
}

RNG = np.random.default_rng(7)
W0 = RNG.normal(size=(3, 2)).astype(np.float32)
BATCHES = [(RNG.normal(size=(4, 3)).astype(np.float32), RNG.normal(size=(4, 2)).astype(np.float32)) for _ in range(6)]


def _train(tf: Any, make_optimizer: Any) -> tuple[list[float], np.ndarray, int, list[str]]:
    x = tf.placeholder(tf.float32, [4, 3])
    y = tf.placeholder(tf.float32, [4, 2])
    with tf.variable_scope("model", use_resource=True):
        w = tf.get_variable("w", initializer=tf.constant(W0))
        b = tf.get_variable("b", [2], initializer=tf.zeros_initializer())
    loss = tf.reduce_mean(tf.square(tf.tanh(tf.matmul(x, w) + b) - y))
    step = tf.train.get_or_create_global_step()
    train = make_optimizer(tf).minimize(loss, global_step=step)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        losses = [sess.run([loss, train], {x: bx, y: by})[0] for bx, by in BATCHES]
        return losses, sess.run(w), int(sess.run(step)), sorted(v.name for v in tf.global_variables())


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test__optimizer__trains_as_stock_tensorflow(name: str, graph: Any, real_tf1: Any) -> None:
    ours = _train(tf1, OPTIMIZERS[name])
    with real_tf1.Graph().as_default():
        theirs = _train(real_tf1, OPTIMIZERS[name])
    np.testing.assert_allclose(ours[0], theirs[0], rtol=2e-5, atol=1e-6)
    np.testing.assert_allclose(ours[1], theirs[1], rtol=2e-5, atol=1e-6)
    assert ours[2] == theirs[2] == len(BATCHES)
    assert ours[3] == theirs[3]  # slot names as TF1's, so checkpoints carry over
    assert ours[0][-1] < ours[0][0]


def test__compute_and_apply_gradients__separately(graph: Any) -> None:
    v = tf1.get_variable("v", initializer=tf1.constant([1.0, -2.0]), use_resource=True)
    loss = tf1.reduce_sum(v * v)
    opt = tf1.train.GradientDescentOptimizer(0.25)
    pairs = opt.compute_gradients(loss)
    assert [var for _, var in pairs] == [v]
    apply = opt.apply_gradients([(g * 2.0, var) for g, var in pairs])
    with tf1.Session() as sess:
        sess.run(tf1.global_variables_initializer())
        np.testing.assert_allclose(sess.run(pairs[0][0]), [2, -4])
        sess.run(apply)
        np.testing.assert_allclose(sess.run(v), [0, 0])  # v - 0.25 * 2 * (2 v)
    with pytest.raises(ValueError, match="No gradients provided for any variable"):
        opt.apply_gradients([(None, v)])
