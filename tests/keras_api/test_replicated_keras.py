"""Keras and the optimizer wrappers on a replicated device (spec §1.11, §1.15, §3.4): every training step
takes one batch per replica and sums the replicas' gradients, so ``R`` replicas of batch ``b`` update
the weights as one replica of batch ``R*b`` with ``R`` times the learning rate."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pytest

import popjit as pj
from popjit import ipu
from popjit import tensorflow as tf
from tests.helpers import device_of

R = 2
rng = np.random.default_rng(11)
X = rng.standard_normal((64, 6)).astype(np.float32)
Y = rng.standard_normal((64, 1)).astype(np.float32)




def _model() -> Any:
    keras = pj.keras
    constant = keras.initializers.Constant
    return keras.Sequential([keras.Input((6,)),
                             keras.layers.Dense(4, activation="tanh", kernel_initializer=constant(0.1)),
                             keras.layers.Dense(1, kernel_initializer=constant(0.2))])


def _fit(replicas: int, batch: int, lr: float, **fit: Any) -> tuple[Any, list[np.ndarray]]:
    strategy = device_of(replicas)
    with strategy.scope():
        model = _model()
        model.compile(pj.keras.optimizers.SGD(lr), loss="mse", steps_per_execution=2)
        history = model.fit(X, Y, batch_size=batch, epochs=2, shuffle=False, verbose=0, **fit)
        return history, model.get_weights(), model


def test_replicated_fit_equals_one_replica_of_the_whole_batch(fresh_ipu_system, caplog):
    with caplog.at_level(logging.INFO, logger="popjit"):
        _, replicated, _ = _fit(R, 8, 0.01)
    assert f"Training is distributed across {R} replicas, your effective batch size is {8 * R}." in caplog.text
    _, single, _ = _fit(1, 8 * R, 0.01 * R)
    for got, want in zip(replicated, single, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_replicated_predict_keeps_the_order_of_the_data(fresh_ipu_system):
    _, _, model = _fit(R, 8, 0.01)
    with ipu.ipu_strategy.IPUStrategy().scope():
        got = model.predict(X, batch_size=8)
    assert got.shape == (64, 1)
    w0, b0, w1, b1 = model.get_weights()
    np.testing.assert_allclose(got, np.tanh(X @ w0 + b0) @ w1 + b1, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("method", ["NONE", "MEAN", "SUM"])
def test_replication_options_combine_each_replicas_metrics(fresh_ipu_system, method):
    strategy = device_of(R)
    with strategy.scope():
        model = _model()
        model.compile("sgd", loss="mse", steps_per_execution=2)
        model.set_replication_options(method)
        loss = model.evaluate(X, Y, batch_size=16, verbose=0)
    w0, b0, w1, b1 = model.get_weights()
    errors = ((np.tanh(X @ w0 + b0) @ w1 + b1 - Y) ** 2).reshape(4, 16).mean(1)  # batch i goes to replica i % R
    per_replica = np.array([errors[r::R].mean() for r in range(R)])
    want = {"NONE": per_replica[0], "MEAN": per_replica.mean(), "SUM": per_replica.sum()}[method]
    np.testing.assert_allclose(loss, want, rtol=1e-5)
    with pytest.raises(ValueError, match="Cannot parse 'MEDIAN'"):
        model.set_replication_options("MEDIAN")


def test_too_little_data_for_every_replica(fresh_ipu_system, caplog):
    strategy = device_of(R)
    with strategy.scope():
        model = _model()
        model.compile("sgd", loss="mse")
        with pytest.raises(ValueError, match=r"contains 8 items, but all 2 replicas are requested to run 5 steps each"):
            model.fit(X, Y, batch_size=8, steps_per_epoch=5, verbose=0)
        model.compile("sgd", loss="mse", steps_per_execution=3)
        with pytest.raises(ValueError, match="`steps_per_execution` must be a divisor of the number of batches in the "
                                             "dataset provided to this replica"):
            model.fit(X, Y, batch_size=8, verbose=0)  # 8 batches: 4 per replica
        model.compile("sgd", loss="mse")
        with caplog.at_level(logging.INFO, logger="popjit"):
            model.evaluate(X[:56], Y[:56], batch_size=8, verbose=0)
    assert "Dataset of length 7 is being evenly distributed between 2 replicas. The remaining 1 batches will be " \
           "dropped." in caplog.text


# -- the optimizer wrappers --------------------------------------------------------------------------


def _run_steps(strategy: Any, make_optimizer: Any, steps: int, batch: int = 4) -> np.ndarray:
    """``steps`` steps of SGD on ``0.5 * |x @ w|^2`` per replica, each replica on its own batches."""
    infeed = ipu.ipu_infeed_queue.IPUInfeedQueue(tf.data.Dataset.from_tensor_slices(X).batch(batch,
                                                                                              drop_remainder=True))
    with strategy.scope():
        w = tf.Variable(np.ones((6, 1), np.float32))
        opt = make_optimizer()

        def step(xb):
            opt.minimize(lambda: 0.5 * tf.reduce_sum((xb @ w) ** 2), [w])

        @tf.function(jit_compile=True)
        def run():
            ipu.loops.repeat(steps, step, infeed_queue=infeed)

        strategy.run(run)
    return w.numpy()


def _numpy_steps(steps: int, lr: float, scale: float = 1.0, every: int = 1, batch: int = 4) -> np.ndarray:
    w = np.ones((6, 1))
    acc = np.zeros_like(w)
    for i in range(steps):
        g = sum(X[(i * R + r) * batch:(i * R + r + 1) * batch].T @ (X[(i * R + r) * batch:(i * R + r + 1) * batch] @ w)
                for r in range(R))
        acc += scale * g
        if (i + 1) % every == 0:
            w, acc = w - lr * acc, np.zeros_like(w)
    return w


def test_a_keras_optimizer_sums_the_replicas_gradients(fresh_ipu_system):
    got = _run_steps(device_of(R), lambda: pj.keras.optimizers.SGD(0.01), 3)
    np.testing.assert_allclose(got, _numpy_steps(3, 0.01), rtol=1e-5)


def test_cross_replica_and_map_gradient_optimizers(fresh_ipu_system):
    strategy = device_of(R)
    got = _run_steps(strategy, lambda: ipu.optimizers.CrossReplicaOptimizer(pj.keras.optimizers.SGD(0.01)), 3)
    np.testing.assert_allclose(got, _numpy_steps(3, 0.01), rtol=1e-5)  # summed once, not twice
    mapped = _run_steps(strategy, lambda: ipu.optimizers.MapGradientOptimizer(
        ipu.optimizers.CrossReplicaOptimizer(pj.keras.optimizers.SGD(0.01)), lambda g, v: g * 0.5), 2)
    np.testing.assert_allclose(mapped, _numpy_steps(2, 0.01, scale=0.5), rtol=1e-5)
    with pytest.raises(TypeError, match="wraps a TensorFlow 1 optimizer"):
        ipu.optimizers.CrossReplicaOptimizer("sgd")


def test_cross_replica_gradient_accumulation(fresh_ipu_system):
    got = _run_steps(device_of(R), lambda: ipu.optimizers.CrossReplicaGradientAccumulationOptimizerV2(
        pj.keras.optimizers.SGD(0.01), 2), 4)
    np.testing.assert_allclose(got, _numpy_steps(4, 0.01, every=2), rtol=1e-5)


def test_strategy_reduce_is_a_collective_on_the_ipu_and_nothing_on_the_host(fresh_ipu_system):
    strategy = device_of(R)

    @tf.function(jit_compile=True)
    def f():
        r = tf.cast(ipu.replication_ops.replication_index(), tf.float32)
        return (strategy.reduce("SUM", r + 1.0, axis=None), strategy.reduce(tf.distribute.ReduceOp.MEAN, r + 1.0),
                strategy.reduce("SUM", tf.fill([3], r), axis=0))

    total, mean, summed_axis = strategy.run(f)
    assert float(total) == 3.0 and float(mean) == 1.5 and float(summed_axis) == 3.0
    np.testing.assert_array_equal(strategy.reduce("SUM", np.ones(2, np.float32)), np.ones(2))
    assert strategy.num_replicas_in_sync == 1  # as Graphcore's: replication lives inside the program
