"""Keras layers: forward passes against NumPy with fixed weights, shapes, names, weights, configs,
Dropout's training flag (eagerly and compiled), custom layers."""

from __future__ import annotations

import numpy as np
import pytest

import popjit.tensorflow as tf

RNG = np.random.default_rng(0)


def _dense_weights(n_in, n_out):
    return [RNG.normal(size=(n_in, n_out)).astype(np.float32), RNG.normal(size=(n_out,)).astype(np.float32)]


def test__dense__forward_matches_numpy_with_set_weights():
    layer = tf.keras.layers.Dense(3, activation="tanh")
    x = RNG.normal(size=(4, 5)).astype(np.float32)
    layer(x)
    w, b = _dense_weights(5, 3)
    layer.set_weights([w, b])
    np.testing.assert_allclose(layer(x).numpy(), np.tanh(x @ w + b), rtol=1e-5, atol=1e-6)
    compiled = tf.function(lambda t: layer(t), jit_compile=True)(x)
    np.testing.assert_allclose(compiled.numpy(), np.tanh(x @ w + b), rtol=1e-5, atol=1e-6)
    for got, want in zip(layer.get_weights(), [w, b]):
        np.testing.assert_array_equal(got, want)


def test__dense__without_bias_on_rank3_inputs_and_other_dtypes():
    layer = tf.keras.layers.Dense(2, use_bias=False, kernel_initializer="ones")
    x = RNG.normal(size=(2, 3, 4))
    out = layer(x)  # float64 input is cast to the layer's float32
    assert out.dtype == tf.float32 and out.shape == (2, 3, 2)
    np.testing.assert_allclose(out.numpy(), np.repeat(x.sum(-1, keepdims=True), 2, -1), rtol=1e-5)
    assert len(layer.weights) == 1 and layer.bias is None
    ints = tf.keras.layers.Dense(1, kernel_initializer="ones")(np.array([[1, 2]], np.int32))
    assert ints.dtype == tf.float32 and float(ints.numpy()[0, 0]) == 3.0


def test__dense__activations_by_name_and_callable():
    x = np.array([[-1.0, 0.5, 2.0]], np.float32)
    eye = tf.keras.initializers.Identity()
    for activation, ref in (("relu", lambda v: np.maximum(v, 0)), ("sigmoid", lambda v: 1 / (1 + np.exp(-v))),
                            (None, lambda v: v), (tf.nn.softplus, lambda v: np.log1p(np.exp(v))),
                            ("softmax", lambda v: np.exp(v) / np.exp(v).sum())):
        layer = tf.keras.layers.Dense(3, activation=activation, kernel_initializer=eye)
        np.testing.assert_allclose(layer(x).numpy(), ref(x.astype(np.float64)), rtol=1e-5, atol=1e-7)


def test__names__are_unique_like_keras_and_reset_by_clear_session():
    a, b, f = tf.keras.layers.Dense(1), tf.keras.layers.Dense(1), tf.keras.layers.Flatten()
    assert (a.name, b.name, f.name) == ("dense", "dense_1", "flatten")
    assert tf.keras.layers.LeakyReLU().name == "leaky_re_lu"
    assert tf.keras.layers.Dense(1, name="head").name == "head"
    b(np.ones((1, 2), np.float32))
    assert [v.name for v in b.weights] == ["dense_1/kernel:0", "dense_1/bias:0"]
    tf.keras.backend.clear_session()
    assert tf.keras.layers.Dense(1).name == "dense"


def test__build__from_shape_and_count_params():
    layer = tf.keras.layers.Dense(4)
    with pytest.raises(ValueError, match="isn't built"):
        layer.count_params()
    assert layer.weights == [] and not layer.built
    layer.build((None, 3))
    assert layer.built and layer.count_params() == 16
    assert layer.kernel.shape == (3, 4) and layer.bias.shape == (4,)
    assert layer.compute_output_shape((None, 7, 3)) == (None, 7, 4)
    with pytest.raises(ValueError, match="should be defined"):
        tf.keras.layers.Dense(2).build((None, None))


def test__set_weights__checks_count_and_shapes():
    layer = tf.keras.layers.Dense(2)
    layer.build((None, 3))
    with pytest.raises(ValueError, match="expecting 2 weights"):
        layer.set_weights([np.zeros((3, 2))])
    with pytest.raises(ValueError, match=r"shape \(3, 2\) is not compatible with provided weight shape \(2, 3\)"):
        layer.set_weights([np.zeros((2, 3)), np.zeros(2)])
    np.testing.assert_array_equal(layer.bias.numpy(), np.zeros(2, np.float32))  # unchanged


def test__trainable_flag__moves_weights_to_non_trainable():
    layer = tf.keras.layers.Dense(2)
    layer.build((None, 3))
    layer.trainable = False
    assert layer.trainable_weights == [] and len(layer.non_trainable_weights) == 2
    assert [v.name for v in layer.weights] == ["dense/kernel:0", "dense/bias:0"]


def test__bad_arguments__raise_like_keras():
    with pytest.raises(TypeError, match="Keyword argument not understood"):
        tf.keras.layers.Dense(2, foo=1)
    with pytest.raises(ValueError, match="positive integer"):
        tf.keras.layers.Dense(0)
    with pytest.raises(ValueError, match="between 0 and 1"):
        tf.keras.layers.Dropout(1.5)


def test__seeded_kernel_initializer__gives_the_same_layer_twice():
    make = lambda: tf.keras.layers.Dense(3, kernel_initializer=tf.keras.initializers.GlorotUniform(seed=3))  # noqa: E731
    a, b = make(), make()
    a.build((None, 4))
    b.build((None, 4))
    np.testing.assert_array_equal(a.kernel.numpy(), b.kernel.numpy())


def test__dense_config__round_trips():
    layer = tf.keras.layers.Dense(5, activation="relu", use_bias=False, kernel_initializer="he_normal", name="d")
    config = layer.get_config()
    assert config["activation"] == "relu" and config["units"] == 5 and config["use_bias"] is False
    assert config["kernel_initializer"] == {"class_name": "HeNormal", "config": {"seed": None}}
    again = tf.keras.layers.Dense.from_config(config)
    assert again.get_config() == config
    assert tf.keras.layers.deserialize(tf.keras.layers.serialize(layer)).get_config() == config


# -- reshaping layers ---------------------------------------------------------------------------------
def test__flatten__reshapes_each_example():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    np.testing.assert_array_equal(tf.keras.layers.Flatten()(x).numpy(), x.reshape(2, 12))
    np.testing.assert_array_equal(tf.keras.layers.Flatten(data_format="channels_first")(x).numpy(),
                                  x.transpose(0, 2, 1).reshape(2, 12))
    assert tf.keras.layers.Flatten()(np.ones(3, np.float32)).shape == (3, 1)
    assert tf.keras.layers.Flatten().compute_output_shape((None, 28, 28)) == (None, 784)
    ints = tf.keras.layers.Flatten()(np.ones((2, 2, 2), np.uint8))
    assert ints.dtype == tf.uint8


def test__reshape__with_an_inferred_axis():
    x = np.arange(24, dtype=np.float32).reshape(2, 12)
    layer = tf.keras.layers.Reshape((3, -1))
    np.testing.assert_array_equal(layer(x).numpy(), x.reshape(2, 3, 4))
    assert layer.compute_output_shape((None, 12)) == (None, 3, 4)
    with pytest.raises(ValueError, match="total size of new array must be unchanged"):
        tf.keras.layers.Reshape((5, 5))(x)


def test__activation_and_activation_layers():
    x = np.linspace(-3, 3, 12, dtype=np.float32).reshape(2, 6)
    np.testing.assert_allclose(tf.keras.layers.Activation("relu")(x).numpy(), np.maximum(x, 0))
    np.testing.assert_allclose(tf.keras.layers.ReLU(max_value=1.0)(x).numpy(), np.clip(x, 0, 1))
    np.testing.assert_allclose(tf.keras.layers.LeakyReLU()(x).numpy(), np.where(x > 0, x, 0.3 * x), rtol=1e-6)
    np.testing.assert_allclose(tf.keras.layers.Softmax()(x).numpy().sum(-1), [1.0, 1.0], rtol=1e-6)
    np.testing.assert_allclose(tf.keras.layers.Lambda(lambda t: t * 2.0)(x).numpy(), 2 * x)
    assert tf.keras.layers.Activation("tanh").get_config()["activation"] == "tanh"


# -- Dropout ------------------------------------------------------------------------------------------
def test__dropout__is_the_identity_at_inference():
    x = RNG.normal(size=(50, 40)).astype(np.float32)
    layer = tf.keras.layers.Dropout(0.5)
    for out in (layer(x), layer(x, training=False), tf.function(lambda t: layer(t), jit_compile=True)(x)):
        np.testing.assert_array_equal(out.numpy(), x)


def _check_dropped(out, x, rate):
    out = np.asarray(out)
    kept = out != 0
    assert abs(1 - kept.mean() - rate) < 0.05, kept.mean()
    np.testing.assert_allclose(out[kept], x[kept] / (1 - rate), rtol=1e-6)


def test__dropout__in_training_zeroes_about_rate_and_scales_the_rest():
    x = RNG.random((100, 50)).astype(np.float32) + 1.0
    layer = tf.keras.layers.Dropout(0.3, seed=1)
    first, second = layer(x, training=True).numpy(), layer(x, training=True).numpy()
    _check_dropped(first, x, 0.3)
    _check_dropped(second, x, 0.3)
    assert not np.array_equal(first != 0, second != 0)  # a new mask on every call
    np.testing.assert_array_equal(tf.keras.layers.Dropout(0.0)(x, training=True).numpy(), x)


def test__dropout__compiled_draws_a_new_mask_each_execution_and_iteration():
    x = RNG.random((60, 50)).astype(np.float32) + 1.0
    layer = tf.keras.layers.Dropout(0.5, seed=2)

    @tf.function(jit_compile=True)
    def twice(t):
        out = tf.zeros_like(t)
        first = tf.zeros_like(t)
        for i in tf.range(2):
            out = layer(t, training=True)
            if i == 0:
                first = out
        return first, out

    a, b = twice(x)
    c, _ = twice(x)
    for m in (a, b, c):
        _check_dropped(m.numpy(), x, 0.5)
    assert not np.array_equal(a.numpy() != 0, b.numpy() != 0)
    assert not np.array_equal(a.numpy() != 0, c.numpy() != 0)


def test__dropout__noise_shape_shares_the_mask_along_an_axis():
    x = np.ones((40, 30), np.float32)
    out = tf.keras.layers.Dropout(0.5, noise_shape=(None, 1), seed=4)(x, training=True).numpy()
    assert np.all((out == 0).all(axis=1) | (out == 2).all(axis=1))
    assert 0 < (out[:, 0] == 0).mean() < 1


# -- custom layers ------------------------------------------------------------------------------------
class Scale(tf.keras.layers.Layer):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.inner = tf.keras.layers.Dense(2, kernel_initializer="ones", use_bias=False)

    def build(self, input_shape):
        self.alpha = self.add_weight("alpha", shape=(), initializer=tf.keras.initializers.Constant(3.0))
        self.counter = self.add_weight("counter", shape=(), initializer="zeros", trainable=False)

    def call(self, inputs, training=None):
        y = self.inner(inputs) * self.alpha
        if training:
            y = y + 1.0
        return y


def test__custom_layer__tracks_its_weights_and_nested_layers():
    layer = Scale()
    out = layer(np.ones((1, 3), np.float32))
    np.testing.assert_allclose(out.numpy(), [[9.0, 9.0]])
    np.testing.assert_allclose(layer(np.ones((1, 3), np.float32), training=True).numpy(), [[10.0, 10.0]])
    assert [v.name for v in layer.trainable_weights] == ["scale/alpha:0", "scale/dense/kernel:0"]
    assert [v.name for v in layer.non_trainable_weights] == ["scale/counter:0"]
    assert layer.count_params() == 8


def test__custom_layer__in_a_compiled_function_with_a_tensor_condition():
    layer = Scale()

    @tf.function(jit_compile=True)
    def f(x, flag):
        return layer(x, training=flag)

    x = np.ones((1, 3), np.float32)
    np.testing.assert_allclose(f(x, tf.constant(True)).numpy(), [[10.0, 10.0]])
    np.testing.assert_allclose(f(x, tf.constant(False)).numpy(), [[9.0, 9.0]])
