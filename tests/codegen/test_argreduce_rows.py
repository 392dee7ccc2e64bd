"""Arg-reductions over an axis that is not the unit-stride one (a max-pool gradient's argmax over a
window, channels last) render row by row (:func:`popjit.codegen.render._render_argreduce_rows`) and
give NumPy's indices: the first occurrence of the extreme, NaN counting as the extreme, for every
dtype, on one thread and split over threads."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import popjit.tensorflow as tf
from popjit import config
from popjit.pipeline import cache

SPECIALS = {np.float32: [np.nan, np.inf, -np.inf, 0.0, -0.0], np.float16: [np.nan, -np.inf, 0.0],
            np.int32: [np.iinfo(np.int32).min, np.iinfo(np.int32).max], np.bool_: []}


@st.composite
def arrays(draw: st.DrawFn) -> np.ndarray:
    """``[*outer, r, c]`` values from a few levels (so ties are common), with the dtype's special values."""
    dtype = draw(st.sampled_from(list(SPECIALS)))
    outer = draw(st.lists(st.integers(2, 4), min_size=1, max_size=2))  # why >= 2: size-1 axes are dropped
    shape = (*outer, draw(st.integers(2, 5)), draw(st.integers(2, 40)))
    levels = [0, 1] if dtype == np.bool_ else [-2, 0, 1, 3, *SPECIALS[dtype]]
    picks = draw(st.lists(st.integers(0, len(levels) - 1), min_size=int(np.prod(shape)),
                          max_size=int(np.prod(shape))))
    return np.array([levels[i] for i in picks]).astype(dtype).reshape(shape)


def codelets(fn, x: np.ndarray) -> str:
    return fn.get_concrete_function(x).executable("/device:CPU:0").as_text("codelets")


@pytest.mark.parametrize("threads", [False, True], ids=["serial", "split"])
@settings(max_examples=40, deadline=None)
@given(x=arrays(), largest=st.booleans())
def test__argmax_argmin_over_a_strided_axis__equal_numpy(threads: bool, x: np.ndarray, largest: bool) -> None:
    op = tf.argmax if largest else tf.math.argmin
    fn = tf.function(lambda v: op(v, axis=-2), jit_compile=True)
    cache.clear()  # why: the executable cache does not key on the parallel threshold
    with config.context(PARALLEL_MIN_ELEMENTS=1 if threads else 1 << 40):
        got = fn(x).numpy()
        source = codelets(fn, x)
        engine = fn.get_concrete_function(x).executable("/device:CPU:0").as_text("engine")
    want = (np.argmax if largest else np.argmin)(x, axis=-2)
    np.testing.assert_array_equal(got, want)
    assert "take = " in source, "rendered row by row"
    assert "lo, hi" in source, "one codelet for a range of rows, run whole or on threads"
    assert ("split(K[" in engine) == threads
    packs = x.dtype in (np.float32, np.float16)
    assert ("packed = " in source) == packs, "float values ride in the int64 output beside their index"


def test__an_int32_output__gathers_the_best_value_again() -> None:
    x = np.array([[[1.0, 5.0], [3.0, np.nan], [3.0, 2.0]], [[0.0, -1.0], [-2.0, -1.0], [4.0, 9.0]]], np.float32)
    fn = tf.function(lambda v: tf.argmax(v, axis=1, output_type=tf.int32), jit_compile=True)
    np.testing.assert_array_equal(fn(x).numpy(), [[1, 1], [2, 2]])
    source = codelets(fn, x)
    assert "take = " in source and "packed = " not in source, "no room for the value beside an int32 index"


def test__ties_and_nans__first_occurrence_per_element() -> None:
    x = np.array([[[1.0, np.nan, -np.inf, 2.0], [3.0, 0.0, -np.inf, 2.0], [3.0, np.nan, -np.inf, np.nan]]],
                 np.float32)
    fn = tf.function(lambda v: [tf.argmax(v, axis=1), tf.math.argmin(v, axis=1)], jit_compile=True)
    biggest, smallest = (r.numpy() for r in fn(x))
    np.testing.assert_array_equal(biggest, [[1, 0, 0, 2]])
    np.testing.assert_array_equal(smallest, [[0, 0, 0, 2]])


def test__the_row_codelet__compiles_straight_to_llvm_ir_with_numbas_results(tmp_path) -> None:
    from popjit.codegen import compile as compile_module

    x = np.random.default_rng(5).integers(-2, 3, (3, 4, 5, 33)).astype(np.float32)
    x.reshape(-1)[::7] = np.nan
    results, libraries = {}, {}
    for direct in (True, False):
        with config.context(DIRECT_CODELETS=direct, CACHE_DIR=str(tmp_path / str(direct))):
            cache.clear()  # why: compile and link again, not reuse the program of the other mode
            compile_module._ENGINES.clear()
            fn = tf.function(lambda v: tf.argmax(v, axis=2), jit_compile=True)
            results[direct] = fn(x).numpy()
            exe = fn.get_concrete_function(x).executable("cpu")
            ((_engine, _table, libraries[direct]),) = exe.engine._linked.values()
            assert "take = " in exe.as_text("codelets")
    assert libraries[True].through_numba == 0, "no construct outside the direct translator's subset"
    np.testing.assert_array_equal(results[True], results[False])
    np.testing.assert_array_equal(results[True], np.argmax(x, axis=2))
