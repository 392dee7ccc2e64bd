"""A read-only argument (a frozen array, a dataset's batch) runs on the machine code built for writeable
ones: the engine types every buffer writeable (``compile._buffer_type``), as it takes data pointers and
writes only its own buffers. The read-only arrays are left unchanged."""

from __future__ import annotations

import numpy as np

import popjit.tensorflow as tf
from popjit import config
from popjit.codegen import compile as compile_module
from popjit.codegen.compile import load_engine
from popjit.pipeline import cache as executable_cache


def test__read_only_and_writeable_arguments__share_one_build_and_stay_unchanged(tmp_path):
    executable_cache.clear()
    compile_module._ENGINES.clear()
    weights = tf.Variable(np.linspace(-1.0, 1.0, 12, dtype=np.float32).reshape(3, 4))

    @tf.function(jit_compile=True)
    def step(x):
        y = tf.tanh(tf.matmul(x, weights))
        weights.assign_sub(0.1 * tf.matmul(tf.transpose(x), y))
        return tf.reduce_mean(y, axis=0)

    x = np.random.default_rng(1).standard_normal((5, 3)).astype(np.float32)
    frozen = x.copy()
    frozen.flags.writeable = False
    with config.context(CACHE_DIR=str(tmp_path)):
        for arg in (frozen, x, frozen, x.copy()):
            before = weights.numpy()
            expected = np.tanh(arg @ before).mean(axis=0)
            np.testing.assert_allclose(step(arg).numpy(), expected, rtol=1e-5)
            assert not np.array_equal(weights.numpy(), before), "the variable is written in place"
    np.testing.assert_array_equal(frozen, x)
    engine = load_engine(step.get_concrete_function(x).executable("/device:IPU:0").engine_source)
    assert len(engine._linked) == 1, "one build for read-only and writeable arguments"


def test__a_read_only_buffer__is_typed_writeable_and_other_types_are_kept():
    frozen = np.zeros(4, np.float32)
    frozen.flags.writeable = False
    typed = compile_module._buffer_type(frozen)
    assert typed.mutable and typed.dtype == compile_module.numba.float32 and typed.ndim == 1
    assert compile_module._buffer_type(np.zeros(4, np.int32)) == compile_module.numba.typeof(np.zeros(4, np.int32))
