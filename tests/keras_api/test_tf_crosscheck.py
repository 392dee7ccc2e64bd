"""Optional cross-checks against a real TensorFlow installed beside popjit (skipped without it).

Only what TensorFlow's current Keras computes the same way as Keras 2.6 (which popjit follows):
activations, from-logits cross-entropies, regression losses with reductions and weights, SGD and
Adam steps. (Keras 3 changed hard_sigmoid, the probability path of the cross-entropies and the
epsilon placement of RMSprop and Adagrad, so those are checked against NumPy formulas only.)
"""

from __future__ import annotations

import numpy as np
import pytest

import popjit.tensorflow as pj

RNG = np.random.default_rng(11)
X = RNG.normal(size=(5, 7)).astype(np.float32) * 3


@pytest.fixture(scope="module")
def real_tf():
    """TensorFlow with its own Keras, or a skip when it is not installed."""
    tf = pytest.importorskip("tensorflow")
    _ = (tf.keras.activations, tf.keras.losses, tf.keras.optimizers)
    return tf


@pytest.mark.parametrize("name", ["relu", "sigmoid", "tanh", "softmax", "elu", "selu", "softplus", "softsign",
                                  "swish", "gelu", "exponential", "linear"])
def test__activation__matches_tensorflow(real_tf, name):
    ours = pj.keras.activations.get(name)(pj.constant(X)).numpy()
    theirs = real_tf.keras.activations.get(name)(real_tf.constant(X)).numpy()
    np.testing.assert_allclose(ours, theirs, rtol=2e-5, atol=2e-6)


def test__losses__match_tensorflow(real_tf):
    labels = RNG.integers(0, 7, size=5).astype(np.int32)
    onehot = np.eye(7, dtype=np.float32)[labels]
    targets = (RNG.random((5, 7)) > 0.5).astype(np.float32)
    weights = RNG.random(5).astype(np.float32)
    pairs = [
        (lambda k: k.losses.SparseCategoricalCrossentropy(from_logits=True), (labels, X)),
        (lambda k: k.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=0.1), (onehot, X)),
        (lambda k: k.losses.BinaryCrossentropy(from_logits=True), (targets, X)),
        (lambda k: k.losses.MeanSquaredError(reduction="sum"), (targets, X)),
        (lambda k: k.losses.MeanAbsoluteError(), (targets, X)),
    ]
    for make, (y, p) in pairs:
        ours = make(pj.keras)(y, p, sample_weight=weights).numpy()
        theirs = make(real_tf.keras)(y, p, sample_weight=weights).numpy()
        np.testing.assert_allclose(ours, theirs, rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("config", [
    {"class": "SGD", "learning_rate": 0.1, "momentum": 0.9, "nesterov": True},
    {"class": "Adam", "learning_rate": 0.05, "beta_1": 0.8},
])
def test__optimizer_steps__match_tensorflow(real_tf, config):
    config = dict(config)
    cls = config.pop("class")
    ours_opt = getattr(pj.keras.optimizers, cls)(**config)
    theirs_opt = getattr(real_tf.keras.optimizers, cls)(**config)
    w0 = RNG.normal(size=(3, 4)).astype(np.float32)
    ours, theirs = pj.Variable(w0), real_tf.Variable(w0)
    for _ in range(4):
        g = RNG.normal(size=(3, 4)).astype(np.float32)
        ours_opt.apply_gradients([(pj.constant(g), ours)])
        theirs_opt.apply_gradients([(real_tf.constant(g), theirs)])
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=2e-5, atol=1e-6)
