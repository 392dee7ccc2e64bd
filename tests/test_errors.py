"""Errors a user can trigger while tracing: the right class, a message that says what, where in the
user's code (this file and line) and what to do, and nothing left half-changed afterwards."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import popjit.tensorflow as tf
from popjit import errors
from popjit.frontend.control_flow import for_range
from popjit.pipeline import cache

THIS_FILE = __file__.rsplit("/", 1)[-1]


def _line_of(fn, needle: str) -> int:
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, ln in enumerate(lines) if needle in ln)


def test__shape_error__at_trace_time__names_user_line():
    def f(x, y):
        return x + y  # the bad add

    with pytest.raises(errors.InvalidArgumentError) as e:
        tf.function(f, jit_compile=True)(np.zeros((2, 3), np.float32), np.zeros((4,), np.float32))
    msg = str(e.value)
    assert "Incompatible shapes: [2,3] vs. [4]" in msg
    assert f"{THIS_FILE}\", line {_line_of(f, 'the bad add')}" in msg


def test__error_inside_a_loop_body__names_the_users_function_not_autographs():
    def training_step(x):
        for _ in tf.range(3):
            x = x + tf.ones([4])  # the bad add in a loop
        return x

    with pytest.raises(errors.InvalidArgumentError) as e:
        tf.function(training_step, jit_compile=True)(np.zeros(3, np.float32))
    line = _line_of(training_step, "the bad add in a loop")
    assert f"{THIS_FILE}\", line {line}, in training_step" in str(e.value)


def test__dtype_mismatch__names_op_and_dtypes():
    def f(x, y):
        return tf.multiply(x, y)

    with pytest.raises(errors.InvalidArgumentError, match=r"Mul as input #1.*int32"):
        tf.function(f)(np.ones(3, np.float32), np.ones(3, np.int32))


def test__float64_inside_compiled_code__refused_with_advice():
    def f(x):
        return tf.cast(x, tf.float64) * 2.0  # widen

    host = tf.function(f, jit_compile=True)(np.ones(3, np.float32))
    assert host.dtype == tf.float64, "on the host, as with TensorFlow on a CPU, float64 is fine"
    with pytest.raises(errors.UnimplementedError) as e, tf.device("/device:IPU:0"):
        tf.function(f, jit_compile=True)(np.ones(3, np.float32))
    msg = str(e.value)
    assert "float64 is not supported on the IPU" in msg and "Cast to float32" in msg
    assert f"line {_line_of(f, 'widen')}" in msg


def test__dynamic_shape__refused_with_xla_message():
    def f(x, n):
        return tf.zeros(n) + x  # n is only known at run time

    with pytest.raises(errors.InvalidArgumentError) as e:
        tf.function(f, jit_compile=True)(np.ones(3, np.float32), np.int32(3))
    msg = str(e.value)
    assert "must be a compile-time constant" in msg
    assert "XLA compilation requires that operator arguments that represent shapes" in msg
    assert f"line {_line_of(f, 'only known at run time')}" in msg


def test__unsupported_op__unimplemented_error_naming_it():
    from popjit.frontend.tracing import apply_op

    with pytest.raises(errors.UnimplementedError, match="Op 'fft3d' is not implemented"):
        apply_op("fft3d", [tf.constant(1.0)])
    with pytest.raises(errors.UnimplementedError, match=r"tf\.histogram_fixed_width is not implemented"):
        tf.histogram_fixed_width  # noqa: B018
    assert not hasattr(tf, "histogram_fixed_width")


def test__tensor_escaping_a_loop__explains_how_to_carry_it():
    def f(x):
        inner = []

        def body(i, acc):
            inner.append(acc * 2.0)
            return [acc + 1.0]

        for_range(0, 3, 1, body, [x])
        return inner[0]

    with pytest.raises(errors.InvalidArgumentError, match="Make it a loop variable"):
        tf.function(f)(np.ones(2, np.float32))


def test__symbolic_tensor_as_python_bool__points_to_autograph():
    def f(x):
        return x if bool(tf.reduce_sum(x) > 0) else -x

    with pytest.raises(TypeError, match="as a Python bool is not allowed"):
        tf.function(f, autograph=False)(np.ones(2, np.float32))


def test__errors__leave_variables_and_compiled_programs_intact():
    v = tf.Variable(np.arange(3, dtype=np.float32))

    @tf.function(jit_compile=True)
    def good(x):
        v.assign_add(x)
        return tf.reduce_sum(v)

    good(np.ones(3, np.float32))
    before = v.numpy()
    compiled = cache.stats["compilations"]

    @tf.function(jit_compile=True)
    def bad(x):
        v.assign(v * 10.0)
        return v + x  # shape error after a variable write in the trace

    with pytest.raises(errors.InvalidArgumentError):
        bad(np.ones(4, np.float32))
    np.testing.assert_array_equal(v.numpy(), before)
    out = good(np.ones(3, np.float32))
    assert cache.stats["compilations"] == compiled, "the good program was recompiled"
    np.testing.assert_array_equal(v.numpy(), before + 1)
    assert float(out.numpy()) == pytest.approx(float(np.sum(before + 1)))


def _tiny_ipu(fresh_ipu_system, model: bool, monkeypatch) -> None:
    from popjit import ipu

    if model:
        monkeypatch.setenv("TF_POPLAR_FLAGS", "--use_ipu_model")
    cfg = ipu.config.IPUConfig()
    cfg.auto_select_ipus = 1
    cfg.ipu_model.tiles_per_ipu = 8
    cfg.configure_ipu_system()


def test__out_of_memory__names_tile_bytes_and_the_users_call(fresh_ipu_system, monkeypatch):
    from popjit import ipu

    _tiny_ipu(fresh_ipu_system, False, monkeypatch)
    f = tf.function(lambda x: tf.tanh(x) * 2.0, jit_compile=True)
    strategy = ipu.ipu_strategy.IPUStrategy()
    with pytest.raises(errors.ResourceExhaustedError) as e, strategy.scope():
        strategy.run(f, args=(np.ones((2048, 2048), np.float32),))  # 16 MiB on 8 tiles
    msg = str(e.value)
    assert msg.startswith("Out of memory on tile ")
    assert "bytes used but tiles only have 638976 bytes of memory" in msg
    assert "availableMemoryProportion" in msg  # Graphcore's advice
    assert f'{THIS_FILE}", line' in msg and "16 MiB on 8 tiles" in msg


def test__out_of_memory_under_ipu_model__warns_at_the_users_line_and_runs(fresh_ipu_system, monkeypatch):
    from popjit import ipu
    from popjit.schedule.schedule import OutOfMemoryWarning

    _tiny_ipu(fresh_ipu_system, True, monkeypatch)
    f = tf.function(lambda x: tf.tanh(x) * 2.0, jit_compile=True)
    strategy = ipu.ipu_strategy.IPUStrategy()
    x = np.full((2048, 2048), 0.5, np.float32)
    with pytest.warns(OutOfMemoryWarning, match="Out of memory on tile") as record, strategy.scope():
        out = strategy.run(f, args=(x,))
    assert record[0].filename.endswith(THIS_FILE)
    np.testing.assert_allclose(out.numpy()[:2, :2], np.tanh(0.5) * 2.0, rtol=1e-6)


@pytest.mark.parametrize("namespace, name", [
    ("tf.nn", "ctc_loss"), ("tf.math", "top_k"), ("tf.linalg", "inv"), ("tf.random", "shuffle"),
    ("tf.bitwise", "left_shift"), ("tf.nest", "is_nested"), ("tf.dtypes", "complex64"), ("tf.errors", "no_error"),
    ("tf.autograph", "set_verbosity"), ("tf.autograph.experimental", "set_loop_options"),
    ("tf.data.experimental", "sample_from_datasets"), ("ipu", "within_replica_ops"), ("ipu.utils", "no_such_helper"),
    ("ipu.loops", "no_such_loop"), ("ipu.config", "NoSuchOption"), ("ipu.scopes", "no_such_scope"),
])
def test__a_missing_name_in_any_namespace__is_unimplemented_naming_it(namespace, name):
    from popjit import ipu

    module = eval(namespace, {"tf": tf, "ipu": ipu})
    with pytest.raises(errors.UnimplementedAPIError, match=rf"{namespace}\.{name} is not implemented by popjit"):
        getattr(module, name)
    assert not hasattr(module, name), "still an AttributeError for hasattr and getattr with a default"


def test__a_replicated_ipu_model_device__is_refused_not_run_as_one_replica(fresh_ipu_system, monkeypatch):
    from popjit import ipu

    monkeypatch.setenv("TF_POPLAR_FLAGS", "--use_ipu_model")
    cfg = ipu.config.IPUConfig()
    cfg.auto_select_ipus = 2
    cfg.ipu_model.version = "ipu2"
    cfg.configure_ipu_system()
    strategy = ipu.ipu_strategy.IPUStrategy()
    with strategy.scope():
        v = tf.Variable(np.ones(3, np.float32))
        step = tf.function(lambda: v.assign_add(np.ones(3, np.float32)), jit_compile=True)
        with pytest.raises(errors.UnimplementedError) as e:
            strategy.run(step)
    msg = str(e.value)
    assert "IPU Model device of 2 IPUs" in msg and "replicated programs are not supported" in msg
    here = test__a_replicated_ipu_model_device__is_refused_not_run_as_one_replica
    assert f"line {_line_of(here, 'strategy.run(step)')}" in msg
    np.testing.assert_array_equal(v.numpy(), np.ones(3, np.float32))  # the variable is untouched
    assert fresh_ipu_system.get_device(0).executions == 0


@pytest.mark.parametrize("value, what", [
    (np.array(["a", "b"]), "NumPy array of strings"), (np.array([object()]), "NumPy array of Python objects"),
    (np.ones(2, np.complex64), "complex64"),
])
def test__arguments_that_cannot_be_tensors__type_error_naming_the_argument(value, what):
    from popjit import ipu

    def g(x, y):
        return x * 2.0

    strategy = ipu.ipu_strategy.IPUStrategy()
    with strategy.scope(), pytest.raises(TypeError) as e:
        strategy.run(tf.function(g, jit_compile=True), args=(np.ones(2, np.float32), value))
    msg = str(e.value)
    assert msg.startswith("g(): argument 1: ") and what in msg
    here = test__arguments_that_cannot_be_tensors__type_error_naming_the_argument
    assert f"line {_line_of(here, 'strategy.run(')}" in msg


def test__ragged_and_string_values__tensorflow_style_conversion_errors():
    with pytest.raises(ValueError, match=r"^Can't convert non-rectangular Python sequence to Tensor\.$"):
        tf.constant([[1.0], [2.0, 3.0]])
    with pytest.raises(ValueError, match="non-rectangular"):
        tf.data.Dataset.from_tensor_slices([[1.0], [2.0, 3.0]])
    for value in ("abc", ["a", "b"], np.array(["a"])):
        with pytest.raises(TypeError, match=r"numbers and bools \(no tf.string\)"):
            tf.constant(value)
    with pytest.raises(TypeError, match=r"tf.data cannot make a tensor .* \(no tf.string\)"):
        tf.data.Dataset.from_tensor_slices(["a", "b"])


def test__from_import_of_a_missing_name__is_an_import_error_that_keeps_popjits_message():
    with pytest.raises(ImportError) as e:
        from popjit.tensorflow.keras.layers import Conv3DTranspose  # noqa: F401
    assert isinstance(e.value, errors.UnimplementedError) and not isinstance(e.value, AttributeError)
    assert str(e.value).startswith("cannot import name 'Conv3DTranspose': tf.keras.layers.Conv3DTranspose is not "
                                   "implemented by popjit.")

    def inside_a_function():
        from popjit.tensorflow.python.ipu import within_replica_ops  # noqa: F401

    with pytest.raises(errors.UnimplementedImportError, match=r"ipu\.within_replica_ops is not implemented by popjit "
                                                              r"yet: popjit replicates, shards and pipelines programs"):
        inside_a_function()
    from popjit.tensorflow.keras.layers import Dense  # what exists still imports
    from popjit.tensorflow.python.ipu import nn_ops

    assert Dense is tf.keras.layers.Dense and nn_ops.gelu is not None
    # the attribute forms are unchanged: AttributeErrors, so hasattr and getattr with a default work
    assert not hasattr(tf.keras.layers, "Conv3DTranspose") and getattr(tf.nn, "ctc_loss", 7) == 7
    with pytest.raises(errors.UnimplementedAPIError):
        tf.keras.layers.Conv3DTranspose  # noqa: B018
