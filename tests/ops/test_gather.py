"""Property tests for data-dependent indexing: tf.gather, tf.one_hot, tf.slice with a run-time begin.

Out-of-range gather indices clamp into range on every path (XLA's behaviour on the IPU; see
``popjit.ops.gather``); in-range results are cross-checked with the real TensorFlow when it is
installed.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import popjit.tensorflow as tf
from popjit.errors import InvalidArgumentError
from popjit.ir.loop import Kernel
from popjit.loop.passes import scatters
from tests.ops.strategies import DTYPES, arrays, check_paths, finite_values, run_all, tensorflow_or_skip


def _values(dt: np.dtype) -> st.SearchStrategy:
    return finite_values(dt, 100)


@st.composite
def gather_cases(draw: Any, batch: bool = False) -> tuple[np.ndarray, np.ndarray, int, int]:
    """(params, indices, axis, batch_dims) with some indices out of range (negative or too large)."""
    rank = draw(st.integers(1, 3))
    shape = tuple(draw(st.integers(1, 4)) for _ in range(rank))
    b = draw(st.integers(0, min(1, rank - 1))) if batch else 0
    axis = draw(st.integers(b, rank - 1))
    ishape = shape[:b] + tuple(draw(st.integers(1, 3)) for _ in range(draw(st.integers(0, 2 - b))))
    params = draw(arrays(draw(st.sampled_from(DTYPES)), shape, _values))
    d = shape[axis]
    indices = draw(arrays("int32", ishape, lambda dt: st.integers(-2, d + 1)))
    return params, indices, axis, b


def numpy_gather(params: np.ndarray, indices: np.ndarray, axis: int, batch_dims: int = 0) -> np.ndarray:
    """An independent statement of clamped gather: loop over the output's batch and index positions."""
    ind = np.clip(indices, 0, params.shape[axis] - 1)
    if batch_dims == 0:
        return np.take(params, ind, axis=axis)
    return np.stack([np.take(params[k], ind[k], axis=axis - 1) for k in range(params.shape[0])])


@given(case=gather_cases())
def test__gather__matches_numpy_with_clamping(case: tuple) -> None:
    params, indices, axis, _ = case
    check_paths(run_all(lambda p, i: tf.gather(p, i, axis=axis), params, indices),
                numpy_gather(params, indices, axis), exact=True, what=f"gather axis {axis}")


@given(case=gather_cases(batch=True))
def test__gather__batch_dims__matches_numpy(case: tuple) -> None:
    params, indices, axis, b = case
    check_paths(run_all(lambda p, i: tf.gather(p, i, axis=axis, batch_dims=b), params, indices),
                numpy_gather(params, indices, axis, b), exact=True, what=f"gather axis {axis} batch_dims {b}")


def test__gather__agrees_with_tensorflow_in_range() -> None:
    real_tf = tensorflow_or_skip()
    rng = np.random.default_rng(0)
    params = rng.standard_normal((3, 4, 2)).astype(np.float32)
    for axis, batch_dims, indices in [(0, 0, [[2, 0], [1, 1]]), (1, 0, [3, 0, 2]), (2, 0, 1),
                                      (1, 1, [[0, 3], [1, 1], [2, 0]])]:
        ind = np.array(indices, np.int32)
        expected = real_tf.gather(params, ind, axis=axis, batch_dims=batch_dims).numpy()
        np.testing.assert_array_equal(tf.gather(params, ind, axis=axis, batch_dims=batch_dims).numpy(), expected)


def test__gather__fused_with_elementwise__one_kernel() -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    i = np.array([2, 0, 2], np.int32)

    def fn(x, i):
        return tf.gather(x * 2.0, i) + 1.0

    cf = tf.function(fn, jit_compile=True).get_concrete_function(x, i)
    kernels = [s for s in cf.executable("cpu").program.walk() if isinstance(s, Kernel)]
    assert len(kernels) == 1
    check_paths(run_all(fn, x, i), x[i] * 2 + 1, what="gather fused")


def test__gather__index_computed_in_loop() -> None:
    table = np.arange(10, dtype=np.float32) * 10

    def fn(t):
        acc = tf.constant(0.0)
        j = tf.constant(0)
        for _ in tf.range(4):
            acc = acc + tf.gather(t, j)
            j = (j * 3 + 1) % 10
        return acc

    check_paths(run_all(fn, table), np.float32(0 + 10 + 40 + 30), what="loop gather")


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"axis": 2}, "axis"), ({"axis": 0, "batch_dims": 1}, "batch_dims"), ({"axis": -3}, "axis")])
def test__gather__bad_arguments__raise(kwargs: dict, match: str) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        tf.gather(np.zeros((2, 3), np.float32), np.zeros((2,), np.int32), **kwargs)
    with pytest.raises(TypeError, match="indices"):
        tf.gather(np.zeros((2, 3), np.float32), np.zeros((2,), np.float32))


# ----------------------------------------------------------------------------------------------
# one_hot


@given(data=st.data())
def test__one_hot__matches_numpy(data: st.DataObject) -> None:
    ishape = tuple(data.draw(st.lists(st.integers(1, 4), max_size=2)))
    depth = data.draw(st.integers(0, 5))
    indices = data.draw(arrays("int32", ishape, lambda dt: st.integers(-1, depth + 1)))
    axis = data.draw(st.integers(-1, len(ishape)))
    dtype = data.draw(st.sampled_from(DTYPES))
    on, off = data.draw(_values(np.dtype(dtype))), data.draw(_values(np.dtype(dtype)))
    ax = len(ishape) if axis == -1 else axis
    hot = np.moveaxis(indices[..., None] == np.arange(depth), -1, ax)
    expected = np.where(hot, np.asarray(on, dtype), np.asarray(off, dtype)).astype(dtype)
    fn = lambda i: tf.one_hot(i, depth, on_value=on, off_value=off, axis=axis, dtype=dtype)  # noqa: E731
    check_paths(run_all(fn, indices), expected, exact=True, what=f"one_hot depth {depth} axis {axis}")


def test__one_hot__defaults_and_dtype_inference() -> None:
    np.testing.assert_array_equal(tf.one_hot([0, 2, -1, 5], 3).numpy(), np.eye(3, dtype=np.float32)[[0, 2, 0, 0]] *
                                  np.array([[1], [1], [0], [0]], np.float32))
    assert tf.one_hot([1], 2, on_value=5, off_value=-1).dtype == tf.int32


def test__one_hot__agrees_with_tensorflow() -> None:
    real_tf = tensorflow_or_skip()
    ind = np.array([[0, 3], [-1, 2]], np.int32)
    for axis in (-1, 0, 1):
        expected = real_tf.one_hot(ind, 3, on_value=2.0, off_value=-1.0, axis=axis).numpy()
        np.testing.assert_array_equal(tf.one_hot(ind, 3, on_value=2.0, off_value=-1.0, axis=axis).numpy(), expected)


# ----------------------------------------------------------------------------------------------
# tf.slice with a run-time begin (dynamic slice)


@given(data=st.data())
def test__dynamic_slice__clamps_start_like_xla(data: st.DataObject) -> None:
    shape = tuple(data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    x = data.draw(arrays("float32", shape, _values))
    size = [data.draw(st.integers(0, d)) for d in shape]
    begin = np.array([data.draw(st.integers(-2, d + 1)) for d in shape], np.int32)
    start = [int(np.clip(b, 0, d - n)) for b, d, n in zip(begin, shape, size)]
    expected = x[tuple(slice(s, s + n) for s, n in zip(start, size))]
    got = tf.function(lambda t, b: tf.slice(t, b, size), jit_compile=True)(x, begin).numpy()
    np.testing.assert_array_equal(got, expected)


# -- unsorted_segment_sum: the adjoint of gather ---------------------------------------------------


@st.composite
def segment_cases(draw: Any) -> tuple[np.ndarray, np.ndarray, int]:
    """(data, segment_ids, num_segments) with some ids out of range, which are dropped."""
    ishape = tuple(draw(st.integers(1, 4)) for _ in range(draw(st.integers(1, 2))))
    inner = tuple(draw(st.integers(1, 3)) for _ in range(draw(st.integers(0, 2))))
    dt = draw(st.sampled_from(["float32", "float16", "int32"]))
    data = draw(arrays(dt, ishape + inner, lambda d: finite_values(d, 50)))
    num_segments = draw(st.integers(0, 5))
    ids = draw(arrays("int32", ishape, lambda _: st.integers(-1, num_segments)))
    return data, ids, num_segments


def numpy_segment_sum(data: np.ndarray, ids: np.ndarray, num_segments: int) -> np.ndarray:
    """A loop over the id positions, adding each data row into its segment."""
    rows = data.reshape(ids.size, *data.shape[ids.ndim:])
    out = np.zeros((num_segments, *data.shape[ids.ndim:]), np.float64)
    for row, s in zip(rows, ids.reshape(-1), strict=True):
        if 0 <= s < num_segments:
            out[s] += row
    return out.astype(data.dtype)


@given(case=segment_cases())
def test__unsorted_segment_sum__matches_numpy_dropping_out_of_range_ids(case: tuple) -> None:
    data, ids, n = case
    check_paths(run_all(lambda d, i: tf.math.unsorted_segment_sum(d, i, n), data, ids),
                numpy_segment_sum(data, ids, n), exact=data.dtype.kind == "i", what=f"segment_sum into {n}")


def test__unsorted_segment_sum__is_a_scatter_over_the_data_run_serially_when_ids_collide() -> None:
    # Large enough for the engine's parallel split, with every id repeated thousands of times: a
    # parallel scatter would lose additions. The work is one pass over the data (|data| steps), not a
    # reduction over the ids for every output element (|out| x |ids|).
    rng = np.random.default_rng(0)
    data = rng.integers(-3, 4, size=(300_000, 2)).astype(np.float32)
    ids = rng.integers(-1, 6, size=300_000).astype(np.int32)
    fn = tf.function(lambda d, i: tf.math.unsorted_segment_sum(d, i, 5), jit_compile=True)
    np.testing.assert_array_equal(fn(data, ids).numpy(), numpy_segment_sum(data, ids, 5))
    exe = fn.get_concrete_function(data, ids).executable("/device:IPU:0")
    kernels = [s for s in exe.program.walk() if isinstance(s, Kernel)]
    assert max(k.size for k in kernels) == data.size and all(k.reduce is None for k in kernels)
    assert [k.size for k in kernels if scatters(k)] == [data.size]  # the engine runs it on one thread


def test__embedding_gradient__costs_the_ids_rows_not_the_table_times_the_ids() -> None:
    table = tf.Variable(np.zeros((20_000, 16), np.float32))
    ids = np.arange(2_560, dtype=np.int32).reshape(32, 80) * 7 % 20_000

    @tf.function(jit_compile=True)
    def step(i):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.gather(table, i) ** 2 + tf.gather(table, i))
        return tape.gradient(loss, table)

    grad = step(ids).numpy()
    expected = np.zeros((20_000, 16), np.float32)
    np.add.at(expected, ids.reshape(-1), 1.0)
    np.testing.assert_array_equal(grad, expected)
    exe = step.get_concrete_function(ids).executable("/device:IPU:0")
    work = sum(s.size * (np.prod(s.reduce.rdomain) if s.reduce else 1) for s in exe.program.walk()
               if isinstance(s, Kernel))
    assert work < 4 * 20_000 * 16 + 4 * 2_560 * 16  # a few passes over the table and the rows, not 2,560 x table


def test__unsorted_segment_sum__ids_must_prefix_data_shape() -> None:
    with pytest.raises(InvalidArgumentError, match=r"does not start with segment_ids\.shape"):
        tf.math.unsorted_segment_sum(tf.zeros([3, 2]), tf.constant([0, 1]), 2)
