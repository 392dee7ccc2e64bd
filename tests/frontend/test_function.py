"""tf.function: tracing per signature, retracing only when it changes (and logging why), caching,
outputs of any structure, methods, input signatures; tf.Variable resource semantics."""

from __future__ import annotations

import logging

import numpy as np
import pytest

import popjit.tensorflow as tf
from popjit.frontend.function import Function


def test__same_signature__traces_once_and_reuses():
    calls = []

    @tf.function(jit_compile=True)
    def f(x):
        calls.append(1)
        return x * 2.0

    for _ in range(3):
        f(np.ones(3, np.float32))
    f(tf.constant(np.zeros(3, np.float32)))
    assert len(calls) == 1 and f.experimental_get_tracing_count() == 1


def test__new_shape_dtype_or_python_value__retraces_and_logs_why(caplog):
    @tf.function
    def f(x, scale):
        return x * scale

    with caplog.at_level(logging.INFO, logger="popjit"):
        f(np.ones(3, np.float32), 2.0)
        f(np.ones(4, np.float32), 2.0)
        f(np.ones(4, np.float16), 2.0)
        f(np.ones(4, np.float16), 3.0)
        f(np.ones(4, np.float16), 3.0)
    assert f.experimental_get_tracing_count() == 4
    assert f.retrace_reasons == [
        "argument 0 changed from a f32[3] tensor to a f32[4] tensor",
        "argument 0 changed from a f32[4] tensor to a f16[4] tensor",
        "argument 1 changed from Python float 2.0 to Python float 3.0",
    ]
    assert "Retracing f: argument 1 changed from Python float 2.0 to Python float 3.0" in caplog.text


def test__outputs__nested_structures_and_python_values():
    @tf.function(jit_compile=True)
    def f(x):
        return {"sum": tf.reduce_sum(x), "pair": (x + 1.0, None), "label": "ok"}

    out = f(np.arange(4, dtype=np.float32))
    assert out["label"] == "ok" and out["pair"][1] is None
    assert float(out["sum"].numpy()) == 6.0
    np.testing.assert_array_equal(out["pair"][0].numpy(), np.arange(1, 5, dtype=np.float32))


def test__nested_tf_function__is_inlined_into_the_caller():
    @tf.function
    def inner(x):
        return tf.exp(x)

    @tf.function(jit_compile=True)
    def outer(x):
        return inner(x) + 1.0

    outer(np.zeros(2, np.float32))
    graph = outer.get_concrete_function(np.zeros(2, np.float32)).graph
    assert [n.op for n in graph.walk()] == ["exp", "constant", "add"]
    assert inner.experimental_get_tracing_count() == 0


def test__method__binds_self_per_instance():
    class Scaler:
        def __init__(self, k):
            self.k = k

        @tf.function
        def __call__(self, x):
            return x * self.k

    a, b = Scaler(2.0), Scaler(5.0)
    assert isinstance(Scaler.__call__, Function)
    np.testing.assert_array_equal(a(np.ones(2, np.float32)).numpy(), [2.0, 2.0])
    np.testing.assert_array_equal(b(np.ones(2, np.float32)).numpy(), [5.0, 5.0])


def test__input_signature__traces_from_specs():
    @tf.function(input_signature=[tf.TensorSpec([2, 3], tf.float32)])
    def f(x):
        return tf.reduce_sum(x, axis=0)

    graph = f.get_concrete_function().graph
    assert graph.params[0].aval.shape == (2, 3)
    np.testing.assert_array_equal(f(np.ones((2, 3), np.float32)).numpy(), [2.0, 2.0, 2.0])


def test__input_signature_with_unknown_dim__refused():
    f = tf.function(lambda x: x + 1.0, input_signature=[tf.TensorSpec([None, 3], tf.float32)])
    with pytest.raises(tf.errors.InvalidArgumentError, match="not fully defined"):
        f.get_concrete_function()


def test__variable__resource_semantics_eager():
    v = tf.Variable([1.0, 2.0], name="w")
    assert v.name == "w:0" and v.dtype == tf.float32 and v.shape == [2]
    snapshot = v.read_value()
    v.assign([5.0, 6.0])
    v.assign_add([1.0, 1.0])
    v.assign_sub(tf.constant([0.5, 0.5]))
    np.testing.assert_array_equal(v.numpy(), [5.5, 6.5])
    np.testing.assert_array_equal(snapshot.numpy(), [1.0, 2.0])  # a read is a snapshot
    with pytest.raises(ValueError, match="Shape mismatch"):
        v.assign([1.0, 2.0, 3.0])
    with pytest.raises(TypeError, match="dtype int32"):
        v.assign(np.array([1, 2], np.int32))


def test__variable__updated_in_place_by_compiled_code():
    v = tf.Variable(np.zeros(3, np.float32))
    buffer = v._buffer

    @tf.function(jit_compile=True)
    def step(x):
        old = v.read_value()
        v.assign(v * 2.0 + x)
        return old

    for _ in range(3):
        old = step(np.ones(3, np.float32))
    np.testing.assert_array_equal(old.numpy(), [3.0, 3.0, 3.0])
    np.testing.assert_array_equal(v.numpy(), [7.0, 7.0, 7.0])
    assert v._buffer is buffer, "the device buffer is updated in place"
    assert step.experimental_get_tracing_count() == 1


@pytest.mark.parametrize("jit", [True, None, False], ids=["ipu_program", "host_program", "interpreted"])
def test__variable_from_a_transposed_array__keeps_compiled_updates(jit):
    # a Fortran-ordered initial value (a transpose, Keras's orthogonal initializer) once made the engine
    # update a contiguous copy, and the variable never changed
    initial = np.arange(6, dtype=np.float32).reshape(2, 3).T
    v = tf.Variable(initial)

    @tf.function(jit_compile=jit)
    def step():
        v.assign_sub(tf.ones_like(v))

    step()
    step()
    np.testing.assert_array_equal(v.numpy(), initial - 2)


def test__keyword_and_positional_calls__share_one_trace():
    @tf.function
    def f(x, scale=2.0):
        return x * scale

    x = np.ones(2, np.float32)
    f(x)
    f(x=x)
    f(x, 2.0)
    f(x, scale=2.0)
    assert f.experimental_get_tracing_count() == 1
    with pytest.raises(TypeError, match=r"f\(\): .*unexpected keyword argument 'y'"):
        f(x, y=1)
