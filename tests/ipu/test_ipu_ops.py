"""Graphcore's op modules: ``ipu.rand_ops.dropout``, ``ipu.nn_ops`` (gelu, swish, hard_sigmoid),
``ipu.embedding_ops.embedding_lookup`` and ``ipu.math_ops.serialized_matmul``, each against a NumPy
reference with its gradient, Graphcore's checks and texts, and the names popjit lacks."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import popjit.tensorflow as tf
from popjit import ipu
from popjit.errors import UnimplementedAPIError, UnimplementedError

shapes = st.lists(st.integers(1, 5), min_size=1, max_size=3).map(tuple)


def _value_and_grad(fn, x, upstream):
    """``fn(x)`` and the gradient of ``sum(fn(x) * upstream)`` with respect to ``x``."""
    xv = tf.Variable(x)
    with tf.GradientTape() as tape:
        y = fn(xv)
        loss = tf.reduce_sum(y * upstream)
    return y.numpy(), tape.gradient(loss, xv).numpy()


def _gelu_tanh(x):
    inner = math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)
    return 0.5 * x * (1 + np.tanh(inner))


def _gelu_erf(x):
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


NN_OPS = [
    # (name, kwargs, NumPy value, NumPy derivative)
    ("gelu", {}, _gelu_tanh, None),
    ("gelu", {"approximate": False}, _gelu_erf,
     lambda x: 0.5 * (1 + np.vectorize(math.erf)(x / math.sqrt(2))) + x * np.exp(-x * x / 2) / math.sqrt(2 * math.pi)),
    ("swish", {}, lambda x: x / (1 + np.exp(-x)),
     lambda x: (s := 1 / (1 + np.exp(-x))) + x * s * (1 - s)),
    ("hard_sigmoid", {}, lambda x: np.clip(0.2 * x + 0.5, 0, 1), lambda x: np.where(np.abs(x) < 2.5, 0.2, 0.0)),
]


@pytest.mark.parametrize(("name", "kwargs", "reference", "derivative"), NN_OPS,
                         ids=[f"{c[0]}{c[1]}" for c in NN_OPS])
@given(shape=shapes, data=st.data())
def test__nn_ops__equal_numpy_with_their_gradients(name, kwargs, reference, derivative, shape, data):
    x = data.draw(st.lists(st.floats(-4, 4, width=32), min_size=math.prod(shape), max_size=math.prod(shape)))
    x = np.asarray(x, np.float32).reshape(shape)
    x[np.isclose(np.abs(x), 2.5, atol=1e-3)] = 0.0  # hard_sigmoid's kinks
    up = np.linspace(-1, 1, x.size, dtype=np.float32).reshape(shape)
    y, g = _value_and_grad(lambda v: getattr(ipu.nn_ops, name)(v, **kwargs), x, up)
    np.testing.assert_allclose(y, reference(x.astype(np.float64)), rtol=1e-5, atol=1e-6)
    if derivative is None:  # the tanh form's derivative, by central differences in float64
        h = 1e-6
        derivative = lambda v: (reference(v + h) - reference(v - h)) / (2 * h)  # noqa: E731
    np.testing.assert_allclose(g, up * derivative(x.astype(np.float64)), rtol=1e-4, atol=1e-5)


def test__nn_ops__are_the_same_functions_under_every_spelling():
    assert ipu.ops.nn_ops.gelu is ipu.nn_ops.gelu
    from popjit.tensorflow.python.ipu import nn_ops

    assert nn_ops.swish is ipu.nn_ops.swish
    for name in ("multi_conv", "ctc_loss_v2", "sampled_softmax_loss"):
        with pytest.raises(UnimplementedAPIError, match=rf"ipu\.nn_ops\.{name} is not implemented by popjit"):
            getattr(ipu.nn_ops, name)


# -- rand_ops.dropout -----------------------------------------------------------------------------------------


@given(shape=shapes, rate=st.sampled_from([0.0, 0.25, 0.5, 0.9]), seed=st.integers(0, 2**31 - 1))
def test__dropout__zeroes_or_scales_each_element_and_its_gradient_is_the_mask(shape, rate, seed):
    x = np.random.default_rng(seed).uniform(0.5, 2.0, size=shape).astype(np.float32)
    up = np.ones(shape, np.float32)
    y, g = _value_and_grad(lambda v: ipu.rand_ops.dropout(v, seed=[seed, 7], rate=rate), x, up)
    kept = y != 0
    np.testing.assert_allclose(y[kept], x[kept] / (1 - rate), rtol=1e-6)
    np.testing.assert_allclose(g, kept / np.float32(1 - rate), rtol=1e-6)  # d(x * mask / keep) / dx


def test__dropout__keeps_one_minus_rate_of_the_elements_and_shares_a_decision_over_noise_shape():
    x = np.ones((64, 16, 32), np.float32)
    y = ipu.rand_ops.dropout(x, seed=[1, 2], rate=0.3).numpy()
    assert abs((y != 0).mean() - 0.7) < 0.01
    y = ipu.rand_ops.dropout(x, seed=[1, 2], rate=0.3, noise_shape=[64, 1, 32]).numpy()
    assert (y == y[:, :1, :]).all()  # one decision for the whole middle axis
    assert abs((y[:, 0, :] != 0).mean() - 0.7) < 0.03


def test__a_seeded_dropout__is_reproducible_yet_new_on_every_call_and_execution():
    x = np.ones((8, 64), np.float32)

    def masks(n):
        tf.random.set_seed(3)
        return [ipu.rand_ops.dropout(x, seed=[5, 6], rate=0.5).numpy() for _ in range(n)]

    first, again = masks(2), masks(2)
    np.testing.assert_array_equal(first[0], again[0])
    np.testing.assert_array_equal(first[1], again[1])
    assert (first[0] != first[1]).any()
    other = ipu.rand_ops.dropout(x, seed=[5, 6], rate=0.5, seed_modifier=2).numpy()
    assert (other != first[0]).any() and (other != first[1]).any()

    strategy = ipu.ipu_strategy.IPUStrategy()
    step = tf.function(lambda: ipu.rand_ops.dropout(x, seed=[5, 6], rate=0.5), jit_compile=True)
    with strategy.scope():
        runs = [strategy.run(step).numpy() for _ in range(2)]
    assert (runs[0] != runs[1]).any()  # the program advances its stream
    assert abs((runs[0] != 0).mean() - 0.5) < 0.05


@pytest.mark.parametrize(("kwargs", "message"), [
    (dict(rate=1.0), r"The rate must be in the range \[0, 1\), but was 1\.0"),
    (dict(rate=-0.1), r"The rate must be in the range \[0, 1\), but was -0\.1"),
    (dict(seed=[1, 2, 3]), r"Expected the seed to have a shape \[2\], but got \(3,\)\."),
    (dict(noise_shape=[4, 1]), r"The length of noise_shape must equal the rank of x\."),
    (dict(noise_shape=[4, 1, 3]), r"Dimension mismatch, 5 != 3\."),
])
def test__dropout__checks_its_arguments_with_graphcores_texts(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ipu.rand_ops.dropout(np.ones((4, 2, 5), np.float32), **kwargs)


# -- embedding_ops.embedding_lookup and math_ops.serialized_matmul ----------------------------------------


@given(rows=st.sampled_from([4, 6, 12]), width=st.integers(1, 4), ids_shape=shapes,
       factor=st.sampled_from([1, 2, 3]), seed=st.integers(0, 1000))
def test__embedding_lookup__gathers_rows_and_scatters_its_gradient_at_any_serialization(rows, width, ids_shape,
                                                                                        factor, seed):
    rng = np.random.default_rng(seed)
    params = rng.normal(size=(rows, width)).astype(np.float32)
    ids = rng.integers(0, rows, size=ids_shape).astype(np.int32)
    up = rng.normal(size=ids_shape + (width,)).astype(np.float32)
    if rows % factor:
        with pytest.raises(ValueError, match=rf"The serialization_factor \({factor}\) must divide the size of the "
                                             rf"0th dimension of params \({rows}\)\."):
            ipu.embedding_ops.embedding_lookup(params, ids, serialization_factor=factor)
        return
    y, g = _value_and_grad(lambda p: ipu.embedding_ops.embedding_lookup(p, ids, serialization_factor=factor),
                           params, up)
    np.testing.assert_array_equal(y, params[ids])
    want = np.zeros_like(params)
    np.add.at(want, ids.reshape(-1), up.reshape(-1, width))
    np.testing.assert_allclose(g, want, rtol=1e-6, atol=1e-6)


def test__embedding_lookup__refuses_a_serialization_factor_below_one():
    with pytest.raises(ValueError, match=r"serialization_factor has to be at least 1, but was 0\."):
        ipu.embedding_ops.embedding_lookup(np.ones((4, 2), np.float32), np.zeros(3, np.int32), serialization_factor=0)


@pytest.mark.parametrize("dimension", ["a_columns", "a_rows_b_columns", "b_rows"])
@pytest.mark.parametrize("transpose_a,transpose_b", [(False, False), (True, False), (False, True), (True, True)])
def test__serialized_matmul__equals_the_product_and_its_gradients(dimension, transpose_a, transpose_b):
    rng = np.random.default_rng(4)
    a_t, b_t = rng.normal(size=(2, 6, 4)).astype(np.float32), rng.normal(size=(2, 4, 6)).astype(np.float32)
    a = np.swapaxes(a_t, -1, -2).copy() if transpose_a else a_t
    b = np.swapaxes(b_t, -1, -2).copy() if transpose_b else b_t
    up = rng.normal(size=(2, 6, 6)).astype(np.float32)
    av, bv = tf.Variable(a), tf.Variable(b)
    with tf.GradientTape() as tape:
        y = ipu.math_ops.serialized_matmul(av, bv, 2, dimension, transpose_a=transpose_a, transpose_b=transpose_b)
        loss = tf.reduce_sum(y * up)
    ga, gb = tape.gradient(loss, [av, bv])
    np.testing.assert_allclose(y.numpy(), a_t @ b_t, rtol=1e-5, atol=1e-5)
    grad_a, grad_b = up @ np.swapaxes(b_t, -1, -2), np.swapaxes(a_t, -1, -2) @ up
    np.testing.assert_allclose(ga.numpy(), np.swapaxes(grad_a, -1, -2) if transpose_a else grad_a, rtol=1e-5,
                               atol=1e-5)
    np.testing.assert_allclose(gb.numpy(), np.swapaxes(grad_b, -1, -2) if transpose_b else grad_b, rtol=1e-5,
                               atol=1e-5)


def test__serialized_matmul__checks_with_graphcores_texts():
    a, b = np.ones((6, 4), np.float32), np.ones((4, 5), np.float32)
    cases = [
        (dict(serialization_factor=4, serialization_dimension="a_columns"),
         r"Expected 'serialization_factor' \(4\) to divide the columns dimension of 'a' \(6\)\."),
        (dict(serialization_factor=3, serialization_dimension="a_rows_b_columns"),
         r"Expected 'serialization_factor' \(3\) to divide the rows dimension of 'a' \(4\)\."),
        (dict(serialization_factor=2, serialization_dimension="b_rows"),
         r"Expected 'serialization_factor' \(2\) to divide the rows dimension of 'b' \(5\)\."),
        (dict(serialization_factor=2, serialization_dimension="rows"), r"Invalid serialization_dimension=rows"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ValueError, match=message):
            ipu.math_ops.serialized_matmul(a, b, **kwargs)
    with pytest.raises(ValueError, match=r"Expected tensor 'a' to have a minimum rank of 2"):
        ipu.math_ops.serialized_matmul(np.ones(4, np.float32), b, 1, "a_columns")


# -- the modules and names popjit lacks ----------------------------------------------------------------------


def test__graphcores_op_modules__resolve_and_the_missing_ones_are_unimplemented():
    assert ipu.ops.rand_ops is ipu.rand_ops and ipu.ops.embedding_ops is ipu.embedding_ops
    with pytest.raises(UnimplementedAPIError, match=r"ipu\.ops\.functional_ops is not implemented by popjit"):
        ipu.ops.functional_ops  # noqa: B018
    with pytest.raises(UnimplementedError, match=r"ipu\.ops\.within_replica_ops is not implemented by popjit yet: "
                                                 r"popjit replicates, shards and pipelines programs.*"
                                                 r"set_gradient_accumulation_options"):
        ipu.ops.within_replica_ops  # noqa: B018
    assert ipu.ops.pipelining_ops is ipu.pipelining_ops
    with pytest.raises(UnimplementedError, match=r"ipu\.optimizers\.CrossReplicaGradientAccumulationOptimizer is "
                                                 r"not implemented by popjit yet"):
        ipu.optimizers.CrossReplicaGradientAccumulationOptimizer  # noqa: B018
    assert ipu.ops.cross_replica_ops is ipu.cross_replica_ops and ipu.ops.replication_ops is ipu.replication_ops
    assert not hasattr(ipu.ops, "within_replica_ops") and not hasattr(ipu.embedding_ops, "HostEmbedding")
