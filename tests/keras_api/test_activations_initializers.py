"""Keras activations against NumPy (eager and compiled), and initializers: statistics with seeds,
reproducibility, lookup by name and class."""

from __future__ import annotations

import math

import numpy as np
import pytest

import popjit.tensorflow as tf

X = np.linspace(-6.0, 6.0, 49, dtype=np.float32).reshape(7, 7)
_ERF = np.vectorize(math.erf)


def _sig(x):
    return 1 / (1 + np.exp(-x))


def _softplus(x):
    return np.log1p(np.exp(x))


SELU_A, SELU_S = 1.6732632423543772, 1.0507009873554805
REFERENCES = {
    "relu": lambda x: np.maximum(x, 0),
    "sigmoid": _sig,
    "tanh": np.tanh,
    "softmax": lambda x: np.exp(x - x.max(-1, keepdims=True)) / np.exp(x - x.max(-1, keepdims=True)).sum(-1,
                                                                                                 keepdims=True),
    "linear": lambda x: x,
    "elu": lambda x: np.where(x > 0, x, np.expm1(x)),
    "selu": lambda x: SELU_S * np.where(x > 0, x, SELU_A * np.expm1(x)),
    "softplus": _softplus,
    "softsign": lambda x: x / (1 + np.abs(x)),
    "swish": lambda x: x * _sig(x),
    "silu": lambda x: x * _sig(x),
    "gelu": lambda x: 0.5 * x * (1 + _ERF(x / np.sqrt(2))),
    "exponential": np.exp,
    "hard_sigmoid": lambda x: np.clip(0.2 * x + 0.5, 0, 1),
    "relu6": lambda x: np.clip(x, 0, 6),
    "leaky_relu": lambda x: np.where(x > 0, x, 0.2 * x),
    "mish": lambda x: x * np.tanh(_softplus(x)),
}


def test__activations_by_name__match_numpy_eagerly():
    x64 = X.astype(np.float64)
    for name, ref in REFERENCES.items():
        fn = tf.keras.activations.get(name)
        np.testing.assert_allclose(fn(tf.constant(X)).numpy(), ref(x64), rtol=2e-5, atol=2e-6, err_msg=name)
        assert tf.keras.activations.serialize(fn) in (name, "swish")


def test__activations__compiled_match_numpy():
    names = list(REFERENCES)

    @tf.function(jit_compile=True)
    def all_activations(x):
        return [tf.keras.activations.get(n)(x) for n in names]

    x64 = X.astype(np.float64)
    for name, out in zip(names, all_activations(X)):
        np.testing.assert_allclose(out.numpy(), REFERENCES[name](x64), rtol=3e-5, atol=3e-6, err_msg=name)


def test__activation_options__relu_cap_slope_threshold_elu_alpha_gelu_tanh():
    a = tf.keras.activations
    x = X.astype(np.float64)
    got = a.relu(tf.constant(X), alpha=0.1, max_value=2.0, threshold=0.5).numpy()
    np.testing.assert_allclose(got, np.where(x >= 2, 2, np.where(x > 0.5, x, 0.1 * (x - 0.5))), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(a.relu(tf.constant(X), alpha=0.3).numpy(), np.where(x > 0, x, 0.3 * x), rtol=1e-6)
    np.testing.assert_allclose(a.relu(tf.constant(X), max_value=6.0).numpy(), np.clip(x, 0, 6), rtol=1e-6)
    np.testing.assert_allclose(a.elu(tf.constant(X), alpha=0.5).numpy(), np.where(x > 0, x, 0.5 * np.expm1(x)),
                               rtol=1e-5, atol=1e-6)
    approx = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))
    np.testing.assert_allclose(a.gelu(tf.constant(X), approximate=True).numpy(), approx, rtol=2e-5, atol=2e-6)


def test__activation_lookup__errors_and_callables():
    assert tf.keras.activations.get(None) is tf.keras.activations.linear
    assert tf.keras.activations.get(tf.nn.relu) is tf.nn.relu
    with pytest.raises(ValueError, match="Unknown activation function: relu7"):
        tf.keras.activations.get("relu7")
    with pytest.raises(ValueError, match="1D"):
        tf.keras.activations.softmax(tf.constant([1.0, 2.0]))


# -- initializers ---------------------------------------------------------------------------------
SHAPE = (300, 200)
FAN_IN, FAN_OUT = SHAPE


@pytest.mark.parametrize("name, kind, scale", [
    ("glorot_uniform", "uniform", np.sqrt(6 / (FAN_IN + FAN_OUT))),
    ("glorot_normal", "normal", np.sqrt(2 / (FAN_IN + FAN_OUT))),
    ("he_uniform", "uniform", np.sqrt(6 / FAN_IN)),
    ("he_normal", "normal", np.sqrt(2 / FAN_IN)),
    ("lecun_uniform", "uniform", np.sqrt(3 / FAN_IN)),
    ("lecun_normal", "normal", np.sqrt(1 / FAN_IN)),
])
def test__variance_scaling_initializers__have_the_right_statistics(name, kind, scale):
    init = tf.keras.initializers.get({"class_name": name, "config": {"seed": 7}})
    w = np.asarray(init(SHAPE))
    assert w.shape == SHAPE and w.dtype == np.float32
    assert abs(w.mean()) < 0.02 * scale * 3
    if kind == "uniform":
        assert np.abs(w).max() <= scale
        np.testing.assert_allclose(w.std(), scale / np.sqrt(3), rtol=0.03)
    else:  # truncated at two standard deviations of the underlying normal, rescaled to the target std
        assert np.abs(w).max() <= 2 * scale / 0.87962566103423978 + 1e-6
        np.testing.assert_allclose(w.std(), scale, rtol=0.03)


def test__basic_initializers__values_and_statistics():
    i = tf.keras.initializers
    np.testing.assert_array_equal(i.Zeros()((2, 3)), np.zeros((2, 3), np.float32))
    np.testing.assert_array_equal(i.ones()((2,)), np.ones(2, np.float32))
    np.testing.assert_array_equal(i.Constant(2.5)((2, 2)), np.full((2, 2), 2.5, np.float32))
    np.testing.assert_array_equal(i.Identity(gain=2.0)((2, 3)), 2 * np.eye(2, 3, dtype=np.float32))
    w = np.asarray(i.RandomNormal(mean=1.0, stddev=0.5, seed=1)((400, 100)))
    np.testing.assert_allclose([w.mean(), w.std()], [1.0, 0.5], rtol=0.02)
    w = np.asarray(i.RandomUniform(-0.2, 0.3, seed=1)((400, 100)))
    assert w.min() >= -0.2 and w.max() < 0.3
    np.testing.assert_allclose(w.mean(), 0.05, atol=0.005)
    w = np.asarray(i.TruncatedNormal(stddev=0.1, seed=1)((400, 100)))
    assert np.abs(w).max() <= 0.2 and 0.08 < w.std() < 0.09  # a normal cut at 2 sigma keeps 88% of the std
    assert np.asarray(i.RandomUniform()((1000,))).max() <= 0.05  # Keras default range +-0.05
    q = np.asarray(i.Orthogonal(seed=3)((6, 4)), np.float64)
    np.testing.assert_allclose(q.T @ q, np.eye(4), atol=1e-5)


def test__seeded_initializers__are_reproducible_and_unseeded_ones_are_not():
    i = tf.keras.initializers
    a, b = i.GlorotUniform(seed=5)((4, 4)), i.GlorotUniform(seed=5)((4, 4))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, i.GlorotUniform(seed=6)((4, 4)))
    init = i.HeNormal()
    assert not np.array_equal(init((4, 4)), init((4, 4)))
    tf.random.set_seed(11)
    c = i.RandomNormal()((4, 4))
    tf.random.set_seed(11)
    np.testing.assert_array_equal(c, i.RandomNormal()((4, 4)))


def test__initializer_lookup__names_classes_configs_and_errors():
    i = tf.keras.initializers
    assert isinstance(i.get("glorot_uniform"), i.GlorotUniform)
    assert isinstance(i.get("GlorotNormal"), i.GlorotNormal)
    assert i.glorot_uniform is i.GlorotUniform and i.he_normal is i.HeNormal
    assert isinstance(i.get(i.Zeros), i.Zeros)
    assert i.get(None) is None
    config = i.serialize(i.VarianceScaling(2.0, "fan_out", "uniform", seed=3))
    assert config == {"class_name": "VarianceScaling",
                      "config": {"scale": 2.0, "mode": "fan_out", "distribution": "uniform", "seed": 3}}
    expected = i.VarianceScaling(2.0, "fan_out", "uniform", 3)((3, 3))
    np.testing.assert_array_equal(i.deserialize(config)((3, 3)), expected)
    with pytest.raises(ValueError, match="Unknown initializer"):
        i.get("glorot_sideways")
    with pytest.raises(ValueError, match="positive"):
        i.VarianceScaling(scale=0.0)
    with pytest.raises(ValueError, match="mode"):
        i.VarianceScaling(mode="fan_mid")


def test__fans__of_convolution_kernels_include_the_receptive_field():
    from popjit.keras.initializers import compute_fans

    assert compute_fans((3, 3, 16, 32)) == (144, 288)
    assert compute_fans((5,)) == (5, 5) and compute_fans(()) == (1, 1) and compute_fans((4, 6)) == (4, 6)
