"""Gradient accumulation: ``set_gradient_accumulation_options`` in Keras ``fit`` (inside IPUStrategy and
on the host) and ``ipu.optimizers.GradientAccumulationOptimizerV2`` in a custom loop, against
training on the combined batches; the reductions; Graphcore's checks and errors."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import popjit.tensorflow as pj
from popjit import ipu
from popjit.errors import UnimplementedError

RNG = np.random.default_rng(8)
X = RNG.normal(size=(48, 5)).astype(np.float32)
Y = (X @ RNG.normal(size=(5, 2))).astype(np.float32)


def mlp(tf: Any, seed: int = 1) -> Any:
    model = tf.keras.Sequential([tf.keras.Input((5,)), tf.keras.layers.Dense(4, activation="tanh"),
                                 tf.keras.layers.Dense(2)])
    rng = np.random.default_rng(seed)
    model.set_weights([rng.normal(size=w.shape).astype(np.float32) * 0.5 for w in model.get_weights()])
    return model


def scope(where: str) -> Any:
    return ipu.ipu_strategy.IPUStrategy().scope() if where == "ipu" else pj.device("/device:CPU:0")


@pytest.mark.parametrize("where", ["ipu", "host"])
@pytest.mark.parametrize("reduction,lr_scale", [("mean", 1), ("running_mean", 1), ("sum", 3)])
def test__accumulated_micro_batches__train_as_one_big_batch(where: str, reduction: str, lr_scale: int) -> None:
    """3 micro-batches of 4 averaged (or summed, with a third of the learning rate) give the update of
    one batch of 12: the mean squared error's gradient is the mean of the micro-batches' gradients."""
    with scope(where):
        accumulated = mlp(pj)
        accumulated.compile(pj.keras.optimizers.SGD(0.1 / lr_scale), "mse", steps_per_execution=6)
        accumulated.set_gradient_accumulation_options(gradient_accumulation_steps_per_replica=3,
                                                      gradient_accumulation_reduction_method=reduction)
        accumulated.fit(X, Y, batch_size=4, epochs=2, shuffle=False, verbose=0)
        big = mlp(pj)
        big.compile(pj.keras.optimizers.SGD(0.1), "mse", steps_per_execution=2)
        big.fit(X, Y, batch_size=12, epochs=2, shuffle=False, verbose=0)
    for got, want in zip(accumulated.get_weights(), big.get_weights(), strict=True):
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)
    assert int(accumulated.optimizer.iterations.numpy()) == int(big.optimizer.iterations.numpy()) == 8


def test__normalized_gradients__equal_the_mean_and_none_turns_accumulation_off() -> None:
    with scope("ipu"):
        normalized = mlp(pj)
        normalized.compile(pj.keras.optimizers.Adam(0.01), "mse", steps_per_execution=4)
        normalized.set_gradient_accumulation_options(2, experimental_normalize_gradients=True,
                                                     gradient_accumulation_reduction_method="mean")
        mean = mlp(pj)
        mean.compile(pj.keras.optimizers.Adam(0.01), "mse", steps_per_execution=4)
        mean.set_gradient_accumulation_options(2, gradient_accumulation_reduction_method="mean")
        off = mlp(pj)
        off.compile(pj.keras.optimizers.Adam(0.01), "mse", steps_per_execution=4)
        off.set_gradient_accumulation_options(2)
        off.set_gradient_accumulation_options(None)
        for model in (normalized, mean, off):
            model.fit(X, Y, batch_size=4, epochs=1, shuffle=False, verbose=0)
    for got, want in zip(normalized.get_weights(), mean.get_weights(), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert int(normalized.optimizer.iterations.numpy()) == 6
    assert int(off.optimizer.iterations.numpy()) == 12


@given(st.integers(1, 4), st.integers(1, 9), st.sampled_from(["sum", "mean", "running_mean"]))
def test__optimizer_v2__applies_every_n_steps_in_a_compiled_loop(n: int, steps: int, reduction: str) -> None:
    """A custom loop of ``steps`` SGD steps on ``sum(w * x_i)``: the variable moves every ``n``-th step by
    the learning rate times the combined ``x``; the step counter is the optimizer's."""
    xs = np.arange(1, steps + 1, dtype=np.float32)[:, None] * np.array([[1.0, -2.0]], np.float32)
    w = pj.Variable(np.zeros(2, np.float32))
    opt = ipu.optimizers.GradientAccumulationOptimizerV2(pj.keras.optimizers.SGD(0.5), n,
                                                         reduction_method=reduction)

    @pj.function(jit_compile=True)
    def train(data):
        for i in pj.range(steps):
            with pj.GradientTape() as tape:
                loss = pj.reduce_sum(w * data[i])
            opt.minimize(loss, [w], tape=tape)

    train(xs)
    want = np.zeros(2)
    for k in range(steps // n):
        block = xs[k * n:(k + 1) * n].astype(np.float64)
        want -= 0.5 * (block.sum(0) if reduction == "sum" else block.mean(0))
    np.testing.assert_allclose(w.numpy(), want, rtol=1e-5, atol=1e-5)
    assert int(opt.iterations.numpy()) == steps // n
    assert opt.lr is opt._opt.lr


def test__graphcores_checks_and_errors(caplog: Any) -> None:
    with scope("ipu"):
        model = mlp(pj)
        model.compile("sgd", "mse", steps_per_execution=8)
        for bad in (0, -1, 2.5, True):
            with pytest.raises(ValueError, match="Expected `gradient_accumulation_steps_per_replica` to be a "
                                                 "positive integer"):
                model.set_gradient_accumulation_options(bad)
        with pytest.raises(ValueError, match="Found `opt` key in `gradient_accumulation_optimizer_kwargs`"):
            model.set_gradient_accumulation_options(2, opt=pj.keras.optimizers.SGD())
        with pytest.raises(ValueError, match="Cannot parse 'median'"):
            model.set_gradient_accumulation_options(2, gradient_accumulation_reduction_method="median")
        with pytest.raises(UnimplementedError, match="offload_weight_update_variables=True"):
            model.set_gradient_accumulation_options(2, offload_weight_update_variables=True)
        model.set_gradient_accumulation_options(3)
        before = model.get_weights()
        with pytest.raises(RuntimeError, match=r"`steps_per_execution` value \(set to 8\) is not divisible by "
                                               r"`gradient_accumulation_steps_per_replica` \(3\)"):
            model.fit(X, Y, batch_size=6, epochs=1, verbose=0)
        for got, want in zip(model.get_weights(), before, strict=True):
            np.testing.assert_array_equal(got, want)
        model.set_gradient_accumulation_options(4, offload_weight_update_variables=False, dtype=None)
        with caplog.at_level(logging.INFO, logger="popjit"):
            model.fit(X, Y, batch_size=6, epochs=1, verbose=0)
        assert "your effective batch size is 24" in caplog.text


def test__a_custom_train_step__is_refused_with_accumulation() -> None:
    class Custom(pj.keras.Sequential):
        def train_step(self, data):
            return super().train_step(data)

    with scope("ipu"):
        model = Custom([pj.keras.Input((5,)), pj.keras.layers.Dense(2)])
        model.compile("sgd", "mse", steps_per_execution=2)
        model.set_gradient_accumulation_options(2)
        with pytest.raises(RuntimeError, match=r"`train_step` for the model .* has been overridden\. This is not "
                                               r"supported for Keras models with gradient accumulation enabled"):
            model.fit(X, Y, batch_size=4, epochs=1, verbose=0)
