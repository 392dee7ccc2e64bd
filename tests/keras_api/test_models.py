"""Keras models: Sequential (lazy and eager building), functional Model, subclassed Model; weights
in Keras order, summaries, configs; models on the IPU through IPUStrategy; end-to-end training."""

from __future__ import annotations

import numpy as np
import pytest

import popjit.tensorflow as tf
from popjit.tensorflow.python import ipu

RNG = np.random.default_rng(1)


def _mlp_numpy(x, weights, activations):
    h = x.reshape(len(x), -1).astype(np.float64)
    for (w, b), act in zip(zip(weights[::2], weights[1::2]), activations):
        h = act(h @ w + b)
    return h


RELU = lambda h: np.maximum(h, 0)  # noqa: E731
LINEAR = lambda h: h  # noqa: E731


def _seed_model():
    return tf.keras.Sequential([
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(16, activation="relu"),
        tf.keras.layers.Dense(8, activation="relu"),
        tf.keras.layers.Dense(10),
    ])


# -- Sequential -------------------------------------------------------------------------------------
def test__sequential__builds_lazily_on_the_first_call_and_matches_numpy():
    model = _seed_model()
    assert not model.built
    with pytest.raises(ValueError, match="have not yet been created"):
        _ = model.weights
    with pytest.raises(ValueError, match="not yet been built"):
        model.summary()
    x = RNG.random((4, 5, 6)).astype(np.float32)
    out = model(x)
    assert out.shape == (4, 10) and model.built
    weights = [RNG.normal(size=w.shape).astype(np.float32) * 0.3 for w in model.get_weights()]
    model.set_weights(weights)
    expected = _mlp_numpy(x, weights, [RELU, RELU, LINEAR])
    np.testing.assert_allclose(model(x).numpy(), expected, rtol=1e-4, atol=1e-5)
    compiled = tf.function(lambda t: model(t, training=False), jit_compile=True)
    np.testing.assert_allclose(compiled(x).numpy(), expected, rtol=1e-4, atol=1e-5)
    assert [v.name for v in model.trainable_variables] == [
        "dense/kernel:0", "dense/bias:0", "dense_1/kernel:0", "dense_1/bias:0", "dense_2/kernel:0", "dense_2/bias:0"]
    assert [w.shape for w in model.get_weights()] == [(30, 16), (16,), (16, 8), (8,), (8, 10), (10,)]
    assert model.count_params() == 30 * 16 + 16 + 16 * 8 + 8 + 8 * 10 + 10
    assert model.layers[0].name == "flatten" and len(model.layers) == 4


def test__sequential__summary_is_kerass_table():
    model = _seed_model()
    model.build((None, 28, 28))
    lines = []
    model.summary(print_fn=lines.append)
    assert lines == [
        'Model: "sequential"',
        "_" * 65,
        "Layer (type)                 Output Shape              Param #   ",
        "=" * 65,
        "flatten (Flatten)            (None, 784)               0         ",
        "_" * 65,
        "dense (Dense)                (None, 16)                12560     ",
        "_" * 65,
        "dense_1 (Dense)              (None, 8)                 136       ",
        "_" * 65,
        "dense_2 (Dense)              (None, 10)                90        ",
        "=" * 65,
        "Total params: 12,786",
        "Trainable params: 12,786",
        "Non-trainable params: 0",
        "_" * 65,
    ]


def test__sequential__with_an_input_shape_builds_at_once():
    model = tf.keras.Sequential([tf.keras.layers.Dense(4, input_shape=(3,)), tf.keras.layers.Dense(2)])
    assert model.built and [layer.name for layer in model.layers] == ["dense", "dense_1"]
    assert model.output_shape == (None, 2) and model.inputs[0].shape == (None, 3)
    other = tf.keras.Sequential()
    other.add(tf.keras.Input(shape=(5,)))
    other.add(tf.keras.layers.Dense(3))
    assert other.built and other.layers[0].kernel.shape == (5, 3)
    with pytest.raises(TypeError, match="must be an instance of class Layer"):
        other.add("dense")
    with pytest.raises(ValueError, match="unique names"):
        other.add(tf.keras.layers.Dense(1, name=other.layers[0].name))


def test__sequential__passes_the_training_flag_to_dropout():
    model = tf.keras.Sequential([tf.keras.layers.Dropout(0.5, seed=1), tf.keras.layers.Activation("linear")])
    x = np.ones((40, 40), np.float32)
    np.testing.assert_array_equal(model(x).numpy(), x)
    np.testing.assert_array_equal(model(x, training=False).numpy(), x)
    dropped = model(x, training=True).numpy()
    assert set(np.unique(dropped)) == {0.0, 2.0}


def test__sequential_config__round_trips_to_a_new_model():
    model = tf.keras.Sequential([tf.keras.layers.Dense(4, activation="relu", input_shape=(3,)),
                                 tf.keras.layers.Dropout(0.2), tf.keras.layers.Dense(1)], name="net")
    config = model.get_config()
    assert [c["class_name"] for c in config["layers"]] == ["InputLayer", "Dense", "Dropout", "Dense"]
    clone = tf.keras.Sequential.from_config(config)
    assert clone.built and [w.shape for w in clone.get_weights()] == [w.shape for w in model.get_weights()]
    assert clone.get_config() == config
    assert tf.keras.models.clone_model(model).count_params() == model.count_params()


# -- functional ------------------------------------------------------------------------------------
def test__functional_model__with_two_inputs_matches_numpy():
    a = tf.keras.Input(shape=(3,), name="a")
    b = tf.keras.Input(shape=(2,), name="b")
    h = tf.keras.layers.Concatenate()([tf.keras.layers.Dense(4, activation="relu")(a), b])
    out = tf.keras.layers.Dense(1)(h)
    model = tf.keras.Model(inputs=[a, b], outputs=out)
    assert [layer.name for layer in model.layers] == ["a", "b", "dense", "concatenate", "dense_1"]
    assert out.shape == (None, 1) and h.shape == (None, 6)
    w1, b1, w2, b2 = [RNG.normal(size=w.shape).astype(np.float32) for w in model.get_weights()]
    model.set_weights([w1, b1, w2, b2])
    xa, xb = RNG.random((5, 3)).astype(np.float32), RNG.random((5, 2)).astype(np.float32)
    expected = np.concatenate([np.maximum(xa @ w1 + b1, 0), xb], -1) @ w2 + b2
    np.testing.assert_allclose(model([xa, xb]).numpy(), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(model({"a": xa, "b": xb}).numpy(), expected, rtol=1e-5, atol=1e-6)
    lines = []
    model.summary(print_fn=lines.append)
    assert lines[2].split() == ["Layer", "(type)", "Output", "Shape", "Param", "#", "Connected", "to"]
    assert any("concatenate (Concatenate)" in line and "dense[0][0]" in line for line in lines)
    assert any(line.strip() == "b[0][0]" for line in lines)
    assert lines[-3:-1] == ["Trainable params: 23", "Non-trainable params: 0"]


def test__functional_model__nests_and_supports_tensor_arithmetic():
    inp = tf.keras.Input(shape=(4,))
    inner = tf.keras.Model(inp, tf.keras.layers.Dense(2, kernel_initializer="ones", use_bias=False)(inp))
    x = tf.keras.Input(shape=(4,))
    y = inner(x) * 2.0 + 1.0
    outer = tf.keras.Model(x, y)
    assert y.shape == (None, 2)
    data = np.arange(8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_allclose(outer(data).numpy(), np.repeat(data.sum(-1, keepdims=True), 2, -1) * 2 + 1)
    assert outer.count_params() == 8 and len(outer.trainable_variables) == 1


def test__functional_model__rejects_inputs_not_from_keras_input():
    x = tf.keras.Input(shape=(2,))
    h = tf.keras.layers.Dense(2)(x)
    with pytest.raises(ValueError, match=r"must come from `tf\.keras\.Input`"):
        tf.keras.Model(h, tf.keras.layers.Dense(1)(h))
    other = tf.keras.Input(shape=(2,))
    with pytest.raises(ValueError, match="Graph disconnected"):
        tf.keras.Model(other, tf.keras.layers.Add()([h, other]))
    with pytest.raises(TypeError, match="symbolic input"):
        np.asarray(x)


# -- subclassed ------------------------------------------------------------------------------------
class TwoLayer(tf.keras.Model):
    def __init__(self):
        super().__init__()
        self.hidden = tf.keras.layers.Dense(8, activation="relu")
        self.drop = tf.keras.layers.Dropout(0.5, seed=3)
        self.out = tf.keras.layers.Dense(3)

    def call(self, x, training=None):
        h = self.drop(self.hidden(x))  # Dropout inherits `training` from this call
        if tf.reduce_sum(x) > 1e6:  # a tensor condition: autograph makes it a graph conditional
            h = h * 0.0
        return self.out(h)


def test__subclassed_model__tracks_layers_names_weights_and_training():
    model = TwoLayer()
    assert model.name == "two_layer"
    x = RNG.random((6, 5)).astype(np.float32)
    out = model(x)
    assert out.shape == (6, 3)
    assert [v.name for v in model.trainable_variables] == [
        "two_layer/dense/kernel:0", "two_layer/dense/bias:0", "two_layer/dense_1/kernel:0", "two_layer/dense_1/bias:0"]
    assert [layer.name for layer in model.layers] == ["dense", "dropout", "dense_1"]
    np.testing.assert_array_equal(model(x, training=False).numpy(), out.numpy())
    assert not np.array_equal(model(x, training=True).numpy(), out.numpy())
    compiled = tf.function(lambda t: model(t), jit_compile=True)
    np.testing.assert_allclose(compiled(x).numpy(), out.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(compiled(x * 1e6).numpy(), model(x * 1e6).numpy(), rtol=1e-5)
    lines = []
    model.summary(print_fn=lines.append)
    assert "Total params: 75" in lines


def test__subclassed_model__build_with_a_shape_creates_weights_without_running():
    model = TwoLayer()
    model.build((None, 7))
    assert model.built and model.hidden.kernel.shape == (7, 8)
    assert model.get_weights()[0].shape == (7, 8)


# -- on the IPU ------------------------------------------------------------------------------------
def test__model_built_inside_strategy_run__has_its_variables_on_the_ipu():
    strategy = ipu.ipu_strategy.IPUStrategy()
    with strategy.scope():
        model = _seed_model()

    @tf.function(jit_compile=True)
    def forward(x):
        return model(x, training=False)

    x = RNG.random((4, 3, 3)).astype(np.float32)
    out = strategy.run(forward, args=(x,))
    assert out.device.endswith("/device:IPU:0")
    assert all(v.device.endswith("/device:IPU:0") for v in model.variables)
    np.testing.assert_allclose(out.numpy(), _mlp_numpy(x, model.get_weights(), [RELU, RELU, LINEAR]),
                               rtol=1e-4, atol=1e-5)
    eager = tf.keras.Sequential([tf.keras.layers.Dense(2, input_shape=(3,))])
    assert all(v.device.endswith("/device:CPU:0") for v in eager.variables)


def test__model_created_in_scope_and_built_eagerly_later__stays_on_the_ipu():
    with ipu.ipu_strategy.IPUStrategy().scope():
        model = tf.keras.Sequential([tf.keras.layers.Dense(2)])
    model(np.ones((1, 3), np.float32))
    assert all(v.device.endswith("/device:IPU:0") for v in model.variables)


def test__training_end_to_end__loss_falls_over_20_compiled_steps():
    assert hasattr(tf, "GradientTape"), "tf.GradientTape is needed for training"
    rng = np.random.default_rng(5)
    x = rng.random((32, 784), dtype=np.float32)
    y = rng.integers(0, 10, size=32).astype(np.int32)
    strategy = ipu.ipu_strategy.IPUStrategy()
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.layers.Dense(32, activation="relu"), tf.keras.layers.Dense(10)])
        opt = tf.keras.optimizers.SGD(0.05)
        model.build((None, 784))
    # why: fixed initial weights, so the outcome does not depend on which tests drew random numbers first
    model.set_weights([rng.normal(size=w.shape).astype(np.float32) * 0.2 for w in model.get_weights()])

    def training_step(features, labels):
        with tf.GradientTape() as tape:
            logits = model(features, training=True)
            loss = tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    @tf.function(jit_compile=True)
    def training_loop(features, labels):
        first = tf.constant(0.0)
        last = tf.constant(0.0)
        for i in tf.range(20):
            last = training_step(features, labels)
            if i == 0:
                first = last
        return first, last

    first, last = strategy.run(training_loop, args=(x, y))
    assert np.isfinite(float(last)) and float(last) < 0.8 * float(first), (float(first), float(last))
    assert int(opt.iterations.numpy()) == 20
    assert all(v.device.endswith("/device:IPU:0") for v in model.variables + opt.weights)
    # the weights the device trained are the ones the host sees, and give the loss the loop reported
    logits = _mlp_numpy(x, model.get_weights(), [RELU, LINEAR])
    logp = logits - logits.max(-1, keepdims=True)
    logp = logp - np.log(np.exp(logp).sum(-1, keepdims=True))
    assert -logp[np.arange(32), y].mean() < float(last)
