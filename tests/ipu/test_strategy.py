"""IPUStrategy (as upstream ipu_strategy_test checks it), the seed example of the user guide
§3.2.1–3.2.2, ipu.scopes, and the TF-compatible module path."""

from __future__ import annotations

import importlib
import sys

import numpy as np
import pytest

import popjit
import popjit.tensorflow as tf
from popjit.errors import InvalidArgumentError, UnimplementedError
from popjit.flags import TFPoplarFlagsError
from popjit.tensorflow.python import ipu

MATMUL_RESULT = np.array([[22.0, 28.0], [49.0, 64.0]], np.float32)


@pytest.fixture(autouse=True)
def _no_ambient_flags(monkeypatch):
    """Tests set TF_POPLAR_FLAGS themselves; a value in the caller's environment must not leak in."""
    monkeypatch.delenv("TF_POPLAR_FLAGS", raising=False)


@pytest.fixture
def one_ipu(fresh_ipu_system):
    """A freshly configured system of one IPU, with zeroed engine counters."""
    config = ipu.config.IPUConfig()
    config.auto_select_ipus = 1
    config.configure_ipu_system()
    yield fresh_ipu_system.get_device(0)


@pytest.fixture
def two_ipus(fresh_ipu_system):
    config = ipu.config.IPUConfig()
    config.auto_select_ipus = [1, 1]
    config.configure_ipu_system()
    yield fresh_ipu_system


# -- the user guide's example (seed 003 §3.2.1-3.2.2, with its lost lines restored) --------------


def test__seed_example__matmul_through_strategy_run_then_eagerly(fresh_ipu_system):
    # Configure the IPU device.
    config = ipu.config.IPUConfig()
    config.auto_select_ipus = 1
    config.configure_ipu_system()

    a = tf.constant([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    b = tf.constant([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])

    @tf.function(jit_compile=True)
    def matmul_fn(x, y):
        z = tf.matmul(x, y)
        return z

    strategy = ipu.ipu_strategy.IPUStrategy()
    with strategy.scope():
        c = strategy.run(matmul_fn, args=(a, b))
    np.testing.assert_array_equal(c.numpy(), MATMUL_RESULT)
    assert c.device.endswith("/device:IPU:0")

    with tf.device("/device:IPU:0"):
        c = tf.matmul(a, b)
    np.testing.assert_array_equal(c.numpy(), MATMUL_RESULT)
    assert c.device.endswith("/device:IPU:0")


# -- scope ----------------------------------------------------------------------------------------


def test__scope__places_variables_on_the_ipu_and_restores_on_exit(one_ipu):
    strategy = ipu.ipu_strategy.IPUStrategyV1()
    with strategy.scope():
        v = tf.Variable(1.0)
        with ipu.ipu_strategy.IPUStrategyV1("/device:IPU:1").scope():
            inner = tf.Variable(2.0)
        after = tf.Variable(3.0)
    outside = tf.Variable(4.0)
    assert v.device.endswith("/device:IPU:0") and after.device.endswith("/device:IPU:0")
    assert inner.device.endswith("/device:IPU:1")
    assert outside.device.endswith("/device:CPU:0")
    assert ipu.ipu_strategy.current_strategy() is None


def test__scope_of_a_second_device__places_variables_there_and_runs_there(two_ipus):
    strategy = ipu.ipu_strategy.IPUStrategyV1("/device:IPU:1")
    with strategy.scope():
        v = tf.Variable(np.ones(3, np.float32))

    @tf.function(jit_compile=True)
    def step():
        v.assign_add(tf.ones(3))
        return v.read_value()

    out = strategy.run(step)
    assert v.device.endswith("/device:IPU:1") and out.device.endswith("/device:IPU:1")
    assert two_ipus.get_device(1).executions == 1 and two_ipus.get_device(0).executions == 0


def test__variable_initialisers__run_on_the_host(one_ipu):
    before = one_ipu.executions
    with ipu.ipu_strategy.IPUStrategy().scope():
        v = tf.Variable(lambda: tf.ones((2, 2)) * 3.0)
    np.testing.assert_array_equal(v.numpy(), np.full((2, 2), 3.0, np.float32))
    assert one_ipu.executions == before


def test__strategy__needs_an_ipu_device():
    with pytest.raises(ValueError, match="IPUStrategy needs an IPU device"):
        ipu.ipu_strategy.IPUStrategy("/device:CPU:0")


# -- run ------------------------------------------------------------------------------------------


def test__run__compiles_once_executes_each_time_and_updates_variables_in_place(one_ipu):
    strategy = ipu.ipu_strategy.IPUStrategy()
    with strategy.scope():
        w = tf.Variable(np.ones((2, 2), np.float32))
    buffer = w._buffer

    @tf.function(jit_compile=True)
    def step(x):
        w.assign_add(x)
        return tf.reduce_sum(w.read_value())

    x = tf.constant(np.ones((2, 2), np.float32))
    first = strategy.run(step, args=(x,))
    second = strategy.run(step, args=(x,))
    assert (float(first), float(second)) == (8.0, 12.0)
    assert first.device.endswith("/device:IPU:0") and second.device.endswith("/device:IPU:0")
    assert (one_ipu.compilations, one_ipu.executions) == (1, 2)
    assert w._buffer is buffer
    np.testing.assert_array_equal(w.numpy(), np.full((2, 2), 3.0, np.float32))


def test__run__of_a_python_while_loop_is_one_engine(one_ipu):
    @tf.function(jit_compile=True)
    def count(x):
        i = tf.constant(0)
        while i < 10:
            x = x * 2.0
            i += 1
        return x

    out = ipu.ipu_strategy.IPUStrategy().run(count, args=(tf.constant(1.0),))
    assert float(out) == 1024.0
    assert (one_ipu.compilations, one_ipu.executions) == (1, 1)


def test__run__of_a_plain_python_function__is_refused_eagerly(one_ipu):
    strategy = ipu.ipu_strategy.IPUStrategy()
    message = ("IPUStrategyV1.run(fn, ...) does not support eager execution. Either convert `fn` into a tf.function "
               "or consider calling strategy.run inside a tf.function.")

    def plain(x):
        return x + 1.0

    for fn in (plain, lambda x: x):
        with pytest.raises(ValueError) as e:
            strategy.run(fn, args=(tf.constant(1.0),))
        assert str(e.value) == message
    assert one_ipu.executions == 0


def test__run__accepts_a_tf_function_or_a_concrete_function(one_ipu):
    strategy = ipu.ipu_strategy.IPUStrategy()
    f = tf.function(lambda x: x + 1.0)
    x = tf.constant(np.float32(2.0))
    assert float(strategy.run(f, args=(x,))) == 3.0
    assert float(strategy.run(f.get_concrete_function(x), args=(x,))) == 3.0
    assert float(strategy.run(f, kwargs={"x": x})) == 3.0
    assert one_ipu.executions == 3


def test__run__inside_a_tf_function__becomes_part_of_that_program(one_ipu):
    strategy = ipu.ipu_strategy.IPUStrategy()

    def body(x):
        return x * 3.0

    @tf.function(jit_compile=True)
    def outer(x):
        return strategy.run(body, args=(x,)) + 1.0

    assert float(strategy.run(outer, args=(tf.constant(2.0),))) == 7.0
    assert (one_ipu.compilations, one_ipu.executions) == (1, 1)


@pytest.mark.parametrize("value", [tf.constant(np.ones(2)), np.ones(2), np.float64(1.0)],
                         ids=["tensor", "ndarray", "numpy-scalar"])
def test__float64_input__is_a_type_error(value, one_ipu):
    f = tf.function(lambda x: x)
    with pytest.raises(TypeError) as e:
        ipu.ipu_strategy.IPUStrategy().run(f, args=(value,))
    assert str(e.value) == "Unsupported data type for input: float64"
    assert (one_ipu.compilations, one_ipu.executions) == (0, 0)


def test__float64_output__is_a_type_error(one_ipu):
    @tf.function
    def f(x):
        return x, tf.constant(np.float64(1.5))

    with pytest.raises(TypeError) as e:
        ipu.ipu_strategy.IPUStrategy().run(f, args=(tf.constant(1.0),))
    assert str(e.value) == "Unsupported data type for output: float64"
    assert (one_ipu.compilations, one_ipu.executions) == (0, 0)


def test__run__without_a_configured_system__names_configure_ipu_system(fresh_ipu_system):
    ipu.config.reset_ipu_configuration()
    f = tf.function(lambda x: x + 1.0)
    with pytest.raises(InvalidArgumentError, match="configure_ipu_system"):
        ipu.ipu_strategy.IPUStrategy().run(f, args=(tf.constant(1.0),))


def test__experimental_run_v2__is_gone():
    with pytest.raises(RuntimeError, match=r"^`experimental_run_v2` has been deleted\. Use `run` instead\.$"):
        ipu.ipu_strategy.IPUStrategy().experimental_run_v2(lambda: 1)


# -- errors leave the device intact ---------------------------------------------------------------


def _trained_step(one_ipu):
    strategy = ipu.ipu_strategy.IPUStrategy()
    with strategy.scope():
        w = tf.Variable(np.ones((2, 2), np.float32))

    @tf.function(jit_compile=True)
    def step(x):
        w.assign(tf.matmul(w, x))
        return tf.reduce_sum(w.read_value())

    x = tf.constant(np.full((2, 2), 0.5, np.float32))
    assert float(strategy.run(step, args=(x,))) == 4.0
    return strategy, w, step, x


def _bad_shape(strategy, step, x, monkeypatch):
    strategy.run(step, args=(tf.constant(np.ones((3, 3), np.float32)),))


def _bad_dtype(strategy, step, x, monkeypatch):
    strategy.run(step, args=(tf.constant(np.ones((2, 2))),))


def _bad_flag(strategy, step, x, monkeypatch):
    monkeypatch.setenv("TF_POPLAR_FLAGS", "--use_ipu_model --frobnicate")
    try:
        strategy.run(step, args=(x,))
    finally:
        monkeypatch.delenv("TF_POPLAR_FLAGS")


@pytest.mark.parametrize("make_error, error, message", [
    (_bad_shape, InvalidArgumentError, "Matrix size-incompatible"),
    (_bad_dtype, TypeError, "Unsupported data type for input: float64"),
    (_bad_flag, TFPoplarFlagsError, "unknown flag --frobnicate"),
], ids=["shape", "float64", "flag"])
def test__error_during_trace_or_compile__leaves_variables_and_programs_intact(make_error, error, message, one_ipu,
                                                                              monkeypatch):
    strategy, w, step, x = _trained_step(one_ipu)
    value, buffer = w.numpy(), w._buffer
    counts = (one_ipu.compilations, one_ipu.executions)
    with pytest.raises(error, match=message):
        make_error(strategy, step, x, monkeypatch)
    assert w._buffer is buffer
    np.testing.assert_array_equal(w.numpy(), value)
    assert (one_ipu.compilations, one_ipu.executions) == counts
    assert float(strategy.run(step, args=(x,))) == 4.0  # the compiled program is reused as it was
    assert (one_ipu.compilations, one_ipu.executions) == (counts[0], counts[1] + 1)


# -- reduce and other strategy API ----------------------------------------------------------------


@pytest.mark.parametrize("op", [ipu.ipu_strategy.ReduceOp.SUM, ipu.ipu_strategy.ReduceOp.MEAN, "SUM", "mean"])
def test__reduce__of_one_replica_returns_the_value(op):
    value = tf.constant([1.0, 2.0, 3.0])
    assert ipu.ipu_strategy.IPUStrategy().reduce(op, value, axis=None) is value


def test__reduce__over_an_axis():
    strategy = ipu.ipu_strategy.IPUStrategy()
    value = tf.constant([[1.0, 2.0], [3.0, 6.0]])
    np.testing.assert_allclose(strategy.reduce("SUM", value, axis=0).numpy(), [4.0, 8.0])
    np.testing.assert_allclose(strategy.reduce(ipu.ipu_strategy.ReduceOp.MEAN, value, axis=1).numpy(), [1.5, 4.5])


@pytest.mark.parametrize("op, shown", [("MAX", "MAX"), ("prod", "prod"), (None, "None"), (3, "3")])
def test__reduce__with_another_op__is_a_value_error(op, shown):
    with pytest.raises(ValueError) as e:
        ipu.ipu_strategy.IPUStrategy().reduce(op, tf.constant(1.0), axis=None)
    assert str(e.value) == f"Unsupported reduce op: {shown}"


def test__strategy__has_one_replica_in_sync():
    strategy = ipu.ipu_strategy.IPUStrategy()
    assert strategy.num_replicas_in_sync == 1
    assert strategy.experimental_local_results(5) == (5,)
    assert strategy.extended.worker_devices[0].endswith("/device:IPU:0")
    assert ipu.ipu_strategy.IPUStrategy is ipu.ipu_strategy.IPUStrategyV1


# -- scopes ---------------------------------------------------------------------------------------


def test__ipu_scope__runs_ops_and_places_variables_on_the_device(one_ipu):
    before = one_ipu.executions
    with ipu.scopes.ipu_scope("/device:IPU:0"):
        c = tf.matmul(tf.constant([[1.0, 2.0, 3.0]]), tf.constant([[1.0], [2.0], [3.0]]))
        v = tf.Variable(1.0)
    assert float(c[0, 0]) == 14.0 and c.device.endswith("/device:IPU:0")
    assert v.device.endswith("/device:IPU:0")
    assert one_ipu.executions > before
    assert tf.constant(1.0).device.endswith("/device:CPU:0")


@pytest.mark.parametrize("call", [
    lambda: ipu.scopes.outside_compilation_scope(),
    lambda: ipu.scopes.frontend_attribute("a", "b"),
    lambda: ipu.scopes.stochastic_rounding(True),
    lambda: ipu.scopes.partials_type(np.float16),
], ids=["outside_compilation_scope", "frontend_attribute", "stochastic_rounding", "partials_type"])
def test__scopes_not_built_yet__say_so(call, request):
    name = request.node.callspec.id
    with pytest.raises(UnimplementedError, match=rf"ipu\.scopes\.{name} is not implemented by popjit yet"):
        call()


def test__ipu_jit_scope__is_a_no_op_context():
    with ipu.scopes.ipu_jit_scope(0):
        assert float(tf.constant(2.0) * 2.0) == 4.0


# -- seeds ----------------------------------------------------------------------------------------


def test__reset_ipu_seed__records_the_seed_of_an_existing_device(one_ipu):
    ipu.utils.reset_ipu_seed(1234)
    assert ipu.utils.ipu_seed("/device:IPU:0") == 1234
    with pytest.raises(ValueError, match="not an IPU device"):
        ipu.utils.reset_ipu_seed(1, device="/device:CPU:0")
    with pytest.raises(InvalidArgumentError, match="/device:IPU:3"):
        ipu.utils.reset_ipu_seed(1, device="/device:IPU:3")
    with pytest.raises(TypeError, match="seed must be an int"):
        ipu.utils.reset_ipu_seed(1.5)


# -- module paths ---------------------------------------------------------------------------------


def test__tensorflow_python_ipu__is_popjit_ipu_under_graphcore_s_names():
    from popjit.tensorflow.python.ipu import config, ipu_strategy, scopes, utils

    assert ipu is popjit.ipu and popjit.tensorflow.python.ipu is popjit.ipu
    assert ipu.config.IPUConfig is popjit.ipu.config.IPUConfig
    assert (config, ipu_strategy, scopes, utils) == (popjit.ipu.config, popjit.ipu.ipu_strategy, popjit.ipu.scopes,
                                                      popjit.ipu.utils)
    for name in ("config", "ipu_strategy", "scopes", "utils"):
        alias = importlib.import_module(f"popjit.tensorflow.python.ipu.{name}")
        assert alias is sys.modules[f"popjit.ipu.{name}"]
        assert alias.__spec__.name == f"popjit.ipu.{name}"  # the alias does not rename the module


def test__tensorflow_python_ipu__unknown_module_is_not_found():
    with pytest.raises(ModuleNotFoundError, match=r"popjit\.tensorflow\.python\.ipu\.no_such_module"):
        importlib.import_module("popjit.tensorflow.python.ipu.no_such_module")
    with pytest.raises(AttributeError, match="no attribute 'no_such_module'"):
        ipu.no_such_module  # noqa: B018
