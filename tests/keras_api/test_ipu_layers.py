"""Graphcore's IPU Keras layers (``ipu_tensorflow_addons.keras.layers``): LSTM and GRU give stock
Keras's outputs and gradients for the same weights, their dropout is Graphcore's (input features,
one mask for the whole sequence); Dropout, Embedding, SerialDense and the normalization layers
against NumPy references; Graphcore's checks and texts; and the same classes under
``ipu.keras.layers``."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import popjit.tensorflow as pj
from popjit import ipu
from popjit.errors import UnimplementedError
from popjit.ipu_tensorflow_addons.keras import layers as ipu_layers
from tests.keras_api.test_layers_vs_tf import _outputs_and_grads

RNG = np.random.default_rng(11)
X = RNG.normal(size=(2, 5, 3)).astype(np.float32)


def _close(got, want, tol=2e-5):
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=tol * max(1.0, float(np.abs(w).max())))


@pytest.mark.slow
@pytest.mark.parametrize(("name", "kwargs"), [
    ("LSTM", dict(units=4)),
    ("LSTM", dict(units=4, return_sequences=True, return_state=True, unit_forget_bias=False)),
    ("GRU", dict(units=4, return_sequences=True, return_state=True)),
    ("GRU", dict(units=4, reset_after=False)),
])
def test__popnn_recurrent_layers__equal_stock_keras_with_the_same_weights(real_tf, name, kwargs):
    theirs, ours = getattr(real_tf.keras.layers, name)(**kwargs), getattr(ipu_layers, name)(**kwargs)
    theirs(X)
    ours.build(X.shape)
    weights = [RNG.normal(size=w.shape).astype(np.float32) * 0.5 for w in theirs.get_weights()]
    theirs.set_weights(weights)
    ours.set_weights(weights)
    want_out, want_grads = _outputs_and_grads(real_tf, theirs, X, True)
    for compiled in (False, True):
        got_out, got_grads = _outputs_and_grads(pj, ours, X, True, compiled)
        _close(got_out + got_grads, want_out + want_grads)


def test__popnn_lstm__owns_graphcores_weights_and_takes_time_major_inputs_and_initial_state():
    layer = ipu_layers.LSTM(4, return_state=True, time_major=True)
    h0, c0 = RNG.normal(size=(2, 4)).astype(np.float32), RNG.normal(size=(2, 4)).astype(np.float32)
    out, h, c = layer(np.swapaxes(X, 0, 1), initial_state=(h0, c0))
    assert [w.name for w in layer.weights] == ["popnn_lstm/kernel:0", "popnn_lstm/recurrent_kernel:0",
                                               "popnn_lstm/biases:0"]
    assert ipu_layers.LSTM is ipu_layers.PopnnLSTM and ipu_layers.GRU is ipu_layers.PopnnGRU
    reference = pj.keras.layers.LSTM(4, return_state=True)
    reference.build(X.shape)
    reference.set_weights(layer.get_weights())
    want = reference(X, initial_state=[h0, c0])
    _close([out.numpy(), h.numpy(), c.numpy()], [w.numpy() for w in want])
    bias = layer.biases.numpy()
    np.testing.assert_array_equal(bias, np.r_[np.zeros(4), np.ones(4), np.zeros(8)])  # unit_forget_bias
    config = layer.get_config()
    assert ipu_layers.LSTM.from_config(config).get_config() == config


def test__popnn_lstm_dropout__drops_input_features_with_one_mask_for_the_whole_sequence():
    x = RNG.normal(size=(3, 6, 8)).astype(np.float32)
    layer = ipu_layers.LSTM(5, dropout=0.5, dropout_seed=[4, 2], return_sequences=True)
    layer.build(x.shape)
    pj.random.set_seed(0)
    trained = layer(x, training=True).numpy()
    pj.random.set_seed(0)  # the same first mask again, drawn directly
    mask = ipu.rand_ops.dropout(np.ones((3, 1, 8), np.float32), seed=[4, 2], rate=0.5).numpy()
    assert 0 < (mask == 0).sum() < mask.size
    _close([trained], [layer(x * mask, training=False).numpy()])
    inference = layer(x, training=False).numpy()
    np.testing.assert_array_equal(inference, layer(x).numpy())
    assert not np.allclose(inference, trained)
    assert not np.allclose(trained, layer(x, training=True).numpy())  # a new mask for the next call


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    (dict(activation="elu"), ValueError, r"IPU custom RNN layer does not support 'elu' as an activation\. Acceptable "
                                         r"value are \"tanh\",\"relu\",\"softmax\",\"sigmoid\",\"hard_sigmoid\""),
    (dict(recurrent_activation="relu"), ValueError, r"does not support 'relu' as a recurrent activation"),
    (dict(use_bias=False), ValueError, r"IPU custom LSTM layer does not support use_bias = False\."),
    (dict(kernel_regularizer="l2"), ValueError, r"IPU custom LSTM layer does not support kernel_regularizer\."),
    (dict(recurrent_dropout=0.1), ValueError, r"IPU custom LSTM layer does not support recurrent_dropout\."),
    (dict(go_backwards=True), ValueError, r"IPU custom LSTM layer does not support go_backwards = True\."),
    (dict(unroll=True), ValueError, r"IPU custom LSTM layer does not support unroll = True\."),
    (dict(dtype="float64"), ValueError, r"Only support float16, float32, provided <dtype: 'float64'>"),
    (dict(stateful=True), UnimplementedError, r"PopnnLSTM\(stateful=True\) is not supported by popjit"),
    (dict(partials_dtype=pj.float16), UnimplementedError,
     r"PopnnLSTM\(partials_dtype='float16'\) is not supported by popjit"),
    (dict(available_memory_proportion_fwd=0.3), UnimplementedError,
     r"PopnnLSTM\(available_memory_proportion_fwd=0\.3\) is not supported by popjit"),
])
def test__popnn_lstm__refuses_what_graphcores_refuses_and_what_popjit_cannot_honour(kwargs, error, message):
    with pytest.raises(error, match=message):
        ipu_layers.LSTM(4, **kwargs)


def test__popnn_layers__refuse_masks_and_inputs_that_are_not_sequences():
    layer = ipu_layers.GRU(3)
    with pytest.raises(NotImplementedError, match=r"ipu\.keras\.PopnnGRU does not support call argument mask\. It "
                                                  r"is included for API consistencywith keras\.PopnnGRU\."):
        layer(X, mask=np.ones((2, 5), bool))
    with pytest.raises(ValueError, match=r"Expecting input_shape with 3 dims, got 2"):
        ipu_layers.GRU(3)(X[0])
    with pytest.raises(ValueError, match=r"IPU custom GRU layer does not support recurrent_dropout != 0\."):
        ipu_layers.GRU(3, recurrent_dropout=0.5)


# -- Dropout, Embedding, SerialDense and the pass-through layers ---------------------------------------------


def test__ipu_dropout__drops_in_training_with_its_seed_and_is_the_identity_in_inference():
    x = np.ones((16, 32), np.float32)
    layer = ipu_layers.Dropout(0.25, seed=[1, 2])
    np.testing.assert_array_equal(layer(x).numpy(), x)
    pj.random.set_seed(0)
    y = layer(x, training=True).numpy()
    assert set(np.unique(y)) == {0.0, np.float32(1 / 0.75)}
    pj.random.set_seed(0)
    np.testing.assert_array_equal(y, ipu.rand_ops.dropout(x, seed=[1, 2], rate=0.25).numpy())
    shared = ipu_layers.Dropout(0.5, noise_shape=[16, 1])(x, training=True).numpy()
    assert (shared == shared[:, :1]).all()
    with pytest.raises(UnimplementedError, match=r"Dropout\(ref=False\) is not supported by popjit"):
        ipu_layers.Dropout(0.5, ref=False)


@given(factor=st.sampled_from([1, 2, 5]), seed=st.integers(0, 100))
def test__ipu_embedding__looks_up_rows_at_any_serialization_factor(factor, seed):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, 10, size=(3, 4)).astype(np.int32)
    layer = ipu_layers.Embedding(10, 3, serialization_factor=factor)
    out = layer(ids)
    np.testing.assert_array_equal(out.numpy(), layer.embeddings.numpy()[ids])
    assert layer.get_config()["serialization_factor"] == factor


def test__ipu_embedding__refuses_what_graphcores_refuses():
    for kwargs, name in ((dict(mask_zero=True), "mask_zero"), (dict(input_length=4), "input_length"),
                         (dict(embeddings_regularizer="l2"), "embeddings_regularizer")):
        with pytest.raises(NotImplementedError, match=rf"ipu\.keras\.Embedding does not support __init__ argument "
                                                      rf"{name}\."):
            ipu_layers.Embedding(10, 3, **kwargs)
    with pytest.raises(ValueError, match=r"The input shape should be a tensor of shape \[batch, input_length\]"):
        ipu_layers.Embedding(10, 3)(np.zeros((2, 3, 4), np.int32))


@pytest.mark.parametrize("dimension", ["input_columns", "input_rows_kernel_columns", "kernel_rows"])
def test__serial_dense__equals_dense_with_its_gradients(dimension):
    x = RNG.normal(size=(2, 4, 6)).astype(np.float32)
    serial = ipu_layers.SerialDense(4, 2, dimension, activation="tanh")
    dense = pj.keras.layers.Dense(4, activation="tanh")
    serial.build(x.shape)
    dense.build(x.shape)
    dense.set_weights(serial.get_weights())
    (got_out, got_grads), (want_out, want_grads) = (_outputs_and_grads(pj, layer, x, True) for layer in (serial, dense))
    _close(got_out + got_grads, want_out + want_grads)
    with pytest.raises(ValueError, match=r"Invalid serialization_dimension=rows, expected one of: 'input_columns', "
                                         r"'input_rows_kernel_columns', 'kernel_rows'\."):
        ipu_layers.SerialDense(4, 2, "rows")(x)


def test__recomputation_checkpoint_and_assume_equal__pass_values_through():
    x = RNG.normal(size=(2, 3)).astype(np.float32)
    for layer in (ipu_layers.RecomputationCheckpoint(), ipu_layers.AssumeEqualAcrossReplicas(inplace=True)):
        a, b = layer([x, 2 * x])
        np.testing.assert_array_equal(a.numpy(), x)
        np.testing.assert_array_equal(b.numpy(), 2 * x)


# -- normalization ----------------------------------------------------------------------------------------


def _group_norm(x, gamma, beta, groups, eps, strided):
    """NumPy group norm of channels-last ``x``: channel c in group c % groups (strided) or c // size."""
    channels = x.shape[-1]
    group_of = np.arange(channels) % groups if strided else np.arange(channels) // (channels // groups)
    out = np.empty_like(x, dtype=np.float64)
    for n in range(x.shape[0]):
        for g in range(groups):
            part = x[n][..., group_of == g].astype(np.float64)
            out[n][..., group_of == g] = (part - part.mean()) / np.sqrt(part.var() + eps)
    return out * gamma + beta


@given(groups=st.sampled_from([1, 2, 3, 6]), strided=st.booleans(), channels_first=st.booleans(),
       seed=st.integers(0, 1000))
def test__group_normalization__equals_numpy_in_both_groupings_and_layouts(groups, strided, channels_first, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(2, 3, 4, 6)).astype(np.float32) * 3 + 1
    layer = ipu_layers.GroupNormalization(groups=groups, strided_channel_grouping=strided,
                                          channels_axis=1 if channels_first else -1)
    inputs = np.moveaxis(x, -1, 1) if channels_first else x
    out = layer(inputs).numpy()
    gamma, beta = layer.gamma.numpy(), layer.beta.numpy()
    want = _group_norm(x, gamma, beta, groups, 1e-3, strided)
    np.testing.assert_allclose(np.moveaxis(out, 1, -1) if channels_first else out, want, rtol=1e-4, atol=1e-4)


def test__group_normalization__gradient_equals_finite_differences():
    x = np.random.default_rng(3).normal(size=(2, 2, 4)).astype(np.float64)
    layer = ipu_layers.GroupNormalization(groups=2, dtype="float64", gamma_initializer="ones")
    up = np.linspace(-1, 1, x.size).reshape(x.shape)
    xv = pj.Variable(x)
    with pj.GradientTape() as tape:
        loss = pj.reduce_sum(layer(xv) * up)
    grad = tape.gradient(loss, xv).numpy()
    gamma, beta = layer.gamma.numpy(), layer.beta.numpy()
    numeric = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        for sign in (1, -1):
            shifted = x.copy()
            shifted[i] += sign * 1e-6
            numeric[i] += sign * (_group_norm(shifted, gamma, beta, 2, 1e-3, True) * up).sum() / 2e-6
    np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-6)


def test__group_and_instance_normalization__default_and_checked_as_graphcores():
    layer = ipu_layers.InstanceNormalization()
    x = np.random.default_rng(5).normal(size=(2, 5, 4)).astype(np.float32)
    out = layer(x).numpy()
    np.testing.assert_allclose(out, _group_norm(x, layer.gamma.numpy(), layer.beta.numpy(), 4, 1e-3, True),
                               rtol=1e-4, atol=1e-4)
    assert np.abs(layer.gamma.numpy()).max() <= np.sqrt(6 / 8)  # Keras's glorot_uniform default for 1-D
    assert len(np.unique(layer.gamma.numpy())) == 4
    for kwargs, message in ((dict(groups=5), r"Invalid groups 5 for 4 channels\."),
                            (dict(groups=3), r"4 channels is not commensurate with 3 groups\."),
                            (dict(channels_axis=2, groups=1),
                             r"Unsupported data format, group norm only supports NCHW\(channel axis 1\) and NHWC "
                             r"\(channel axis -1\)\."),
                            (dict(channels_axis=4), r"Axis is out of bounds\.")):
        with pytest.raises(ValueError, match=message):
            ipu_layers.GroupNormalization(**kwargs)(np.ones((2, 3, 3, 4), np.float32))


@pytest.mark.parametrize("axis", [-1, [1, 2]])
def test__ipu_layer_normalization__equals_stock_keras_layer_normalization(real_tf, axis):
    x = RNG.normal(size=(3, 4, 5)).astype(np.float32) * 2 + 1
    ours = ipu_layers.LayerNormalization(axis=axis)
    theirs = real_tf.keras.layers.LayerNormalization(axis=axis, epsilon=1e-3)
    ours(x)
    theirs(x)
    weights = [RNG.normal(size=w.shape).astype(np.float32) for w in theirs.get_weights()]
    theirs.set_weights(weights)
    ours.set_weights([w.reshape(-1) for w in weights])  # Graphcore's gamma and beta are flat vectors
    want_out, want_grads = _outputs_and_grads(real_tf, theirs, x, True)
    got_out, got_grads = _outputs_and_grads(pj, ours, x, True)
    _close(got_out + got_grads[:1], want_out + want_grads[:1])
    _close(got_grads[1:], [g.reshape(-1) for g in want_grads[1:]])
    with pytest.raises(NotImplementedError, match=r"ipu\.keras\.LayerNormalization does not support __init__ "
                                                  r"argument gamma_regularizer\."):
        ipu_layers.LayerNormalization(gamma_regularizer="l2")


def test__the_layers__are_the_same_classes_under_graphcores_other_spellings():
    from popjit.tensorflow.python.ipu.keras import layers as sdk25

    for name in ("Dropout", "Embedding", "LSTM", "GRU", "PopnnLSTM", "GroupNorm", "LayerNorm", "InstanceNorm",
                 "LayerNormalization", "SerialDense"):
        assert getattr(sdk25, name) is getattr(ipu_layers, name) is getattr(ipu.layers, name)
    for missing in ("CTCLoss", "EffectiveTransformer", "CTCInferenceLayer"):
        with pytest.raises(UnimplementedError, match=rf"ipu_tensorflow_addons\.keras\.layers\.{missing} is not "
                                                     "implemented by popjit"):
            getattr(ipu_layers, missing)
