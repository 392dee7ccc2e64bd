"""Keras losses against NumPy formulas: per-example functions, classes with reductions and sample
weights, from_logits stability, the softmax/sigmoid logits shortcut, compiled versus eager."""

from __future__ import annotations

import numpy as np
import pytest

import popjit.tensorflow as tf

EPS = 1e-7
RNG = np.random.default_rng(3)
LOGITS = RNG.normal(size=(6, 5)).astype(np.float32) * 3
LABELS = np.array([0, 4, 2, 2, 1, 3], np.int32)
ONEHOT = np.eye(5, dtype=np.float32)[LABELS]
PROBS = np.exp(LOGITS) / np.exp(LOGITS).sum(-1, keepdims=True)
BIN_LOGITS = RNG.normal(size=(6, 3)).astype(np.float32) * 4
BIN_TARGETS = (RNG.random((6, 3)) > 0.5).astype(np.float32)
Y_TRUE = RNG.normal(size=(6, 4)).astype(np.float32)
Y_PRED = RNG.normal(size=(6, 4)).astype(np.float32)


def log_softmax(x):
    x = x.astype(np.float64)
    m = x.max(-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))


def np_sparse_ce(labels, p, from_logits):
    logits = p if from_logits else np.log(np.clip(p.astype(np.float64), EPS, 1 - EPS))
    return -log_softmax(logits)[np.arange(len(labels)), labels]


def np_ce(y, p, from_logits):
    if from_logits:
        return -(y * log_softmax(p)).sum(-1)
    p = p.astype(np.float64) / p.sum(-1, keepdims=True)
    return -(y * np.log(np.clip(p, EPS, 1 - EPS))).sum(-1)


def np_bce(y, p, from_logits):
    if from_logits:
        x = p.astype(np.float64)
        return (np.maximum(x, 0) - x * y + np.log1p(np.exp(-np.abs(x)))).mean(-1)
    p = np.clip(p.astype(np.float64), EPS, 1 - EPS)
    return -(y * np.log(p + EPS) + (1 - y) * np.log(1 - p + EPS)).mean(-1)


def close(actual, expected, rtol=1e-5, atol=1e-6):
    np.testing.assert_allclose(np.asarray(actual), expected, rtol=rtol, atol=atol)


@pytest.mark.parametrize("from_logits", [True, False])
def test__crossentropy_functions__match_numpy(from_logits):
    p = LOGITS if from_logits else PROBS
    losses = tf.keras.losses
    close(losses.sparse_categorical_crossentropy(LABELS, p, from_logits=from_logits),
          np_sparse_ce(LABELS, p, from_logits))
    close(losses.categorical_crossentropy(ONEHOT, p, from_logits=from_logits), np_ce(ONEHOT, p, from_logits))
    bp = BIN_LOGITS if from_logits else 1 / (1 + np.exp(-BIN_LOGITS))
    close(losses.binary_crossentropy(BIN_TARGETS, bp, from_logits=from_logits), np_bce(BIN_TARGETS, bp, from_logits))


def test__sparse_crossentropy_of_raw_scores__clips_and_renormalises_like_keras():
    scores = np.array([[2.0, -1.0, 0.5], [0.0, 0.0, 3.0]], np.float32)  # not probabilities (the seed's case)
    labels = np.array([0, 1], np.int32)
    got = tf.keras.losses.sparse_categorical_crossentropy(labels, scores)
    logp = np.log(np.clip(scores.astype(np.float64), EPS, 1 - EPS))
    close(got, -log_softmax(logp)[[0, 1], labels])


def test__regression_functions__match_numpy():
    losses = tf.keras.losses
    close(losses.mean_squared_error(Y_TRUE, Y_PRED), ((Y_PRED - Y_TRUE) ** 2).mean(-1))
    close(losses.mse(Y_TRUE, Y_PRED), ((Y_PRED - Y_TRUE) ** 2).mean(-1))
    close(losses.mean_absolute_error(Y_TRUE, Y_PRED), np.abs(Y_PRED - Y_TRUE).mean(-1))
    close(losses.mae(Y_TRUE, Y_PRED), np.abs(Y_PRED - Y_TRUE).mean(-1))
    assert losses.MSE is losses.mean_squared_error and losses.MAE is losses.mean_absolute_error
    mape = 100 * (np.abs(Y_TRUE - Y_PRED) / np.maximum(np.abs(Y_TRUE), EPS)).mean(-1)
    close(losses.mape(Y_TRUE, Y_PRED), mape, rtol=1e-4)
    err = np.abs(Y_PRED - Y_TRUE)
    close(losses.huber(Y_TRUE, Y_PRED), np.where(err <= 1, 0.5 * err ** 2, err - 0.5).mean(-1))


def test__from_logits__is_exact_at_huge_logits():
    logits = np.array([[1e4, -1e4, 0.0], [30.0, -30.0, 0.0]], np.float32)
    got = tf.keras.losses.sparse_categorical_crossentropy([1, 0], logits, from_logits=True).numpy()
    assert np.all(np.isfinite(got))
    close(got, [2e4, 0.0], rtol=1e-6, atol=1e-6)
    got = tf.keras.losses.categorical_crossentropy([[0.0, 1.0, 0.0]], logits[:1], from_logits=True).numpy()
    close(got, [2e4], rtol=1e-6)
    got = tf.keras.losses.binary_crossentropy([[0.0, 1.0, 1.0]], logits[:1], from_logits=True).numpy()
    close(got, [(1e4 + 1e4 + np.log(2)) / 3], rtol=1e-6)


def test__softmax_and_sigmoid_outputs__are_traced_back_to_their_logits():
    logits = tf.constant([[50.0, 0.0, -50.0]])
    probs = tf.keras.activations.softmax(logits)
    # with clipped probabilities this would be about -log(1e-7) = 16.1; Keras uses the logits: 50
    close(tf.keras.losses.sparse_categorical_crossentropy([1], probs), [50.0], rtol=1e-5)
    close(tf.keras.losses.categorical_crossentropy([[0.0, 0.0, 1.0]], probs), [100.0], rtol=1e-5)
    close(tf.keras.losses.binary_crossentropy([[0.0]], tf.keras.activations.sigmoid(tf.constant([[40.0]]))), [40.0])
    kernel = tf.keras.initializers.Constant([[2.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    dense = tf.keras.layers.Dense(3, activation="softmax", kernel_initializer=kernel)
    out = dense(np.array([[20.0, 5.0]], np.float32))  # logits [40, 0, 0]
    close(tf.keras.losses.sparse_categorical_crossentropy([1], out), [40.0], rtol=1e-5)
    # a plain tf.nn.softmax output is not (it is just probabilities)
    close(tf.keras.losses.sparse_categorical_crossentropy([1], tf.nn.softmax(logits)),
          [-np.log(EPS) + np.log(1 + 2 * EPS)], rtol=1e-4)


def test__label_smoothing__mixes_targets_with_uniform():
    ls = 0.2
    close(tf.keras.losses.categorical_crossentropy(ONEHOT, LOGITS, from_logits=True, label_smoothing=ls),
          np_ce(ONEHOT * (1 - ls) + ls / 5, LOGITS, True))
    close(tf.keras.losses.binary_crossentropy(BIN_TARGETS, BIN_LOGITS, from_logits=True, label_smoothing=ls),
          np_bce(BIN_TARGETS * (1 - ls) + 0.5 * ls, BIN_LOGITS, True))


def test__sparse_labels__may_have_a_trailing_axis_and_outputs_more_axes():
    per = np_sparse_ce(LABELS, LOGITS, True)
    close(tf.keras.losses.sparse_categorical_crossentropy(LABELS[:, None], LOGITS, from_logits=True), per)
    seq = LOGITS.reshape(2, 3, 5)
    got = tf.keras.losses.sparse_categorical_crossentropy(LABELS.reshape(2, 3), seq, from_logits=True)
    close(got, per.reshape(2, 3))


# -- classes ------------------------------------------------------------------------------------
def test__loss_classes__reduce_like_keras():
    per = np_sparse_ce(LABELS, LOGITS, True)
    sce = tf.keras.losses.SparseCategoricalCrossentropy
    close(sce(from_logits=True)(LABELS, LOGITS), per.mean())
    close(sce(from_logits=True, reduction="sum")(LABELS, LOGITS), per.sum(), rtol=1e-5)
    close(sce(from_logits=True, reduction=tf.keras.losses.Reduction.NONE)(LABELS, LOGITS), per)
    close(sce(True)(LABELS, LOGITS), per.mean())
    w = np.array([1.0, 0.0, 2.0, 0.5, 0.0, 1.0], np.float32)
    close(sce(from_logits=True)(LABELS, LOGITS, sample_weight=w), (per * w).sum() / 6)
    close(sce(from_logits=True)(LABELS, LOGITS, sample_weight=w[:, None]), (per * w).sum() / 6)
    close(sce(from_logits=True)(LABELS, LOGITS, sample_weight=2.0), 2 * per.mean())
    close(sce(from_logits=True, reduction="sum")(LABELS, LOGITS, sample_weight=w), (per * w).sum(), rtol=1e-5)


def test__loss_classes__of_every_kind_match_their_functions():
    kl = tf.keras.losses
    close(kl.CategoricalCrossentropy()(ONEHOT, PROBS), np_ce(ONEHOT, PROBS, False).mean())
    close(kl.BinaryCrossentropy(from_logits=True)(BIN_TARGETS, BIN_LOGITS),
          np_bce(BIN_TARGETS, BIN_LOGITS, True).mean())
    close(kl.MeanSquaredError()(Y_TRUE, Y_PRED), ((Y_PRED - Y_TRUE) ** 2).mean())
    close(kl.MeanAbsoluteError(reduction="sum")(Y_TRUE, Y_PRED), np.abs(Y_PRED - Y_TRUE).mean(-1).sum(), rtol=1e-5)
    # (N, 1) predictions against (N,) targets: the size-1 axis is dropped first (then, as in Keras, the
    # mean over the last axis is the mean over the batch)
    got = kl.MeanSquaredError(reduction="none")(Y_TRUE[:, 0], Y_PRED[:, :1])
    assert got.shape == ()
    close(got, ((Y_PRED[:, 0] - Y_TRUE[:, 0]) ** 2).mean())
    close(kl.MeanSquaredError(reduction="none")(Y_TRUE[:, :1], Y_PRED[:, 0]),
          ((Y_PRED[:, 0] - Y_TRUE[:, 0]) ** 2).mean())
    close(kl.MeanSquaredError(reduction="none")(Y_TRUE[:, :1], Y_PRED[:, :1]), (Y_PRED[:, 0] - Y_TRUE[:, 0]) ** 2)


def test__weights_of_per_step_losses__broadcast_over_the_extra_axis():
    yt, yp = Y_TRUE.reshape(2, 3, 4), Y_PRED.reshape(2, 3, 4)
    per = ((yp - yt) ** 2).mean(-1)  # (2, 3)
    w = np.array([1.0, 3.0], np.float32)
    close(tf.keras.losses.MeanSquaredError()(yt, yp, sample_weight=w), (per * w[:, None]).sum() / 6)


def test__loss_classes__names_configs_and_lookup():
    loss = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="sum")
    assert loss.name == "sparse_categorical_crossentropy"
    assert loss.get_config() == {"from_logits": True, "axis": -1, "reduction": "sum",
                                 "name": "sparse_categorical_crossentropy"}
    again = tf.keras.losses.SparseCategoricalCrossentropy.from_config(loss.get_config())
    close(again(LABELS, LOGITS), loss(LABELS, LOGITS))
    assert tf.keras.losses.MeanSquaredError().name == "mean_squared_error"
    assert tf.keras.losses.get("mse") is tf.keras.losses.mean_squared_error
    assert isinstance(tf.keras.losses.get("MeanAbsoluteError"), tf.keras.losses.MeanAbsoluteError)
    assert tf.keras.losses.deserialize(tf.keras.losses.serialize(loss)).get_config() == loss.get_config()
    with pytest.raises(ValueError, match="Invalid Reduction Key"):
        tf.keras.losses.MeanSquaredError(reduction="mean")
    with pytest.raises(ValueError, match="Unknown loss function"):
        tf.keras.losses.get("nope")


def test__compiled_losses__equal_eager_losses():
    def all_losses(labels, onehot, logits, probs, bt, bl, yt, yp):
        kl = tf.keras.losses
        return (kl.sparse_categorical_crossentropy(labels, logits, from_logits=True),
                kl.sparse_categorical_crossentropy(labels, probs),
                kl.categorical_crossentropy(onehot, probs), kl.binary_crossentropy(bt, bl, from_logits=True),
                kl.mse(yt, yp), kl.mae(yt, yp),
                kl.SparseCategoricalCrossentropy(from_logits=True)(labels, logits, sample_weight=yt[:, 0]))

    args = (LABELS, ONEHOT, LOGITS, PROBS, BIN_TARGETS, BIN_LOGITS, Y_TRUE, Y_PRED)
    compiled = tf.function(all_losses, jit_compile=True)(*args)
    eager = all_losses(*[tf.constant(a) for a in args])
    for c, e in zip(compiled, eager):
        close(c, e.numpy(), rtol=1e-5, atol=1e-5)
