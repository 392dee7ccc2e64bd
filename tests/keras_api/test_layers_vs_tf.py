"""The convolution, pooling, normalization, reshaping, embedding, recurrent and attention layers
give stock TensorFlow's outputs and gradients (inputs and weights) for the same weights, eagerly
and compiled, in inference and training mode; models built from them train to TensorFlow's numbers
with ``fit``."""

from __future__ import annotations

import numpy as np
import pytest

import popjit.tensorflow as pj

CASES = [
    ("Conv2D", dict(filters=4, kernel_size=3, strides=2, padding="same", activation="relu"), (2, 9, 8, 3)),
    ("Conv2D", dict(filters=4, kernel_size=(3, 2), dilation_rate=2), (2, 9, 8, 3)),
    ("Conv2D", dict(filters=6, kernel_size=3, groups=3), (2, 9, 8, 6)),
    ("Conv1D", dict(filters=5, kernel_size=3, padding="causal", dilation_rate=2), (2, 10, 3)),
    ("Conv1D", dict(filters=5, kernel_size=3, strides=2, padding="same"), (2, 10, 3)),
    ("Conv3D", dict(filters=2, kernel_size=2), (1, 4, 4, 4, 2)),
    # 64 input channels: compiled, the input gradient is a convolution of dy (graph/passes/conv_gradient.py)
    ("Conv2D", dict(filters=8, kernel_size=3, padding="same"), (2, 6, 5, 64)),
    ("Conv1D", dict(filters=4, kernel_size=3, padding="causal", dilation_rate=2), (2, 9, 64)),
    ("Conv2DTranspose", dict(filters=3, kernel_size=3, strides=2, padding="same"), (2, 5, 4, 3)),
    ("Conv2DTranspose", dict(filters=3, kernel_size=3, strides=2, padding="valid", output_padding=1), (2, 5, 4, 3)),
    ("Conv1DTranspose", dict(filters=3, kernel_size=4, strides=2, padding="same"), (2, 5, 3)),
    ("DepthwiseConv2D", dict(kernel_size=3, depth_multiplier=2, padding="same"), (2, 6, 6, 3)),
    ("SeparableConv2D", dict(filters=4, kernel_size=3, depth_multiplier=2), (2, 6, 6, 3)),
    ("SeparableConv1D", dict(filters=4, kernel_size=3, padding="same"), (2, 7, 3)),
    ("MaxPooling2D", dict(pool_size=3, strides=2, padding="same"), (2, 7, 7, 3)),
    ("AveragePooling2D", dict(pool_size=3, strides=2, padding="same"), (2, 7, 7, 3)),
    ("MaxPooling1D", dict(pool_size=2), (2, 7, 3)),
    ("AveragePooling1D", dict(pool_size=3, strides=1, padding="same"), (2, 7, 3)),
    ("GlobalAveragePooling2D", dict(), (2, 5, 5, 3)),
    ("GlobalMaxPooling1D", dict(), (2, 5, 3)),
    ("BatchNormalization", dict(), (4, 5, 5, 3)),
    ("LayerNormalization", dict(), (4, 5, 6)),
    ("LayerNormalization", dict(axis=[1, 2]), (4, 5, 6)),
    ("Permute", dict(dims=(2, 1)), (2, 3, 4)),
    ("RepeatVector", dict(n=3), (2, 4)),
    ("ZeroPadding2D", dict(padding=((1, 2), (0, 1))), (2, 3, 3, 2)),
    ("Cropping2D", dict(cropping=((1, 0), (1, 1))), (2, 4, 5, 2)),
    ("UpSampling2D", dict(size=(2, 3)), (2, 3, 3, 2)),
    ("UpSampling1D", dict(size=2), (2, 3, 2)),
    ("SimpleRNN", dict(units=4, return_sequences=True), (2, 5, 3)),
    ("LSTM", dict(units=4), (2, 5, 3)),
    ("LSTM", dict(units=4, return_sequences=True, return_state=True, go_backwards=True), (2, 5, 3)),
    ("GRU", dict(units=4, return_sequences=True), (2, 5, 3)),
    ("GRU", dict(units=4, reset_after=False), (2, 5, 3)),
    ("Rescaling", dict(scale=1 / 255.0, offset=-1), (2, 3)),
]


def _flat(lib, value):
    return [np.asarray(v) for v in lib.nest.flatten(value)]


def _outputs_and_grads(lib, layer, x, training, compiled=False):
    xv = lib.Variable(x)

    def step():
        with lib.GradientTape() as tape:
            out = layer(xv, training=training)
            loss = sum(lib.reduce_sum(v * v) for v in lib.nest.flatten(out))
        return out, tape.gradient(loss, [xv, *layer.trainable_weights])

    if compiled:
        step = lib.function(step, jit_compile=True)
    out, grads = step()
    return _flat(lib, out), [np.asarray(g) for g in grads]


def _twin_layers(real_tf, name, kwargs, x):
    theirs, ours = getattr(real_tf.keras.layers, name)(**kwargs), getattr(pj.keras.layers, name)(**kwargs)
    theirs(x)
    ours(x)
    rng = np.random.default_rng(len(name))
    weights = [rng.normal(size=w.shape).astype(np.float32) * 0.5 for w in theirs.get_weights()]
    if name == "BatchNormalization":
        weights[3] = np.abs(weights[3]) + 0.5  # a positive moving variance
    theirs.set_weights(weights)
    ours.set_weights(weights)
    assert [tuple(w.shape) for w in ours.weights] == [tuple(w.shape) for w in theirs.weights]
    return ours, theirs


@pytest.mark.parametrize("training", [False, True], ids=["inference", "training"])
@pytest.mark.parametrize(("name", "kwargs", "shape"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test__layer__outputs_and_gradients_equal_tensorflows(real_tf, name, kwargs, shape, training):
    x = np.random.default_rng(0).normal(size=shape).astype(np.float32)
    ours, theirs = _twin_layers(real_tf, name, kwargs, x)
    expected_out, expected_grads = _outputs_and_grads(real_tf, theirs, x, training)
    for compiled in (False, True):
        out, grads = _outputs_and_grads(pj, ours, x, training, compiled)
        for got, want in zip(out + grads, expected_out + expected_grads):
            scale = max(1.0, float(np.abs(want).max()))
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-5 * scale)


def test__multi_head_attention__with_a_mask_equals_tensorflows(real_tf):
    rng = np.random.default_rng(1)
    query, value = rng.normal(size=(2, 5, 8)).astype(np.float32), rng.normal(size=(2, 6, 8)).astype(np.float32)
    mask = rng.random((2, 5, 6)) > 0.3
    for kwargs in (dict(num_heads=2, key_dim=3), dict(num_heads=3, key_dim=2, value_dim=4, output_shape=5)):
        theirs, ours = real_tf.keras.layers.MultiHeadAttention(**kwargs), pj.keras.layers.MultiHeadAttention(**kwargs)
        expected = theirs(query, value, attention_mask=mask).numpy()
        ours(query, value, attention_mask=mask)
        ours.set_weights(theirs.get_weights())
        assert [w.name.split("/", 1)[1] for w in ours.weights][:2] == ["query/kernel:0", "query/bias:0"]
        compiled = pj.function(lambda q, v, layer=ours: layer(q, v, attention_mask=mask), jit_compile=True)
        for got in (ours(query, value, attention_mask=mask).numpy(), compiled(query, value).numpy()):
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test__embedding_and_bidirectional__equal_tensorflows(real_tf):
    rng = np.random.default_rng(2)
    ids = rng.integers(0, 10, (2, 4)).astype(np.int32)
    make = lambda k: k.keras.Sequential([  # noqa: E731
        k.keras.layers.Embedding(10, 3),
        k.keras.layers.Bidirectional(k.keras.layers.LSTM(4, return_sequences=True)),
        k.keras.layers.Bidirectional(k.keras.layers.GRU(2), merge_mode="sum")])
    theirs, ours = make(real_tf), make(pj)
    expected = theirs(ids).numpy()
    ours(ids)
    ours.set_weights(theirs.get_weights())
    np.testing.assert_allclose(ours(ids).numpy(), expected, rtol=1e-5, atol=1e-6)
    assert ours.weights[1].name == "bidirectional/forward_lstm/lstm_cell/kernel:0"


def _cnn(k):
    return k.keras.Sequential([
        k.keras.layers.Conv2D(4, 3, activation="relu", kernel_regularizer=k.keras.regularizers.l2(1e-3)),
        k.keras.layers.BatchNormalization(),
        k.keras.layers.MaxPooling2D(),
        k.keras.layers.Conv2D(4, 3, padding="same", activation="relu"),
        k.keras.layers.GlobalAveragePooling2D(),
        k.keras.layers.Dropout(0.0),
        k.keras.layers.Dense(3)])


def _lstm(k):
    return k.keras.Sequential([k.keras.layers.Embedding(12, 4), k.keras.layers.LSTM(5, return_sequences=True),
                               k.keras.layers.GRU(3), k.keras.layers.Dense(3)])


@pytest.mark.parametrize("where", ["host", "ipu"])
@pytest.mark.parametrize(("make", "shape"), [(_cnn, (48, 8, 8, 2)), (_lstm, (48, 6))], ids=["cnn", "rnn"])
def test__models_of_these_layers__fit_to_tensorflows_numbers(real_tf, make, shape, where):
    from popjit.tensorflow.python import ipu

    rng = np.random.default_rng(3)
    x = rng.normal(size=shape).astype(np.float32) if len(shape) > 2 else rng.integers(0, 12, shape).astype(np.int32)
    y = rng.integers(0, 3, shape[0]).astype(np.int32)
    theirs = make(real_tf)
    theirs(x[:2])
    scope = ipu.ipu_strategy.IPUStrategy().scope() if where == "ipu" else __import__("contextlib").nullcontext()
    with scope:
        ours = make(pj)
        ours(x[:2])
        ours.set_weights(theirs.get_weights())
        for lib, model in ((pj, ours), (real_tf, theirs)):
            model.compile(lib.keras.optimizers.SGD(0.05, momentum=0.9),
                          lib.keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"],
                          steps_per_execution=3 if lib is pj and where == "ipu" else 1)
        got = ours.fit(x, y, batch_size=16, epochs=3, shuffle=False, verbose=0).history
    expected = theirs.fit(x, y, batch_size=16, epochs=3, shuffle=False, verbose=0).history
    np.testing.assert_allclose(got["loss"], expected["loss"], rtol=2e-4)
    np.testing.assert_allclose(got["accuracy"], expected["accuracy"], rtol=1e-6)
    for a, b in zip(ours.get_weights(), theirs.get_weights()):  # moving statistics included
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4)
