"""The non-convolution ``tf.nn`` functions (moments, batch_normalization, silu, leaky_relu, bias_add,
l2_normalize, dropout, embedding_lookup): values against NumPy, gradients against finite
differences, and the refused arguments."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import popjit.tensorflow as tf
from popjit.errors import InvalidArgumentError


def small_arrays(min_dims: int = 1, max_dims: int = 3) -> Any:
    shapes = hnp.array_shapes(min_dims=min_dims, max_dims=max_dims, min_side=1, max_side=5)
    return hnp.arrays(np.float32, shapes, elements=st.floats(-4, 4, width=32))


def compiled(fn: Any) -> Any:
    return tf.function(fn, jit_compile=True)


def sum_gradient(fn: Any, x: np.ndarray) -> np.ndarray:
    """The gradient of ``sum(fn(x) * weights)`` for fixed random weights, compiled."""
    weights = np.random.default_rng(0).normal(size=np.shape(fn(x).numpy())).astype(np.float32)

    @tf.function(jit_compile=True)
    def grad(v):
        with tf.GradientTape() as tape:
            tape.watch(v)
            total = tf.reduce_sum(fn(v) * weights)
        return tape.gradient(total, v)

    return grad(tf.constant(x)).numpy()


def finite_difference(fn: Any, x: np.ndarray, eps: float = 1e-3) -> np.ndarray:
    weights = np.random.default_rng(0).normal(size=np.shape(fn(x).numpy())).astype(np.float64)
    flat = x.astype(np.float64).ravel()
    out = np.empty_like(flat)
    for i in range(flat.size):
        hi, lo = flat.copy(), flat.copy()
        hi[i] += eps
        lo[i] -= eps
        f_hi = np.sum(fn(hi.reshape(x.shape).astype(np.float32)).numpy() * weights)
        f_lo = np.sum(fn(lo.reshape(x.shape).astype(np.float32)).numpy() * weights)
        out[i] = (f_hi - f_lo) / (2 * eps)
    return out.reshape(x.shape)


@given(small_arrays(), st.booleans())
def test_moments_are_mean_and_biased_variance(x: np.ndarray, keepdims: bool) -> None:
    axes = list(range(x.ndim - 1)) or [0]
    mean, variance = compiled(lambda v: tf.nn.moments(v, axes=axes, keepdims=keepdims))(x)
    np.testing.assert_allclose(mean.numpy(), x.mean(axis=tuple(axes), keepdims=keepdims), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(variance.numpy(), x.var(axis=tuple(axes), keepdims=keepdims), rtol=1e-4,
                               atol=1e-5)


@given(small_arrays(min_dims=2))
def test_batch_normalization_matches_formula(x: np.ndarray) -> None:
    channels = x.shape[-1]
    rng = np.random.default_rng(channels)
    mean, variance = rng.normal(size=channels), rng.uniform(0.5, 2, size=channels)
    offset, scale = rng.normal(size=channels), rng.normal(size=channels)
    args = [a.astype(np.float32) for a in (mean, variance, offset, scale)]
    got = tf.nn.batch_normalization(x, *args, variance_epsilon=1e-3).numpy()
    want = (x - mean) * scale / np.sqrt(variance + 1e-3) + offset
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@given(small_arrays(), st.sampled_from([1.0, 0.5, 2.0]))
def test_silu_and_swish(x: np.ndarray, beta: float) -> None:
    want = x / (1 + np.exp(-beta * x.astype(np.float64)))
    np.testing.assert_allclose(tf.nn.silu(x, beta=beta).numpy(), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(tf.nn.swish(x).numpy(), x / (1 + np.exp(-x.astype(np.float64))),
                               rtol=1e-5, atol=1e-6)


@given(small_arrays(), st.sampled_from([0.2, 0.0, 1.5]))
def test_leaky_relu(x: np.ndarray, alpha: float) -> None:
    np.testing.assert_allclose(tf.nn.leaky_relu(x, alpha=alpha).numpy(), np.where(x > 0, x, alpha * x),
                               rtol=1e-6)


@given(small_arrays(min_dims=2), st.booleans())
def test_bias_add_on_the_channel_axis(x: np.ndarray, channels_first: bool) -> None:
    axis = 1 if channels_first else -1
    bias = np.arange(x.shape[axis], dtype=np.float32)
    shape = [1] * x.ndim
    shape[axis] = x.shape[axis]
    got = tf.nn.bias_add(x, bias, data_format="NCHW" if channels_first else None).numpy()
    np.testing.assert_allclose(got, x + bias.reshape(shape))


@given(small_arrays(min_dims=2))
def test_l2_normalize_value_and_gradient(x: np.ndarray) -> None:
    def norm(v: Any) -> Any:
        return tf.nn.l2_normalize(v, axis=-1)

    want = x / np.sqrt(np.maximum((x.astype(np.float64) ** 2).sum(-1, keepdims=True), 1e-12))
    np.testing.assert_allclose(norm(x).numpy(), want, rtol=1e-5, atol=1e-6)
    if np.all(np.abs(x).sum(-1) > 0.5):
        np.testing.assert_allclose(sum_gradient(norm, x), finite_difference(norm, x), rtol=2e-2, atol=2e-2)


@given(hnp.arrays(np.int32, hnp.array_shapes(max_dims=2, max_side=6), elements=st.integers(0, 6)))
def test_embedding_lookup_takes_rows(ids: np.ndarray) -> None:
    table = np.arange(7 * 3, dtype=np.float32).reshape(7, 3)
    np.testing.assert_array_equal(tf.nn.embedding_lookup(table, ids).numpy(), table[ids])
    np.testing.assert_array_equal(tf.nn.embedding_lookup([table], ids).numpy(), table[ids])


def test_embedding_lookup_refuses_max_norm_and_sharded_tables() -> None:
    table = np.ones((4, 2), np.float32)
    with pytest.raises(InvalidArgumentError, match="max_norm"):
        tf.nn.embedding_lookup(table, [0], max_norm=1.0)
    with pytest.raises(InvalidArgumentError, match="several sharded tables"):
        tf.nn.embedding_lookup([table, table], [0])


@pytest.mark.parametrize("rate", [0.25, 0.5, 0.8])
def test_dropout_drops_the_rate_and_scales_the_rest(rate: float) -> None:
    x = np.ones((200, 100), np.float32)
    y = compiled(lambda v: tf.nn.dropout(v, rate, seed=3))(x).numpy()
    kept = y != 0
    assert abs(1 - kept.mean() - rate) < 0.02
    np.testing.assert_allclose(y[kept], 1 / (1 - rate), rtol=1e-6)


def test_dropout_noise_shape_shares_one_decision_per_row() -> None:
    y = tf.nn.dropout(np.ones((50, 8), np.float32), 0.5, noise_shape=[50, 1], seed=1).numpy()
    assert np.all((y == 0).all(axis=1) | (y != 0).all(axis=1))
    assert 0 < (y[:, 0] == 0).sum() < 50


def test_dropout_rate_zero_is_identity_and_bad_rates_raise() -> None:
    x = np.arange(6, dtype=np.float32)
    np.testing.assert_array_equal(tf.nn.dropout(x, 0.0).numpy(), x)
    for rate in (1.0, -0.1):
        with pytest.raises(ValueError, match="range \\[0, 1\\)"):
            tf.nn.dropout(x, rate)
