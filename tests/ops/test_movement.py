"""Property tests for the movement and creation ops: Python indexing, tf.slice / strided_slice,
split / unstack, tile, pad, concat / stack, expand_dims / squeeze, reverse, eye, fill / zeros /
ones / *_like and range.

Each hypothesis example runs compiled (``jit``), eagerly on the CPU and eagerly on
``/device:IPU:0`` and compares with NumPy (``x[key]``, ``np.split``, ``np.tile``, ``np.pad``...).
Compiled paths stay at rank <= 3 so the number of distinct codelet structures stays bounded.
"""

from __future__ import annotations

import builtins
import itertools
import sys
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import popjit.tensorflow as tf
from popjit.errors import InvalidArgumentError
from popjit.ir.loop import Kernel
from popjit.ops.movement import reshape_groups
from tests.ops.strategies import DTYPES, arrays, check_paths, finite_values, run_all, tensorflow_or_skip

ALL = list(DTYPES)


def small_shapes(min_dims: int = 0, max_dims: int = 3, max_side: int = 4) -> st.SearchStrategy[tuple[int, ...]]:
    return st.lists(st.integers(1, max_side), min_size=min_dims, max_size=max_dims).map(tuple)


@st.composite
def tensors(draw: Any, min_dims: int = 0, max_dims: int = 3, dtypes: Any = ALL) -> np.ndarray:
    """A small array of a random dtype (finite values: movement ops copy bits, NaN checks elsewhere)."""
    shape = draw(small_shapes(min_dims, max_dims))
    dtype = draw(st.sampled_from(dtypes))
    return draw(arrays(dtype, shape, lambda dt: finite_values(dt, 100)))


def compiled_kernels(fn: Any, *args: Any) -> list[Kernel]:
    """The kernels (compute sets) of ``fn`` compiled for these arguments."""
    cf = tf.function(fn, jit_compile=True).get_concrete_function(*args)
    return [s for s in cf.executable("cpu").program.walk() if isinstance(s, Kernel)]


def this_line() -> int:
    return sys._getframe(1).f_lineno


# ----------------------------------------------------------------------------------------------
# reshape


@given(runs=st.lists(st.tuples(st.lists(st.integers(1, 4), min_size=1, max_size=3), st.integers(0, 2)),
                    min_size=1, max_size=3))
def test__reshape_groups__pair_the_shortest_runs_of_equal_size(runs: list) -> None:
    """Shapes built from runs of factors (old: the factors; new: their product, the factors reversed, or
    the same): the runs found tile both shapes in order, have the same size on both sides, and no run
    could end sooner."""
    old: list[int] = []
    new: list[int] = []
    for factors, regroup in runs:
        old += factors
        new += [[int(np.prod(factors))], factors[::-1], factors][regroup]
    groups = reshape_groups(old, new)
    assert groups is not None
    assert groups[0][0].start == groups[0][1].start == 0
    assert groups[-1][0].stop == len(old) and groups[-1][1].stop == len(new)
    for (o, n), (o2, n2) in itertools.pairwise(groups):
        assert o.stop == o2.start and n.stop == n2.start
    for o, n in groups:
        assert np.prod(old[o]) == np.prod(new[n])
        sizes_new = {int(np.prod(new[n.start:cut])) for cut in range(n.start + 1, n.stop)}
        assert not any(int(np.prod(old[o.start:cut])) in sizes_new for cut in range(o.start + 1, o.stop))


def test__reshape_groups__cases() -> None:
    assert reshape_groups((2, 2, 3), (4, 3)) == [(slice(0, 2), slice(0, 1)), (slice(2, 3), slice(1, 2))]
    assert reshape_groups((6, 4), (4, 6)) == [(slice(0, 2), slice(0, 2))]
    assert reshape_groups((3, 1), (3,)) == [(slice(0, 1), slice(0, 1)), (slice(1, 2), slice(1, 1))]
    assert reshape_groups((2, 0), (0,)) is None


@given(data=st.data())
def test__reshape_merging_outer_axes_of_a_computed_value__fuses_into_its_reader(data: st.DataObject) -> None:
    """A computed value (here a transpose times two) whose outer axes a reshape merges, the innermost kept,
    is read through quotients and remainders by the reduction after it: one kernel, NumPy's values. A
    reshape that merges the innermost axis stores the value first (two kernels), with the same values."""
    a, b, c, d = (data.draw(st.integers(1, 4)) for _ in range(4))
    x = data.draw(arrays("float32", (a, b, c, d), lambda dt: finite_values(dt, 3)))

    def keeps_inner(x):
        return tf.reduce_max(tf.reshape(tf.transpose(x, [0, 2, 1, 3]) * 2.0, [a, c * b, d]), axis=1)

    def merges_inner(x):
        return tf.reduce_max(tf.reshape(tf.transpose(x, [0, 2, 1, 3]) * 2.0, [a, c * b * d]), axis=1)

    doubled = x.transpose(0, 2, 1, 3).astype(np.float64) * 2
    check_paths(run_all(keeps_inner, x), doubled.reshape(a, c * b, d).max(axis=1).astype(np.float32),
                what="max(reshape(2 transpose(x)), outer axes merged)")
    check_paths(run_all(merges_inner, x), doubled.reshape(a, -1).max(axis=1).astype(np.float32),
                what="max(reshape(2 transpose(x)), inner axis merged)")
    assert len(compiled_kernels(keeps_inner, x)) == 1
    if b > 1 and c > 1:  # a real transpose: its values are stored, then read by the reduction
        assert len(compiled_kernels(merges_inner, x)) == 2


# ----------------------------------------------------------------------------------------------
# Python indexing


@st.composite
def index_keys(draw: Any, shape: tuple[int, ...]) -> tuple:
    """A NumPy/TensorFlow basic index for ``shape``: ints, slices (any step), ``...`` and ``None``."""
    entries: list[Any] = []
    for d in shape:
        if draw(st.integers(0, 3)) == 0:
            entries.append(draw(st.integers(-d, d - 1)))
        else:
            bound = st.one_of(st.none(), st.integers(-d - 2, d + 2))
            step = st.one_of(st.none(), st.sampled_from([1, 2, 3, -1, -2, -3]))
            entries.append(builtins.slice(draw(bound), draw(bound), draw(step)))
    cut = draw(st.integers(0, len(entries)))
    if draw(st.booleans()) and entries:  # an ellipsis standing for a run of full slices
        lo = draw(st.integers(0, len(entries)))
        hi = draw(st.integers(lo, len(entries)))
        entries = entries[:lo] + [Ellipsis] + entries[hi:]
    elif draw(st.booleans()):
        entries = entries[:cut]  # trailing dimensions implicit
    for _ in range(draw(st.integers(0, 2))):
        entries.insert(draw(st.integers(0, len(entries))), None)
    return tuple(entries)


@given(data=st.data())
def test__getitem__python_index__matches_numpy(data: st.DataObject) -> None:
    x = data.draw(tensors())
    key = data.draw(index_keys(x.shape))
    check_paths(run_all(lambda t: t[key], x), x[key], exact=True, what=f"x{list(x.shape)}[{key}]")


@given(data=st.data())
def test__getitem__fused_with_elementwise__one_kernel(data: st.DataObject) -> None:
    a, b = data.draw(st.integers(2, 5)), data.draw(st.integers(1, 5))
    x = data.draw(arrays("float32", (a, b + 1), lambda dt: finite_values(dt, 3)))
    y = data.draw(arrays("float32", (b, a), lambda dt: finite_values(dt, 3)))

    def fn(x, y):
        return tf.exp(x[::-1, 1:]) + tf.transpose(y)

    expected = (np.exp(x[::-1, 1:].astype(np.float64)) + y.T).astype(np.float32)
    check_paths(run_all(fn, x, y), expected, what="exp(x[::-1, 1:]) + y.T")
    assert len(compiled_kernels(fn, x, y)) == 1


def test__getitem__static_int_drops_dim_without_copy() -> None:
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    kernels = compiled_kernels(lambda t: tf.sqrt(t[1, :, ::2]) * 2.0, x)
    assert len(kernels) == 1
    check_paths(run_all(lambda t: tf.sqrt(t[1, :, ::2]) * 2.0, x), np.sqrt(x[1, :, ::2]) * np.float32(2), what="")


def test__getitem__loop_counter_index__gathers_row_per_iteration() -> None:
    x = np.arange(20, dtype=np.float32).reshape(5, 4)

    def fn(x):
        acc = tf.zeros([4])
        for i in tf.range(5):
            acc = acc * 2.0 + x[i]
        return acc

    expected = np.zeros(4, np.float32)
    for row in x:
        expected = expected * 2 + row
    check_paths(run_all(fn, x), expected, what="loop x[i]")


def test__getitem__runtime_index__negative_wraps_and_out_of_range_clamps() -> None:
    x = np.arange(12, dtype=np.int32).reshape(3, 4)
    f = tf.function(lambda x, i: (x[i], x[:, i]), jit_compile=True)
    for i, row, col in [(1, 1, 1), (-1, 2, 3), (-3, 0, 1), (7, 2, 3), (-9, 0, 0)]:
        r, c = f(x, np.int32(i))
        np.testing.assert_array_equal(r.numpy(), x[row])
        np.testing.assert_array_equal(c.numpy(), x[:, col])


def test__getitem__scalar_tensor_index__eager_and_compiled() -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    check_paths(run_all(lambda t, i: t[i, 1:], x, np.int32(1)), x[1, 1:], exact=True, what="x[i, 1:]")
    check_paths(run_all(lambda t, i: t[..., i], x, np.int32(-1)), x[..., -1], exact=True, what="x[..., i]")


def test__getitem__variable_and_newaxis() -> None:
    v = tf.Variable(np.arange(6, dtype=np.float32).reshape(2, 3))
    np.testing.assert_array_equal(v[tf.newaxis, 1, ::-1].numpy(), v.numpy()[None, 1, ::-1])


@pytest.mark.parametrize("key", [(0, 0, 0), 2.5, [0, 1], (Ellipsis, Ellipsis)],
                         ids=["too-many", "float", "list", "two-ellipses"])
def test__getitem__bad_index__raises(key: Any) -> None:
    x = tf.constant(np.zeros((2, 3), np.float32))
    with pytest.raises((InvalidArgumentError, TypeError)):
        x[key]


# ----------------------------------------------------------------------------------------------
# tf.slice and tf.strided_slice


@given(data=st.data())
def test__slice__matches_numpy(data: st.DataObject) -> None:
    x = data.draw(tensors(min_dims=1))
    begin = [data.draw(st.integers(0, d)) for d in x.shape]
    size = [data.draw(st.sampled_from([-1, data.draw(st.integers(0, d - b))])) for b, d in zip(begin, x.shape)]
    expected = x[tuple(builtins.slice(b, None if s == -1 else b + s) for b, s in zip(begin, size))]
    check_paths(run_all(lambda t: tf.slice(t, begin, size), x), expected, exact=True, what=f"slice {begin} {size}")


def test__slice__runtime_begin__clamps_to_fit() -> None:
    x = np.arange(20, dtype=np.float32).reshape(4, 5)
    f = tf.function(lambda x, b: tf.slice(x, b, [2, 3]), jit_compile=True)
    for b, at in [([1, 1], (1, 1)), ([3, 4], (2, 2)), ([-2, 0], (0, 0))]:
        np.testing.assert_array_equal(f(x, np.array(b, np.int32)).numpy(), x[at[0]:at[0] + 2, at[1]:at[1] + 3])


STRIDED = [  # (begin, end, strides, masks), equivalent NumPy key
    (([1, 0], [3, 4], [1, 2], {}), (builtins.slice(1, 3, 1), builtins.slice(0, 4, 2))),
    (([2, 0], [0, 0], [-1, 1], {"end_mask": 3}), (builtins.slice(2, None, -1), builtins.slice(0, None, 1))),
    (([1, 0], [2, 0], [1, 1], {"shrink_axis_mask": 1, "end_mask": 2}), (1, builtins.slice(0, None))),
    (([0, 1], [0, 3], [1, 1], {"ellipsis_mask": 1}), (Ellipsis, builtins.slice(1, 3))),
    (([0, 0, 1], [0, 0, 2], [1, 1, 1], {"new_axis_mask": 2, "begin_mask": 1, "end_mask": 1}),
     (builtins.slice(None), None, builtins.slice(1, 2))),
]


@pytest.mark.parametrize(("args", "key"), STRIDED)
def test__strided_slice__masks__match_numpy_key(args: tuple, key: tuple) -> None:
    begin, end, strides, masks = args
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    check_paths(run_all(lambda t: tf.strided_slice(t, begin, end, strides, **masks), x), x[key], exact=True,
                what=f"strided_slice {args}")


@pytest.mark.parametrize(("args", "key"), STRIDED)
def test__strided_slice__agrees_with_tensorflow(args: tuple, key: tuple) -> None:
    real_tf = tensorflow_or_skip()
    begin, end, strides, masks = args
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    expected = real_tf.strided_slice(x, begin, end, strides, **masks).numpy()
    np.testing.assert_array_equal(tf.strided_slice(x, begin, end, strides, **masks).numpy(), expected)


# ----------------------------------------------------------------------------------------------
# split, unstack, tile, pad, reverse


@given(data=st.data())
def test__split__num_and_sizes__match_numpy(data: st.DataObject) -> None:
    x = data.draw(tensors(min_dims=1))
    axis = data.draw(st.integers(-x.ndim, x.ndim - 1))
    d = x.shape[axis]
    if data.draw(st.booleans()):
        num = data.draw(st.sampled_from([k for k in range(1, d + 1) if d % k == 0]))
        spec: Any = num
        expected = tuple(np.split(x, num, axis=axis))
    else:
        cuts = sorted(data.draw(st.lists(st.integers(0, d), max_size=3)))
        sizes = list(np.diff([0, *cuts, d]))
        if data.draw(st.booleans()):
            sizes[data.draw(st.integers(0, len(sizes) - 1))] = -1
        spec = sizes
        expected = tuple(np.split(x, cuts, axis=axis))
    check_paths(run_all(lambda t: tuple(tf.split(t, spec, axis=axis)), x), expected, exact=True,
                what=f"split {spec} axis {axis}")


@given(data=st.data())
def test__unstack__matches_numpy(data: st.DataObject) -> None:
    x = data.draw(tensors(min_dims=1))
    axis = data.draw(st.integers(-x.ndim, x.ndim - 1))
    expected = tuple(np.moveaxis(x, axis, 0))
    check_paths(run_all(lambda t: tuple(tf.unstack(t, axis=axis)), x), expected, exact=True, what=f"unstack {axis}")


@given(data=st.data())
def test__tile__matches_numpy(data: st.DataObject) -> None:
    x = data.draw(tensors())
    multiples = [data.draw(st.integers(1, 3)) for _ in x.shape]
    check_paths(run_all(lambda t: tf.tile(t, multiples), x), np.tile(x, multiples).reshape(
        [d * m for d, m in zip(x.shape, multiples)]), exact=True, what=f"tile {multiples}")


@given(data=st.data())
def test__pad__modes__match_numpy(data: st.DataObject) -> None:
    x = data.draw(tensors(min_dims=1))
    mode = data.draw(st.sampled_from(["CONSTANT", "REFLECT", "SYMMETRIC"]))
    limit = {"CONSTANT": lambda d: 3, "REFLECT": lambda d: d - 1, "SYMMETRIC": lambda d: d}[mode]
    pads = [[data.draw(st.integers(0, limit(d))) for _ in range(2)] for d in x.shape]
    if mode == "CONSTANT":
        value = data.draw(finite_values(x.dtype, 50))
        expected = np.pad(x, pads, constant_values=np.asarray(value, x.dtype))
        fn = lambda t: tf.pad(t, pads, constant_values=value)  # noqa: E731
    else:
        expected = np.pad(x, pads, mode=mode.lower())
        fn = lambda t: tf.pad(t, pads, mode=mode)  # noqa: E731
    check_paths(run_all(fn, x), expected, exact=True, what=f"pad {mode} {pads}")


def test__pad__fused_with_elementwise__one_kernel() -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)

    def fn(t):
        return tf.pad(t * 2.0, [[1, 0], [0, 2]], constant_values=-1.0) + 1.0

    assert len(compiled_kernels(fn, x)) == 1
    check_paths(run_all(fn, x), np.pad(x * 2, [[1, 0], [0, 2]], constant_values=-1.0) + np.float32(1), what="pad")


@given(data=st.data())
def test__reverse__matches_numpy(data: st.DataObject) -> None:
    x = data.draw(tensors(min_dims=1))
    axes = data.draw(st.lists(st.integers(0, x.ndim - 1), unique=True, max_size=x.ndim))
    check_paths(run_all(lambda t: tf.reverse(t, axes), x), np.flip(x, axes) if axes else x, exact=True,
                what=f"reverse {axes}")


# ----------------------------------------------------------------------------------------------
# concat, stack, expand_dims, squeeze


@given(data=st.data())
def test__concat__matches_numpy(data: st.DataObject) -> None:
    x = data.draw(tensors(min_dims=1))
    axis = data.draw(st.integers(-x.ndim, x.ndim - 1))
    parts = [x]
    for _ in range(data.draw(st.integers(0, 5))):
        shape = list(x.shape)
        shape[axis] = data.draw(st.integers(0, 3))
        parts.append(data.draw(arrays(str(x.dtype), shape, lambda dt: finite_values(dt, 100))))
    check_paths(run_all(lambda *ts: tf.concat(list(ts), axis), *parts), np.concatenate(parts, axis), exact=True,
                what=f"concat {len(parts)} axis {axis}")


def test__concat__computed_parts_get_a_kernel_each_and_stored_parts_one_select() -> None:
    """A select would evaluate every computed part at every element (an LSTM's four gate gradients:
    four times the work); stored parts are cheap to select between, so they stay one fused kernel."""
    x, y = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4), np.ones((3, 2), np.float32)

    def computed(a, b):
        return tf.concat([tf.tanh(a) * 2.0, tf.exp(b), a * b[:, :1]], axis=1)

    kernels = [k for k in compiled_kernels(computed, x, y) if "concat" in k.name]
    assert sorted(k.size for k in kernels) == [6, 12, 12]
    want = np.concatenate([np.tanh(x) * 2, np.exp(y), x * y[:, :1]], axis=1)
    np.testing.assert_allclose(tf.function(computed, jit_compile=True)(x, y).numpy(), want, rtol=1e-6)

    def stored(a, b):
        return tf.concat([a, b], axis=1) * 3.0

    kernels = compiled_kernels(stored, x, y)
    assert [k.size for k in kernels if "concat" in k.name] == [18]
    np.testing.assert_array_equal(tf.function(stored, jit_compile=True)(x, y).numpy(),
                                  np.concatenate([x, y], axis=1) * 3)


@given(data=st.data())
def test__stack__matches_numpy(data: st.DataObject) -> None:
    x = data.draw(tensors(max_dims=2))
    axis = data.draw(st.integers(-x.ndim - 1, x.ndim))
    y = data.draw(arrays(str(x.dtype), x.shape, lambda dt: finite_values(dt, 100)))
    check_paths(run_all(lambda a, b: tf.stack([a, b, a], axis), x, y), np.stack([x, y, x], axis), exact=True,
                what=f"stack axis {axis}")


@given(data=st.data())
def test__expand_dims_and_squeeze__match_numpy(data: st.DataObject) -> None:
    x = data.draw(tensors())
    axis = data.draw(st.integers(-x.ndim - 1, x.ndim))
    ones = [k for k, d in enumerate(x.shape) if d == 1]
    sq = data.draw(st.lists(st.sampled_from(ones), unique=True)) if ones else []

    def fn(t):
        return tf.expand_dims(t, axis), tf.squeeze(t, sq or None)

    expected = (np.expand_dims(x, axis), np.squeeze(x, tuple(sq)) if sq else np.squeeze(x))
    check_paths(run_all(fn, x), expected, exact=True, what=f"expand_dims {axis} / squeeze {sq}")


# ----------------------------------------------------------------------------------------------
# Creation: eye, fill, zeros, ones, *_like, range


@given(rows=st.integers(0, 4), cols=st.one_of(st.none(), st.integers(0, 4)), batch=small_shapes(0, 2, 3),
       dtype=st.sampled_from(ALL))
def test__eye__matches_numpy(rows: int, cols: int | None, batch: tuple, dtype: str) -> None:
    expected = np.broadcast_to(np.eye(rows, cols, dtype=dtype), (*batch, rows, rows if cols is None else cols))
    got = {p: r for p, r in run_all(lambda: tf.eye(rows, cols, batch_shape=list(batch), dtype=dtype)).items()}
    check_paths(got, expected.copy(), exact=True, what=f"eye {rows} {cols} {batch}")


@given(shape=small_shapes(), dtype=st.sampled_from(ALL), data=st.data())
def test__fill_zeros_ones_like__match_numpy(shape: tuple, dtype: str, data: st.DataObject) -> None:
    value = data.draw(finite_values(np.dtype(dtype), 100))
    x = np.zeros(shape, dtype)

    def fn(t):
        return (tf.fill(list(shape), tf.constant(value, dtype=dtype)), tf.zeros(shape, dtype), tf.ones(shape, dtype),
                tf.zeros_like(t), tf.ones_like(t, dtype="float32"))

    expected = (np.full(shape, value, dtype), np.zeros(shape, dtype), np.ones(shape, dtype), np.zeros(shape, dtype),
                np.ones(shape, np.float32))
    check_paths(run_all(fn, x), expected, exact=True, what=f"fill/zeros/ones {shape} {dtype}")


@given(start=st.integers(-10, 10), limit=st.integers(-10, 10), delta=st.sampled_from([1, 2, 3, -1, -2, -4]))
def test__range__ints__match_numpy(start: int, limit: int, delta: int) -> None:
    if (delta > 0) != (start <= limit) and start != limit:
        with pytest.raises(InvalidArgumentError, match="Requires start"):
            tf.range(start, limit, delta)
        return
    check_paths(run_all(lambda: tf.range(start, limit, delta)), np.arange(start, limit, delta, dtype=np.int32),
                exact=True, what=f"range({start}, {limit}, {delta})")


@given(start=st.floats(-5, 5), span=st.floats(0, 8), delta=st.sampled_from([0.5, 0.25, 1.5, 0.3]),
       down=st.booleans(), dtype=st.sampled_from(["float32", "float16"]))
def test__range__floats_and_negative_deltas__match_numpy(start: float, span: float, delta: float, down: bool,
                                                         dtype: str) -> None:
    t = np.dtype(dtype).type  # TensorFlow casts the bounds to dtype and sizes the ramp in that arithmetic
    s, d = t(start), t(-delta if down else delta)
    lim = t(start - span if down else start + span)
    n = int(np.ceil(np.abs((lim - s) / d)))
    expected = (s.astype(np.float64) + d * np.arange(n)).astype(dtype)
    check_paths(run_all(lambda: tf.range(float(s), float(lim), float(d), dtype=dtype)), expected,
                tol={"atol": 2e-2 if dtype == "float16" else 1e-5}, what=f"range({s}, {lim}, {d})")


def test__range__dtype_inference() -> None:
    assert tf.range(5).dtype == tf.int32
    assert tf.range(5.0).dtype == tf.float32
    assert tf.range(0, 5, 0.5).dtype == tf.float32
    assert tf.range(tf.constant(3, tf.int64)).dtype == tf.int64
    np.testing.assert_array_equal(tf.range(5.0, 0, -1.5).numpy(), np.array([5, 3.5, 2, 0.5], np.float32))


# ----------------------------------------------------------------------------------------------
# Errors name the user's line, eagerly and while tracing


def _raise_at(fn: Any, line: int, *, compiled: bool, match: str | None = None) -> None:
    x = np.zeros((2, 3), np.float32)
    run = tf.function(fn, jit_compile=True) if compiled else fn
    with pytest.raises(InvalidArgumentError, match=match) as info:
        run(tf.constant(x) if not compiled else x)
    assert f"{__file__}\", line {line}" in str(info.value), str(info.value)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "jit"])
def test__errors__name_the_user_line(compiled: bool) -> None:
    def bad_index(x):
        return x[5]
    _raise_at(bad_index, this_line() - 1, compiled=compiled, match="out of bounds")

    def bad_concat(x):
        return tf.concat([x, tf.zeros([3, 3])], axis=1)
    _raise_at(bad_concat, this_line() - 1, compiled=compiled, match="Dimension 0")

    def bad_concat_axis(x):
        return tf.concat([x, x], axis=2)
    _raise_at(bad_concat_axis, this_line() - 1, compiled=compiled, match="Invalid reduction dimension 2|axis")

    def bad_split(x):
        return tf.split(x, 2, axis=1)
    _raise_at(bad_split, this_line() - 1, compiled=compiled, match="evenly divide")

    def bad_unstack_axis(x):
        return tf.unstack(x, axis=3)
    _raise_at(bad_unstack_axis, this_line() - 1, compiled=compiled, match="axis")

    def bad_squeeze(x):
        return tf.squeeze(x, 0)
    _raise_at(bad_squeeze, this_line() - 1, compiled=compiled, match="squeeze")

    def bad_stack(x):
        return tf.stack([x, x[0]])
    _raise_at(bad_stack, this_line() - 1, compiled=compiled, match="Shapes of all inputs must match")

    def bad_pad(x):
        return tf.pad(x, [[2, 2], [0, 0]], "REFLECT")
    _raise_at(bad_pad, this_line() - 1, compiled=compiled, match="paddings must be less than")

    def bad_tile(x):
        return tf.tile(x, [2])
    _raise_at(bad_tile, this_line() - 1, compiled=compiled, match="multiples")


def test__errors__runtime_slice_bound__is_refused_with_xla_message() -> None:
    f = tf.function(lambda x, n: x[:n], jit_compile=True)
    with pytest.raises(InvalidArgumentError, match="compile-time constant"):
        f(np.zeros(4, np.float32), np.int32(2))


# ----------------------------------------------------------------------------------------------
# Every IR level agrees: graph interpreter == loop-IR interpreter == compiled engine


def _mixed_program(x, i):
    a, b = tf.split(tf.pad(x, [[1, 0], [0, 2]], "SYMMETRIC"), [1, 4], axis=1)
    g = tf.gather(tf.tile(b, [1, 2]), i, axis=1)
    r = tf.random.stateless_uniform(g.shape, seed=[3, 4])
    hot = tf.one_hot(i, 5, dtype=tf.float32)
    return g * r + a[::-1], tf.reduce_sum(hot, axis=0) + x[i[0]][:1], tf.eye(3)[1:, ::-1]


def test__levels__movement_gather_random__agree() -> None:
    from popjit.graph.interpret import interpret as run_graph
    from popjit.loop.interpret import interpret as run_loop
    from popjit.pipeline import compile_graph, lower_graph, optimize_graph
    from popjit.schedule import make_target

    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    i = np.array([3, 0, 7], np.int32)
    graph = tf.function(_mixed_program).get_concrete_function(x, i).graph
    reference, _ = run_graph(graph, [x, i])
    optimized = optimize_graph(graph)
    via_loop, _ = run_loop(lower_graph(optimized), [x, i])
    compiled = compile_graph(optimized, make_target()).run([x, i], {})
    eager = [t.numpy() for t in _mixed_program(tf.constant(x), tf.constant(i))]
    for ref, a, b, c in zip(reference, via_loop, compiled, eager):
        np.testing.assert_allclose(a, ref, rtol=1e-6)
        np.testing.assert_allclose(b, ref, rtol=1e-6)
        np.testing.assert_allclose(c, ref, rtol=1e-6)
