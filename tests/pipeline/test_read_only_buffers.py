"""The engine is given what it only reads (arguments, constants, infeeds) as read-only buffers, whatever
the caller's arrays are (``Executable._buffers``): its machine code depends on the buffers' writability,
so a read-only argument must not compile a program a second time."""

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
        for arg in (x, frozen, x.copy(), frozen):
            before = weights.numpy()
            expected = np.tanh(arg @ before).mean(axis=0)
            np.testing.assert_allclose(step(arg).numpy(), expected, rtol=1e-5)
            assert not np.array_equal(weights.numpy(), before), "the variable is written in place"
    np.testing.assert_array_equal(frozen, x)
    engine = load_engine(step.get_concrete_function(x).executable("/device:IPU:0").engine_source)
    ((key, _),) = engine._linked.items()
    args, variables = 1, 1
    assert [writeable for _, writeable in key[:args + variables]] == [False, True]
