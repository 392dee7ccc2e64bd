"""What ``jit_compile`` means: code compiled for the IPU (``IPUStrategy.run``, ``/device:IPU:n``, or
``jit_compile=True``) is an IPU program with a tile schedule, memory and cycle estimates and
out-of-memory checks; a ``tf.function`` run on the host without it is a host program, compiled to
the same native engine, with no IPU schedule and no IPU limits."""

from __future__ import annotations

import numpy as np
import pytest

import popjit.tensorflow as tf
from popjit import context, ipu
from popjit.errors import ResourceExhaustedError, UnimplementedError

BIG = np.ones(1 << 22, np.float32)  # 16 MiB: more than 8 tiles of 624 KiB hold


def executable(fn, *args, device=None):
    """The executable a call of ``fn(*args)`` on ``device`` (default: the current one) uses."""
    return fn.get_concrete_function(*args).executable(device or context.current_device())


def test__host_call_without_jit_compile__is_a_host_program():
    f = tf.function(lambda x: x * 2.0 + 1.0)
    np.testing.assert_array_equal(f(np.ones(4, np.float32)).numpy(), np.full(4, 3.0, np.float32))
    exe = executable(f, np.ones(4, np.float32))
    assert exe.schedule is None
    with pytest.raises(ValueError, match=r"host program .* jit_compile=True"):
        exe.as_text("schedule")
    assert exe.as_text("engine").startswith("def e_"), "still compiled to a native engine"


def test__host_call_with_jit_compile__is_an_ipu_program_with_estimates():
    f = tf.function(lambda x: x * 2.0 + 1.0, jit_compile=True)
    exe = executable(f, np.ones(4096, np.float32))
    assert exe.schedule is not None and exe.schedule.total_cycles > 0 and exe.schedule.peak_tile_memory > 0
    assert exe.schedule.name in exe.as_text("schedule")
    assert exe.schedule.target.tiles == 1472, "no device attached: the default ipu2"


def test__ipu_device__compiles_an_ipu_program_whatever_jit_compile_says():
    f = tf.function(lambda x: x - 1.0, jit_compile=False)
    exe = executable(f, np.ones(8, np.float32), device="/device:IPU:0")
    assert exe.schedule is not None


def test__strategy_run_of_a_function_without_jit_compile__runs_on_the_ipu(fresh_ipu_system):
    fresh_ipu_system.configure([1], "ipu2", tiles_per_ipu=8)
    f = tf.function(lambda x: x * 3.0)
    strategy = ipu.ipu_strategy.IPUStrategy()
    with strategy.scope(), pytest.raises(ResourceExhaustedError, match="Out of memory on tile"):
        strategy.run(f, args=(BIG,))


def test__out_of_memory__only_for_programs_compiled_for_the_ipu(fresh_ipu_system):
    fresh_ipu_system.configure([1], "ipu2", tiles_per_ipu=8)
    device = fresh_ipu_system.get_device(0)
    host = tf.function(lambda x: x * 3.0)
    np.testing.assert_array_equal(host(BIG).numpy()[:3], [3.0, 3.0, 3.0])
    with pytest.raises(ResourceExhaustedError, match="Out of memory on tile"):
        tf.function(lambda x: x * 3.0, jit_compile=True)(BIG)
    assert device.executions == 0 and device.compilations == 0, "a host call uses no IPU device"


def test__jit_compile_on_the_host__estimates_against_the_attached_device(fresh_ipu_system):
    fresh_ipu_system.configure([1], "ipu1", tiles_per_ipu=16)
    f = tf.function(lambda x: tf.exp(x), jit_compile=True)
    exe = executable(f, np.ones(64, np.float32))
    assert (exe.schedule.target.version, exe.schedule.target.tiles) == ("ipu1", 16)


def test__experimental_compile__is_the_old_name_of_jit_compile():
    f = tf.function(lambda x: x + 1.0, experimental_compile=True)
    assert f.jit_compile is True
    assert executable(f, np.ones(4, np.float32)).schedule is not None


@pytest.mark.parametrize("option", ["experimental_implements", "experimental_autograph_options",
                                    "experimental_follow_type_hints"])
def test__unsupported_options__raise_naming_them(option):
    with pytest.raises(UnimplementedError, match=f"tf.function\\({option}=...\\) is not supported"):
        tf.function(lambda x: x, **{option: "x"})


def test__an_unknown_option__is_a_type_error():
    with pytest.raises(TypeError, match="unexpected keyword argument 'jit_compiled'"):
        tf.function(lambda x: x, jit_compiled=True)
