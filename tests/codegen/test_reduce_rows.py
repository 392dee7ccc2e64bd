"""Reductions over an axis that is not the unit-stride one (a max-pool's window, channels last; a sum over
the middle axis) accumulate each row of their output in place, row by row: the reduction loops inside the
loops over the output's outer axes (:func:`popjit.codegen.render._render_reduce`), so the outermost loop's
iterations are independent and run on threads like an element-wise codelet's. They give NumPy's results
on one thread and split over threads."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import popjit.tensorflow as tf
from popjit import config
from popjit.pipeline import cache

REDUCTIONS = {"sum": (tf.reduce_sum, np.sum), "max": (tf.reduce_max, np.max), "min": (tf.reduce_min, np.min),
              "prod": (tf.reduce_prod, np.prod)}


@st.composite
def arrays(draw: st.DrawFn) -> np.ndarray:
    """``[*outer, r, c]`` values (int32 or float32 with the special values), small enough to multiply exactly."""
    dtype = draw(st.sampled_from([np.float32, np.int32]))
    outer = draw(st.lists(st.integers(2, 4), min_size=1, max_size=2))  # why >= 2: size-1 axes are dropped
    shape = (*outer, draw(st.integers(2, 5)), draw(st.integers(2, 40)))
    levels = [-2, -1, 0, 1, 2, 3] + ([np.nan, np.inf, -np.inf, -0.0] if dtype == np.float32 else [])
    picks = draw(st.lists(st.integers(0, len(levels) - 1), min_size=int(np.prod(shape)),
                          max_size=int(np.prod(shape))))
    return np.array([levels[i] for i in picks]).astype(dtype).reshape(shape)


def program_text(fn, x: np.ndarray, what: str) -> str:
    return fn.get_concrete_function(x).executable("/device:CPU:0").as_text(what)


def reduction_nested_in_outer_loops(source: str) -> bool:
    """Whether a ``for r0`` loop of ``source`` is inside the loop over the outermost axis (``i0``, or ``j0``
    over a range of it)."""
    lines = source.splitlines()
    for at, line in enumerate(lines):
        if line.strip().startswith("for r0 in range("):
            depth = len(line) - len(line.lstrip())
            outer = [ln for ln in lines[:at] if len(ln) - len(ln.lstrip()) < depth]
            return any(ln.strip().startswith(("for i0 in", "for j0 in")) for ln in outer)
    return False


@pytest.mark.parametrize("threads", [False, True], ids=["serial", "split"])
@settings(max_examples=30, deadline=None)
@given(x=arrays(), op=st.sampled_from(sorted(REDUCTIONS)))
def test__a_reduction_over_a_strided_axis__equals_numpy_row_by_row(threads: bool, x: np.ndarray, op: str) -> None:
    ours, theirs = REDUCTIONS[op]
    fn = tf.function(lambda v: ours(v, axis=-2), jit_compile=True)
    cache.clear()  # why: the executable cache does not key on the parallel threshold
    with config.context(PARALLEL_MIN_ELEMENTS=1 if threads else 1 << 40):
        got = fn(x).numpy()
        source = program_text(fn, x, "codelets")
        engine = program_text(fn, x, "engine")
    want = theirs(x, axis=-2)
    # why not bitwise for sums: NumPy sums a float32 axis pairwise; ours adds its rows in order
    np.testing.assert_allclose(got, want, rtol=1e-6 if x.dtype == np.float32 else 0)
    assert reduction_nested_in_outer_loops(source), source
    assert "lo, hi" in source, "one codelet for a range of rows, run whole or on threads"
    assert ("split(K[" in engine) == threads


def test__a_max_pool__runs_on_threads_with_the_bits_of_one_thread() -> None:
    x = np.random.default_rng(3).standard_normal((8, 26, 26, 32)).astype(np.float32)
    fn = tf.function(lambda v: tf.nn.max_pool2d(v, 2, 2, "VALID"), jit_compile=True)
    results = {}
    for threads in (False, True):
        cache.clear()
        with config.context(PARALLEL_MIN_ELEMENTS=1 if threads else 1 << 40):
            results[threads] = fn(x).numpy()
            assert ("split(K[" in program_text(fn, x, "engine")) == threads
    np.testing.assert_array_equal(results[True], results[False])
    np.testing.assert_array_equal(results[True], x.reshape(8, 13, 2, 13, 2, 32).max(axis=(2, 4)))


def test__a_max_pool_as_large_as_the_keras_cnns__is_split_by_default() -> None:
    """The Keras CNN's first max-pool (32 x 26 x 26 x 32, 2 x 2): 692,224 elements compared, over the
    threshold, but it ran on one thread while its reduction loops were outside the loops over its rows."""
    x = np.zeros((32, 26, 26, 32), np.float32)
    fn = tf.function(lambda v: tf.nn.max_pool2d(v, 2, 2, "VALID"), jit_compile=True)
    assert "split(K[" in program_text(fn, x, "engine")


def test__the_keras_cnns_col2im__splits_over_threads_by_default() -> None:
    """The input gradient of a convolution of 32 input channels (the Keras CNN's second) is col2im, a
    gather-sum over 32 x 13 x 13 x 32 = 173,056 elements: under the default threshold it runs on all threads
    (at 2^18 it ran on one, 4.4% of the CNN's samples)."""
    x = np.random.default_rng(4).standard_normal((32, 13, 13, 32)).astype(np.float32)
    w = np.random.default_rng(5).standard_normal((3, 3, 32, 64)).astype(np.float32)

    def input_gradient(v):
        with tf.GradientTape() as tape:
            tape.watch(v)
            y = tf.nn.conv2d(v, w, 1, "VALID")
        return tape.gradient(y, v, output_gradients=tf.ones_like(y))

    fn = tf.function(input_gradient, jit_compile=True)
    engine = program_text(fn, x, "engine")
    assert any("col2im" in line and line.strip().startswith("split(K[") for line in engine.splitlines()), engine
    # with ones for the output's gradient, each input position gets the taps (summed over the outputs) whose
    # windows reach it: tap (i, j) reaches the 11 x 11 positions from (i, j) on
    taps, want = w.sum(axis=-1), np.zeros((13, 13, 32), np.float64)
    for i in range(3):
        for j in range(3):
            want[i:i + 11, j:j + 11] += taps[i, j]
    np.testing.assert_allclose(fn(x).numpy(), np.broadcast_to(want, x.shape), rtol=1e-5, atol=1e-5)
