"""Arg-reductions over an axis that is not the unit-stride one (a max-pool gradient's argmax over a
window, channels last) render row by row (:func:`popjit.codegen.render._render_argreduce_rows`) and
give NumPy's indices: the first occurrence of the extreme, NaN counting as the extreme, for every
dtype, on one thread and split over threads."""

from __future__ import annotations

import re

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


def _row_loop_lines(source: str) -> list[str]:
    """The lines inside the row loops of the arg-reduction codelets in ``source``: the loop just inside
    each ``for r0`` loop."""
    lines, inside = source.splitlines(), []
    for at, line in enumerate(lines):
        if line.strip().startswith("for r0 in range("):
            r0_depth = len(line) - len(line.lstrip())
            row = next(j for j in range(at + 1, len(lines)) if lines[j].strip().startswith("for i"))
            depth = len(lines[row]) - len(lines[row].lstrip())
            assert depth > r0_depth
            for inner in lines[row + 1:]:
                if len(inner) - len(inner.lstrip()) <= depth:
                    break
                inside.append(inner)
    return inside


@pytest.mark.parametrize("pool,stride,padding,dtype", [(2, 2, "VALID", np.float32), (3, 2, "SAME", np.float32),
                                                      (2, 2, "VALID", np.float16)])
def test__a_max_pools_gradient__finds_each_windows_offset_once_per_window_position(pool, stride, padding,
                                                                                   dtype) -> None:
    """A max-pool's gradient takes the argmax of each window of the input, read at ``r0 // pool`` and
    ``r0 % pool`` rows and columns into the window: those are found in the ``r0`` loop, not again for
    every channel in the row loop (LLVM took twice as long to compile the codelet so)."""
    x = np.random.default_rng(7).integers(-3, 4, (2, 7, 8, 33)).astype(dtype)

    def pooled_gradient(v):
        with tf.GradientTape() as tape:
            tape.watch(v)
            y = tf.nn.max_pool2d(v, pool, stride, padding)
        return tape.gradient(y, v, output_gradients=tf.ones_like(y))

    fn = tf.function(pooled_gradient, jit_compile=True)
    np.testing.assert_array_equal(fn(x).numpy(), _max_pool_gradient(x, pool, stride, padding))
    source = codelets(fn, x)
    row = _row_loop_lines(source)
    assert "packed = " in "\n".join(row), "the packed argmax's row loop"
    assert "//" in source and "%" in source, "the window's rows and columns are quotient and remainder"
    assert not any("//" in line or "%" in line for line in row), "\n".join(row)


def _max_pool_gradient(x: np.ndarray, pool: int, stride: int, padding: str) -> np.ndarray:
    """The gradient of ``sum(max_pool2d(x))``: one for the first largest element of each window (its
    rows before its columns), summed where windows overlap."""
    n, h, w, c = x.shape
    oh, ow = (-(-h // stride), -(-w // stride)) if padding == "SAME" else ((h - pool) // stride + 1,
                                                                             (w - pool) // stride + 1)
    top = max((oh - 1) * stride + pool - h, 0) // 2 if padding == "SAME" else 0
    left = max((ow - 1) * stride + pool - w, 0) // 2 if padding == "SAME" else 0
    grad = np.zeros(x.shape, np.float64)
    for b, i, j, ch in np.ndindex(n, oh, ow, c):
        rows = [r for r in range(i * stride - top, i * stride - top + pool) if 0 <= r < h]
        cols = [q for q in range(j * stride - left, j * stride - left + pool) if 0 <= q < w]
        window = [(r, q) for r in rows for q in cols]
        r, q = max(window, key=lambda rq: (x[b, rq[0], rq[1], ch], -window.index(rq)))
        grad[b, r, q, ch] += 1
    return grad.astype(x.dtype)


def test__a_gathering_argmax__reads_the_best_value_again_in_the_row_loop() -> None:
    """With an int32 index there is no room for the value beside it: the best value so far is read at
    the index ``bi`` kept in the output, which changes along the row, so its read stays in the row loop
    while what does not change along it is found once per ``r0``."""
    x = np.random.default_rng(8).integers(-3, 4, (2, 6, 8, 33)).astype(np.int32)

    def windows_argmax(v):
        patches = tf.image.extract_patches(v + 1, [1, 2, 2, 1], [1, 2, 2, 1], [1, 1, 1, 1], "VALID")
        return tf.argmax(tf.reshape(patches, [2, 3, 4, 4, 33]), axis=3, output_type=tf.int32)

    fn = tf.function(windows_argmax, jit_compile=True)
    want = np.argmax(x.reshape(2, 3, 2, 4, 2, 33).transpose(0, 1, 3, 2, 4, 5).reshape(2, 3, 4, 4, 33), axis=3)
    np.testing.assert_array_equal(fn(x).numpy(), want)
    row = "\n".join(_row_loop_lines(codelets(fn, x)))
    assert "bi = " in row and "bi*" in row, "the best value read at the index kept so far, in the row loop"


def test__a_packed_argmax_of_an_expression__hoists_each_constant_once() -> None:
    # the first sweep (the window's first value) and the later ones read the same scale and constant: one
    # hoisted block, so each is loaded under one name, whichever sweep meets it first
    x = np.random.default_rng(0).standard_normal((3, 5, 7)).astype(np.float32)
    scale = np.float32(3.0)
    fn = tf.function(lambda v, s: tf.argmax(v * s - 1.0, axis=1), jit_compile=True)
    np.testing.assert_array_equal(fn(x, scale).numpy(), np.argmax(x * scale - np.float32(1.0), axis=1))
    source = fn.get_concrete_function(x, scale).executable("/device:CPU:0").as_text("codelets")
    row = next(c for c in source.split("\ndef ") if "packed = " in c)
    hoisted = [line.split(" = ")[0].strip() for line in row.splitlines() if re.match(r"\s+c\d+ = ", line)]
    assert hoisted and len(hoisted) == len(set(hoisted)), row
