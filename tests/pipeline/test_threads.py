"""Compiling from several threads at once: one thread compiles a given program while the others
wait for it, different programs compile side by side, and no thread ever sees a generated module
half-initialised. Results equal the single-threaded ones."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import popjit.tensorflow as tf
from popjit import ipu
from popjit.pipeline import cache

X = np.linspace(-1.0, 1.0, 64, dtype=np.float32)


def make_step(scale: float):
    """A new tf.function (so a new first call) whose program depends on ``scale``."""

    @tf.function(jit_compile=True)
    def step(x):
        for _ in tf.range(3):
            x = tf.tanh(x) * scale + 0.25
        return tf.reduce_sum(x * x, axis=0, keepdims=True) + x

    return step


def expected(scale: float) -> np.ndarray:
    x = X.astype(np.float64)
    for _ in range(3):
        x = np.tanh(x) * scale + 0.25
    return (np.sum(x * x) + x).astype(np.float32)


def run_in_threads(calls: list) -> list:
    """Start every call at once (a barrier), return results or exceptions in order."""
    barrier = threading.Barrier(len(calls))
    out: list = [None] * len(calls)

    def work(k: int) -> None:
        barrier.wait()
        try:
            out[k] = calls[k]()
        except BaseException as e:  # reported by the test
            out[k] = e

    threads = [threading.Thread(target=work, args=(k,)) for k in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


@pytest.mark.parametrize("round_", range(6))
def test__eight_threads__first_calls_of_the_same_and_of_different_programs(round_):
    scales = [1.25 + 0.125 * round_ + 0.01 * k for k in range(3)]  # programs no earlier round compiled
    shared, others = make_step(scales[0]), [make_step(s) for s in scales[1:]]
    strategy = ipu.ipu_strategy.IPUStrategy()

    def call(fn):
        def run():
            with strategy.scope():
                return strategy.run(fn, args=(X,)).numpy()
        return run

    calls = [call(shared) if k % 2 == 0 else call(others[k % 2 + k // 4 - 1]) for k in range(8)]
    before = cache.stats["compilations"]
    results = run_in_threads(calls)
    errors = [r for r in results if isinstance(r, BaseException)]
    assert errors == []
    for k, r in enumerate(results):
        scale = scales[0] if k % 2 == 0 else scales[1 + (k % 2 + k // 4 - 1)]
        np.testing.assert_allclose(r, expected(scale), rtol=2e-6, atol=1e-6)
    assert cache.stats["compilations"] - before == 3, "each distinct program compiled once"


def test__threads_running_one_compiled_program__agree():
    step = make_step(0.75)
    strategy = ipu.ipu_strategy.IPUStrategy()
    with strategy.scope():
        single = strategy.run(step, args=(X,)).numpy()

    def run():
        with strategy.scope():
            return strategy.run(step, args=(X,)).numpy()

    for r in run_in_threads([run] * 6):
        np.testing.assert_array_equal(r, single)


def test__the_executable_cache__keeps_the_most_recently_used_and_frees_the_rest():
    import gc
    import weakref

    from popjit import config

    f = tf.function(lambda x: tf.tanh(x) * 3.0 + 1.0, jit_compile=True)
    strategy = ipu.ipu_strategy.IPUStrategy()
    with config.context(EXECUTABLE_CACHE_SIZE=4), strategy.scope():
        first = weakref.ref(f.get_concrete_function(np.ones(3, np.float32)).executable("/device:IPU:0"))
        for n in range(4, 12):  # eight more programs (new shapes)
            np.testing.assert_allclose(strategy.run(f, args=(np.ones(n, np.float32),)).numpy(),
                                       np.full(n, np.tanh(1.0) * 3 + 1, np.float32), rtol=1e-6)
        assert len(cache._EXECUTABLES) <= 4
        gc.collect()
        assert first() is None, "a dropped executable is freed (nothing else holds it)"
        again = strategy.run(f, args=(np.ones(3, np.float32),)).numpy()  # compiled again when needed
    np.testing.assert_allclose(again, np.full(3, np.tanh(1.0) * 3 + 1, np.float32), rtol=1e-6)
