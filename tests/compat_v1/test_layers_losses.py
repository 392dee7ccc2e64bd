"""TF1's losses against stock TensorFlow's (every reduction, weights with zeros), and TF1's functional
layers: their variable names, their outputs against NumPy, and training through them."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from popjit.tensorflow.compat import v1 as tf1

RNG = np.random.default_rng(3)
LABELS = RNG.integers(0, 2, size=(6, 4)).astype(np.float32)
PREDICTIONS = RNG.uniform(0.05, 0.95, size=(6, 4)).astype(np.float32)
LOGITS = RNG.normal(size=(6, 4)).astype(np.float32)
WEIGHTS = np.array([[1.0], [0.0], [2.0], [0.5], [0.0], [1.0]], np.float32)
CLASS_WEIGHTS = WEIGHTS[:, 0]
CLASSES = RNG.integers(0, 4, size=(6,)).astype(np.int32)

LOSSES = {
    "absolute_difference": lambda L, w, r: L.absolute_difference(LABELS, PREDICTIONS, w, reduction=r),
    "mean_squared_error": lambda L, w, r: L.mean_squared_error(LABELS, PREDICTIONS, w, reduction=r),
    "huber_loss": lambda L, w, r: L.huber_loss(LABELS, LOGITS, w, delta=0.7, reduction=r),
    "log_loss": lambda L, w, r: L.log_loss(LABELS, PREDICTIONS, w, reduction=r),
    "hinge_loss": lambda L, w, r: L.hinge_loss(LABELS, LOGITS, w, reduction=r),
    "sigmoid_cross_entropy": lambda L, w, r: L.sigmoid_cross_entropy(LABELS, LOGITS, w, label_smoothing=0.1,
                                                                     reduction=r),
    "softmax_cross_entropy": lambda L, w, r: L.softmax_cross_entropy(np.eye(4, dtype=np.float32)[CLASSES], LOGITS,
                                                                     w[:, 0], label_smoothing=0.2, reduction=r),
    "sparse_softmax_cross_entropy": lambda L, w, r: L.sparse_softmax_cross_entropy(CLASSES, LOGITS, w[:, 0],
                                                                                   reduction=r),
}
REDUCTIONS = ["none", "weighted_sum", "weighted_mean", "weighted_sum_over_batch_size",
              "weighted_sum_by_nonzero_weights"]


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("name", list(LOSSES))
def test__loss__equals_stock_tensorflows(name: str, reduction: str, real_tf1: Any) -> None:
    ours = LOSSES[name](tf1.losses, WEIGHTS, reduction)
    theirs = LOSSES[name](real_tf1.losses, WEIGHTS, reduction)
    np.testing.assert_allclose(np.asarray(ours), theirs.numpy(), rtol=1e-5, atol=1e-6)


def test__losses__collected_in_graph_mode(graph: Any) -> None:
    a = tf1.losses.mean_squared_error(LABELS, PREDICTIONS)
    b = tf1.losses.absolute_difference(LABELS, PREDICTIONS, loss_collection=None)
    c = tf1.losses.hinge_loss(LABELS, LOGITS)
    assert tf1.losses.get_losses() == [a, c]
    with tf1.Session() as sess:
        total, each = sess.run([tf1.losses.get_total_loss(), [a, b, c]])
    np.testing.assert_allclose(total, each[0] + each[2], rtol=1e-6)
    with pytest.raises(ValueError, match="Invalid Reduction Key"):
        tf1.losses.mean_squared_error(LABELS, PREDICTIONS, reduction="avg")


def test__layers__names_and_values(graph: Any) -> None:
    x = tf1.placeholder(np.float32, [2, 5, 5, 3])
    with tf1.variable_scope("net", use_resource=True):
        h = tf1.layers.conv2d(x, 4, 3, padding="same", activation="relu")
        p = tf1.layers.max_pooling2d(h, 2, 2)
        f = tf1.layers.flatten(p)
        y = tf1.layers.dense(f, 3, kernel_initializer=tf1.ones_initializer(), name="out")
        z = tf1.layers.dense(y, 2)
        d = tf1.layers.dropout(z, 0.5, training=False)
    names = [v.name for v in tf1.trainable_variables()]
    assert names == ["net/conv2d/kernel:0", "net/conv2d/bias:0", "net/out/kernel:0", "net/out/bias:0",
                     "net/dense/kernel:0", "net/dense/bias:0"]
    feed = RNG.normal(size=(2, 5, 5, 3)).astype(np.float32)
    with tf1.Session() as sess:
        sess.run(tf1.global_variables_initializer())
        k, hv, pv, yv, zv, dv, (kz, bz) = sess.run([tf1.trainable_variables()[0], h, p, y, z, d,
                                                      tf1.trainable_variables()[4:]], {x: feed})
    padded = np.pad(feed, ((0, 0), (1, 1), (1, 1), (0, 0)))
    conv = np.stack([np.stack([np.einsum("bijc,ijco->bo", padded[:, i:i + 3, j:j + 3], k) for j in range(5)], 1)
                     for i in range(5)], 1)
    np.testing.assert_allclose(hv, np.maximum(conv, 0), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(pv, hv[:, :4, :4].reshape(2, 2, 2, 2, 2, 4).max(axis=(2, 4)), rtol=1e-6)
    np.testing.assert_allclose(yv, pv.reshape(2, -1).sum(1, keepdims=True).repeat(3, 1), rtol=1e-4)
    np.testing.assert_allclose(zv, yv @ kz + bz, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(dv, zv)


def test__layers__train_a_small_classifier(graph: Any) -> None:
    x = tf1.placeholder(np.float32, [32, 2])
    y = tf1.placeholder(np.int32, [32])
    hidden = tf1.layers.dense(x, 16, activation=tf1.nn.tanh)
    logits = tf1.layers.dense(hidden, 2)
    loss = tf1.losses.sparse_softmax_cross_entropy(y, logits)
    train = tf1.train.AdamOptimizer(0.05).minimize(loss)
    points = RNG.normal(size=(32, 2)).astype(np.float32)
    classes = (points[:, 0] * points[:, 1] > 0).astype(np.int32)  # XOR of the signs: needs the hidden layer
    with tf1.Session() as sess:
        sess.run(tf1.global_variables_initializer())
        losses = [sess.run([loss, train], {x: points, y: classes})[0] for _ in range(150)]
    assert losses[-1] < 0.25 * losses[0]


def test__metrics__stream_as_stock_tensorflows(graph: Any, real_tf1: Any) -> None:
    batches = [(RNG.integers(0, 3, 5), RNG.integers(0, 3, 5), RNG.uniform(0, 1, 5).astype(np.float32))
               for _ in range(3)]

    def stream(tf: Any) -> list[Any]:
        labels = tf.placeholder(tf.int32, [5])
        predictions = tf.placeholder(tf.int32, [5])
        weights = tf.placeholder(tf.float32, [5])
        acc, acc_update = tf.metrics.accuracy(labels, predictions)
        mse, mse_update = tf.metrics.mean_squared_error(tf.cast(labels, tf.float32), tf.cast(predictions, tf.float32),
                                                        weights)
        mean_value, mean_update = tf.metrics.mean(weights)
        out = []
        with tf.Session() as sess:
            sess.run(tf.local_variables_initializer())
            for y, p, w in batches:
                out.append(sess.run([acc_update, mse_update, mean_update], {labels: y, predictions: p, weights: w}))
            out.append(sess.run([acc, mse, mean_value]))
        return out

    ours = stream(tf1)
    with real_tf1.Graph().as_default():
        theirs = stream(real_tf1)
    np.testing.assert_allclose(ours, theirs, rtol=1e-6)
    assert not tf1.global_variables() and len(tf1.local_variables()) == 6
