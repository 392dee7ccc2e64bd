"""The IPU Keras models of Graphcore's SDK ≤ 2.1 (``ipu.keras.Sequential``/``Model`` with
``gradient_accumulation_count`` and ``fit(..., steps_per_run)``): training equals summed gradient
accumulation done by hand, the SDK's step accounting and callbacks, its checks and texts (spec
§3.4 K20 and the upstream ``keras_model_test``), and the pipelined classes refused."""

from __future__ import annotations

import logging

import numpy as np
import pytest

import popjit.tensorflow as pj
from popjit import ipu

RNG = np.random.default_rng(21)
X = RNG.normal(size=(96, 6)).astype(np.float32)
Y = RNG.normal(size=(96, 2)).astype(np.float32)


def _layers():
    return [pj.keras.layers.Dense(4, activation="tanh", kernel_initializer=pj.keras.initializers.Constant(0.1)),
            pj.keras.layers.Dense(2, kernel_initializer=pj.keras.initializers.Constant(0.2))]


def _dataset(n=96, batch=4, repeat=False):
    ds = pj.data.Dataset.from_tensor_slices((X[:n], Y[:n]))
    return (ds.repeat() if repeat else ds).batch(batch, drop_remainder=True)


def _by_hand(batches, ga, lr):
    """Summed gradient accumulation over ``ga`` mini-batches with SGD, as the SDK's tests do on the CPU:
    the mean of the mini-batch losses, and the final weights."""
    layers = _layers()
    model = pj.keras.Sequential(layers)
    model(X[:1])
    losses, acc = [], None
    for k, (x, y) in enumerate(batches):
        with pj.GradientTape() as tape:
            loss = pj.reduce_mean(pj.keras.losses.mean_squared_error(y, model(x)))
        losses.append(float(loss.numpy()))
        grads = tape.gradient(loss, model.trainable_weights)
        acc = grads if acc is None else [a + g for a, g in zip(acc, grads)]
        if (k + 1) % ga == 0:
            for v, g in zip(model.trainable_weights, acc):
                v.assign_sub(lr * g)
            acc = None
    return float(np.mean(losses)), model.get_weights()


class Counter(pj.keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.batches = []

    def on_train_batch_end(self, batch, logs=None):
        self.batches.append(batch)


@pytest.mark.slow
@pytest.mark.parametrize("steps_per_run", [None, 2])
def test__legacy_sequential__trains_as_summed_accumulation_by_hand(steps_per_run):
    with ipu.ipu_strategy.IPUStrategy().scope():
        model = ipu.keras.Sequential(_layers(), gradient_accumulation_count=6)
        model.compile(pj.keras.optimizers.SGD(0.01), loss="mse")
        counter = Counter()
        history = model.fit(_dataset(), steps_per_run=steps_per_run, callbacks=[counter], verbose=0)
    want_loss, want_weights = _by_hand([(X[i:i + 4], Y[i:i + 4]) for i in range(0, 96, 4)], 6, 0.01)
    assert list(history.history) == ["loss"]
    np.testing.assert_allclose(history.history["loss"][0], want_loss, rtol=1e-5)
    for got, want in zip(model.get_weights(), want_weights, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert len(counter.batches) == (1 if steps_per_run is None else 2)  # once per execution of the device loop


@pytest.mark.slow
def test__legacy_model__evaluates_predicts_and_restarts_a_finite_dataset_each_epoch():
    with ipu.ipu_strategy.IPUStrategy().scope():
        inputs = pj.keras.Input((6,))
        layers = _layers()
        model = ipu.keras.Model(inputs, layers[1](layers[0](inputs)), gradient_accumulation_count=4)
        predictions = model.predict(X, batch_size=4)  # no compile needed to predict
        model.compile("sgd", loss="mse", metrics=["mae"])
        result = model.evaluate(X, Y, batch_size=8)
        history = model.fit(_dataset(48), epochs=2, verbose=0)
    want = np.tanh(X @ np.full((6, 4), 0.1)) @ np.full((4, 2), 0.2)
    np.testing.assert_allclose(predictions, want, rtol=1e-5, atol=1e-6)
    assert isinstance(result, list) and len(result) == 2
    np.testing.assert_allclose(result[0], np.mean((want - Y) ** 2), rtol=1e-5)
    np.testing.assert_allclose(result[1], np.mean(np.abs(want - Y)), rtol=1e-5)
    assert len(history.history["loss"]) == 2 and history.history["loss"][1] < history.history["loss"][0]


def test__legacy_arrays__derive_the_steps_and_drop_what_does_not_make_a_step(caplog):
    with ipu.ipu_strategy.IPUStrategy().scope():
        model = ipu.keras.Sequential(_layers(), gradient_accumulation_count=5)
        model.compile(pj.keras.optimizers.SGD(0.01), loss="mse")
        with caplog.at_level(logging.WARNING, logger="popjit"):
            model.fit(X, Y, batch_size=4, verbose=0)
    assert ("The number of mini-batches in the dataset (24) must be a multiple of the gradient accumulation count "
            "(5) multiplied by the replication factor (1). Samples have been dropped to give a dataset of 20 "
            "mini-batches.") in caplog.text
    _, want_weights = _by_hand([(X[i:i + 4], Y[i:i + 4]) for i in range(0, 80, 4)], 5, 0.01)
    for got, want in zip(model.get_weights(), want_weights, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def _compiled(ga=1):
    model = ipu.keras.Sequential(_layers(), gradient_accumulation_count=ga)
    model.compile("sgd", loss="mse")
    return model


@pytest.mark.parametrize(("call", "error", "message"), [
    (lambda m: m.fit(_dataset(64)), ValueError,
     r"Sequential requires the number of mini-batches in the dataset \(16\) to be evenly divisible by the gradient "
     r"accumulation count \(3\) multiplied by the replication factor \(1\)"),
    (lambda m: m.fit(_dataset(repeat=True)), ValueError,
     r"When using an infinitely repeating dataset, you must provide the number of steps per epoch"),
    (lambda m: m.fit(_dataset(96), steps_per_epoch=14), ValueError,
     r"Steps per epoch times gradient accumulation count \(14 x 3\) is greater than the number of mini-batches in "
     r"the dataset \(24\)\."),
    (lambda m: m.fit(_dataset(96), steps_per_epoch=4, steps_per_run=3), ValueError,
     r"Sequential requires the number of steps in an epoch 'steps_per_epoch' \(4\) to be evenly divisible by the "
     r"number of steps per execution of the on-device training loop 'steps_per_run' \(3\)"),
    (lambda m: m.fit(pj.data.Dataset.from_tensor_slices(X).batch(4)), ValueError,
     r"fit requires a dataset with a structure containing 2 element\(s\), but got 1 element\(s\) instead\."),
    (lambda m: m.predict(_dataset()), ValueError,
     r"predict requires a dataset with a structure containing 1 element\(s\), but got 2 element\(s\) instead\."),
    (lambda m: m.fit(_dataset(), batch_size=4), ValueError, r"Do not specify `batch_size` in Sequential\.fit\(\)\."),
    (lambda m: m.fit(X, Y), ValueError, r"`batch_size` or `steps` is required for `Tensor` or `NumPy` input data\."),
    (lambda m: m.fit(_dataset(), validation_data=_dataset()), NotImplementedError,
     r"IPU Keras models do not support these parameters to fit\(\): validation_data"),
    (lambda m: m.compile("sgd", "mse", weighted_metrics=["mae"]), NotImplementedError,
     r"IPU Keras models do not support these parameters to compile\(\): weighted_metrics"),
    (lambda m: m.compile("sgd", "mse", loss_weights={"a": 1.0}), ValueError,
     r"loss_weights can only be specified as a list\."),
    (lambda m: m(X), ValueError, r"Sequential can only be called through the `fit`, `evaluate` or `predict` "
                                 r"interfaces\."),
])
def test__legacy_checks__raise_the_sdks_errors_and_leave_the_weights(call, error, message):
    with ipu.ipu_strategy.IPUStrategy().scope():
        model = _compiled(ga=3)
        model.build((None, 6))
        before = model.get_weights()
        with pytest.raises(error, match=message):
            call(model)
    for got, want in zip(model.get_weights(), before, strict=True):
        np.testing.assert_array_equal(got, want)


def test__legacy_models__need_compile_and_an_ipu():
    with ipu.ipu_strategy.IPUStrategy().scope():
        model = ipu.keras.Sequential(_layers())
        with pytest.raises(RuntimeError, match=r"You must compile your model before training/testing"):
            model.fit(_dataset())
    outside = _compiled()
    with pytest.raises(ValueError, match=r"^Sequential can only be used on an IPU device\.$"):
        outside.fit(_dataset())
    with pytest.raises(ValueError, match=r"IPU Sequential requires a list of Layers\."):
        ipu.keras.Sequential(pj.keras.layers.Dense(2))
    with pytest.raises(ValueError, match=r"An IPU Sequential's list of Layers may only contain Keras Layers\."):
        ipu.keras.Sequential([[pj.keras.layers.Dense(2)]])
    assert ipu.keras.Sequential([]).layers == []


def test__keras_ipu_namespace__pipelining_names_and_layers():
    assert ipu.keras.PipelineStage is pj.keras.ipu.PipelineStage
    assert ipu.keras.SequentialPipelineModel is ipu.keras.PipelineSequential
    assert pj.keras.ipu.__ipu__built__ == "1" and pj.keras.ipu.layers.Dense is pj.keras.layers.Dense
