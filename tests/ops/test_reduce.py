"""Property tests for every reduction in the registry (sum, prod, max, min, any, all, argmax,
argmin, cumsum) and for ``reduce_mean``, table-driven like ``test_elementwise``.

Each hypothesis example draws a shape (rank 0..3, size-1 dims, never empty), values with edge
cases, and the op's parameters (axis None / int / negative / list, keepdims; argmax's output
type; cumsum's exclusive and reverse), runs the op compiled, eagerly on the CPU and eagerly on
``/device:IPU:0``, and compares each with the registry's NumPy reference, which must itself agree
with an independent oracle (float64 accumulation, or plain Python loops). Sums are compared with a
tolerance scaled by the sum of magnitudes, since the summation order is the implementation's.

Chosen semantics (see also :mod:`tests.ops.strategies`): float16 sums accumulate in float32 and
round once; int32 sums (and means) wrap; argmax/argmin return the first index of the extreme,
NaN counting as the extreme; int32 means truncate toward zero.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import popjit.tensorflow as tf
from popjit import dtypes
from popjit.errors import InvalidArgumentError, UnimplementedError
from popjit.ir.graph import Aval
from popjit.ops import registry
from tests.ops.strategies import (
    DTYPES,
    INT32_MAX,
    INT32_MIN,
    Elements,
    any_values,
    arrays,
    assert_matches,
    bounded,
    check_paths,
    run_all,
    run_path,
    shapes,
    tensorflow_or_skip,
)

F, H, I, B = "float32", "float16", "int32", "bool"
NUMERIC = (F, H, I)
MAX_DIMS = 3  # bounds the number of distinct compiled structures


@dataclass(frozen=True)
class Reduction:
    """One reduction under test. ``draw_params(data, ndim)`` draws its keyword parameters;
    ``fn(tf, x, **params)`` is the TF-named call; ``reference(x, **params)`` the expected value."""

    op: str
    fn: Callable[..., Any]
    dtypes: tuple[str, ...]
    kind: str  # "reduce" | "arg" | "scan" | "mean"
    elements: Elements = any_values
    oracle: Callable[..., np.ndarray] | None = None
    min_dims: int = 0

    @property
    def id(self) -> str:
        return self.op

    def popjit_fn(self, **params: Any) -> Callable[..., Any]:
        return lambda x: self.fn(tf, x, **params)

    def reference(self, x: np.ndarray, **params: Any) -> np.ndarray:
        if self.kind == "mean":
            return _mean_oracle(x, **params)
        op = registry.get(self.op)
        if self.kind == "reduce":
            axis = params["axis"]
            axes = tuple(range(x.ndim)) if axis is None else axis
            return op.reference(x, axes=axes, keepdims=params["keepdims"])
        if self.kind == "arg":
            axis = 0 if params["axis"] is None else params["axis"]
            return op.reference(x, axis=axis, output_type=dtypes.as_dtype(params["output_type"]))
        return op.reference(x, **params)


# ----------------------------------------------------------------------------------------------
# Parameters


def _axes(data: st.DataObject, ndim: int) -> Any:
    """None, an int (maybe negative), or a list of distinct axes (maybe negative, maybe empty)."""
    if ndim == 0:
        return data.draw(st.sampled_from([None, []]), label="axis")
    one = st.integers(-ndim, ndim - 1)
    many = st.lists(st.integers(0, ndim - 1), unique=True, max_size=ndim).flatmap(
        lambda axs: st.tuples(*[st.sampled_from([a, a - ndim]) for a in axs]).map(list))
    return data.draw(st.one_of(st.none(), one, many), label="axis")


def reduce_params(data: st.DataObject, ndim: int) -> dict[str, Any]:
    return {"axis": _axes(data, ndim), "keepdims": data.draw(st.booleans(), label="keepdims")}


def arg_params(data: st.DataObject, ndim: int) -> dict[str, Any]:
    axis = data.draw(st.one_of(st.none(), st.integers(-ndim, ndim - 1)), label="axis")
    return {"axis": axis, "output_type": data.draw(st.sampled_from(["int32", "int64"]), label="output_type")}


def scan_params(data: st.DataObject, ndim: int) -> dict[str, Any]:
    return {"axis": data.draw(st.integers(-ndim, ndim - 1), label="axis"),
            "exclusive": data.draw(st.booleans(), label="exclusive"),
            "reverse": data.draw(st.booleans(), label="reverse")}


PARAMS = {"reduce": reduce_params, "mean": reduce_params, "arg": arg_params, "scan": scan_params}


# ----------------------------------------------------------------------------------------------
# Oracles, independent of the registry references


def _norm_axes(axis: Any, ndim: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    axs = [axis] if isinstance(axis, int) else list(axis)
    return tuple(sorted(a % ndim for a in axs)) if ndim else ()


def _wrap32(v: int) -> int:
    return (int(v) + 2**31) % 2**32 - 2**31


def _along(x: np.ndarray, axes: tuple[int, ...], keepdims: bool, fn: Callable[[np.ndarray], Any],
           out: Any) -> np.ndarray:
    """Apply ``fn`` to each 1-D run of the reduced axes (moved last and flattened)."""
    kept = [a for a in range(x.ndim) if a not in axes]
    moved = np.transpose(x, kept + list(axes)).reshape([x.shape[a] for a in kept] + [-1])
    flat = moved.reshape(-1, moved.shape[-1])
    with np.errstate(all="ignore"):
        vals = np.array([fn(row) for row in flat], dtype=object).astype(out)
    res = vals.reshape([x.shape[a] for a in kept])
    if keepdims:
        res = res.reshape([1 if a in axes else x.shape[a] for a in range(x.ndim)])
    return res


def _sum_row(row: np.ndarray) -> Any:
    if row.dtype.kind == "i":
        return _wrap32(sum(int(v) for v in row))
    return math.fsum(float(v) for v in row) if np.all(np.isfinite(row)) else float(np.sum(row, dtype=np.float64))


def _prod_row(row: np.ndarray) -> Any:
    if row.dtype.kind == "i":
        p = 1
        for v in row:
            p = _wrap32(p * int(v))
        return p
    return float(np.prod(row.astype(np.float64)))


def _extreme_row(pick: Callable[[Any, Any], bool]) -> Callable[[np.ndarray], Any]:
    def reduce(row: np.ndarray) -> Any:
        best = row[0]
        for v in row[1:]:
            if v != v or best != best:
                best = v if best == best else best
            elif pick(v, best):
                best = v
        return best

    return reduce


def reduce_oracle(name: str) -> Callable[..., np.ndarray]:
    rows = {"reduce_sum": _sum_row, "reduce_prod": _prod_row, "reduce_max": _extreme_row(lambda a, b: a > b),
            "reduce_min": _extreme_row(lambda a, b: a < b), "reduce_any": lambda r: bool(any(r)),
            "reduce_all": lambda r: bool(all(r))}

    def oracle(x: np.ndarray, axis: Any, keepdims: bool) -> np.ndarray:
        return _along(x, _norm_axes(axis, x.ndim), keepdims, rows[name], x.dtype)

    return oracle


def arg_oracle(better: Callable[[Any, Any], bool]) -> Callable[..., np.ndarray]:
    def first_index(row: np.ndarray) -> int:
        best = 0
        for k in range(1, len(row)):
            if row[best] != row[best]:
                break
            if row[k] != row[k] or better(row[k], row[best]):
                best = k
        return best

    def oracle(x: np.ndarray, axis: Any, output_type: str) -> np.ndarray:
        ax = 0 if axis is None else axis % x.ndim
        return _along(x, (ax,), False, first_index, output_type)

    return oracle


def scan_oracle(x: np.ndarray, axis: int, exclusive: bool, reverse: bool) -> np.ndarray:
    ax = axis % x.ndim
    moved = np.moveaxis(x, ax, -1)
    out = np.empty(moved.shape, np.float64 if x.dtype.kind == "f" else object)
    for idx in np.ndindex(moved.shape[:-1]):
        row = moved[idx][::-1] if reverse else moved[idx]
        acc: Any = 0 if x.dtype.kind == "i" else 0.0
        res = []
        for v in row:
            nxt = _wrap32(acc + int(v)) if x.dtype.kind == "i" else acc + float(v)
            res.append(acc if exclusive else nxt)
            acc = nxt
        out[idx] = res[::-1] if reverse else res
    with np.errstate(all="ignore"):
        return np.moveaxis(out.astype(x.dtype), -1, ax)


def _mean_oracle(x: np.ndarray, axis: Any, keepdims: bool) -> np.ndarray:
    axes = _norm_axes(axis, x.ndim)
    n = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))

    def mean(row: np.ndarray) -> Any:
        s = _sum_row(row)
        if row.dtype.kind == "i":
            return (abs(s) // n) * (1 if s >= 0 else -1)
        return s / n

    return _along(x, axes, keepdims, mean, x.dtype)


# ----------------------------------------------------------------------------------------------
# The table

SUMMABLE = bounded(100.0)  # no overflow of partial sums: the order of summation is the implementation's
ARG_VALUES: Elements = lambda dt: (st.sampled_from([0, 1, 2, -1, INT32_MIN, INT32_MAX])  # noqa: E731
                                   if np.dtype(dt).kind == "i" else
                                   st.sampled_from([0.0, -0.0, 1.0, 2.0, -1.0, np.inf, -np.inf, np.nan])
                                   if np.dtype(dt).kind == "f" else st.booleans())


def _r(name: str, fn: Callable[..., Any], dts: tuple[str, ...], elements: Elements = any_values) -> Reduction:
    return Reduction(name, fn, dts, "reduce", elements, reduce_oracle(name))


ROWS: list[Reduction] = [
    _r("reduce_sum", lambda t, x, **p: t.reduce_sum(x, **p), NUMERIC, SUMMABLE),
    _r("reduce_prod", lambda t, x, **p: t.reduce_prod(x, **p), NUMERIC, bounded(2.0)),
    _r("reduce_max", lambda t, x, **p: t.reduce_max(x, **p), NUMERIC),
    _r("reduce_min", lambda t, x, **p: t.math.reduce_min(x, **p), NUMERIC),
    _r("reduce_any", lambda t, x, **p: t.reduce_any(x, **p), (B,)),
    _r("reduce_all", lambda t, x, **p: t.math.reduce_all(x, **p), (B,)),
    Reduction("argmax", lambda t, x, **p: t.argmax(x, **p), (F, H, I, B), "arg", ARG_VALUES,
              arg_oracle(lambda a, b: a > b), min_dims=1),
    Reduction("argmin", lambda t, x, **p: t.math.argmin(x, **p), (F, H, I, B), "arg", ARG_VALUES,
              arg_oracle(lambda a, b: a < b), min_dims=1),
    Reduction("cumsum", lambda t, x, **p: t.cumsum(x, **p), NUMERIC, "scan", SUMMABLE, scan_oracle, min_dims=1),
    Reduction("reduce_mean", lambda t, x, **p: t.reduce_mean(x, **p), NUMERIC, "mean", SUMMABLE),
]
ROW_IDS = [r.id for r in ROWS]


def cases(rows: list[Reduction]) -> list[Any]:
    return [pytest.param(r, d, id=f"{r.id}-{d}") for r in rows for d in r.dtypes]


# ----------------------------------------------------------------------------------------------
# Comparison: sums within a tolerance scaled by the sum of magnitudes


def _magnitude(row: Reduction, x: np.ndarray, params: dict[str, Any]) -> np.ndarray | None:
    """Sum of |x| over what each output element sums (None for ops compared exactly)."""
    if x.dtype.kind != "f" or row.op not in ("reduce_sum", "cumsum", "reduce_mean", "reduce_prod"):
        return None
    a = np.abs(np.nan_to_num(x.astype(np.float64), nan=0.0, posinf=0.0, neginf=0.0))
    if row.op == "reduce_prod":  # relative error: the magnitude is the product's
        a = np.abs(np.nan_to_num(x.astype(np.float64), nan=1.0, posinf=1.0, neginf=1.0))
        return np.prod(a, axis=_norm_axes(params["axis"], x.ndim), keepdims=params["keepdims"])
    if row.op == "cumsum":
        return np.broadcast_to(np.sum(a, axis=params["axis"], keepdims=True), x.shape)
    axes = _norm_axes(params["axis"], x.ndim)
    total = np.sum(a, axis=axes, keepdims=params["keepdims"])
    return total / max(1, int(np.prod([x.shape[k] for k in axes]))) if row.op == "reduce_mean" else total


def assert_reduced(actual: Any, expected: Any, magnitude: np.ndarray | None, n: int, where: str) -> None:
    """Exact, or |actual - expected| <= n·eps·magnitude + tolerance (NaN and inf must match)."""
    if magnitude is None:
        assert_matches(actual, expected, exact=True, where=where)
        return
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert (actual.shape, actual.dtype) == (expected.shape, expected.dtype), where
    a, e = actual.astype(np.float64), expected.astype(np.float64)
    special = ~np.isfinite(e) | ~np.isfinite(a)
    np.testing.assert_array_equal(a[special], e[special], err_msg=where)
    eps = float(np.finfo(actual.dtype).eps)
    bound = (n + 2) * eps * np.asarray(magnitude, np.float64) + 2 * eps * np.abs(e) + float(np.finfo(actual.dtype).tiny)
    err = np.abs(a - e)
    assert np.all(err[~special] <= bound[~special]), f"{where}: errors {err[~special]} exceed {bound[~special]}"


def _check(row: Reduction, x: np.ndarray, params: dict[str, Any], results: dict[str, Any], expected: Any) -> None:
    mag = _magnitude(row, x, params)
    for path, got in results.items():
        assert_reduced(got, expected, mag, max(1, x.size), f"{row.id}{params} via {path}")


# ----------------------------------------------------------------------------------------------
# Coverage

# reductions with a property test of their own elsewhere
TESTED_ELSEWHERE = {"unsorted_segment_sum": "tests/ops/test_gather.py"}
REDUCE_OPS = sorted(n for n, op in registry.all_ops().items()
                    if op.kind == registry.REDUCE and n not in TESTED_ELSEWHERE)


@pytest.mark.parametrize("name", REDUCE_OPS)
def test__registry__every_reduction_has_a_row(name: str) -> None:
    assert name in {r.op for r in ROWS}, f"reduction '{name}' has no row in tests/ops/test_reduce.py"


def _accepts(row: Reduction, dtype: str) -> bool:
    op = registry.get(row.op)
    attrs = {"reduce": {"axes": (0,)}, "arg": {"axis": 0}, "scan": {"axis": 0}}[row.kind]
    try:
        op.infer(Aval((2,), dtypes.as_dtype(dtype)), **attrs)
    except (InvalidArgumentError, TypeError):
        return False
    return True


@pytest.mark.parametrize("row", [r for r in ROWS if r.kind != "mean"], ids=[r.id for r in ROWS if r.kind != "mean"])
def test__registry__row_lists_exactly_the_device_dtypes_the_op_accepts(row: Reduction) -> None:
    assert {d for d in DTYPES if _accepts(row, d)} == set(row.dtypes)


# ----------------------------------------------------------------------------------------------
# The property test


@pytest.mark.parametrize(("row", "dtype"), cases(ROWS))
@given(data=st.data())
def test__reduction__three_paths__match_reference(row: Reduction, dtype: str, data: st.DataObject) -> None:
    x = data.draw(arrays(dtype, data.draw(shapes(max_dims=MAX_DIMS), label="shape"), row.elements), label="x")
    if x.ndim < row.min_dims:
        x = x.reshape((1,) * row.min_dims)
    params = PARAMS[row.kind](data, x.ndim)
    expected = row.reference(x, **params)
    if row.oracle is not None:
        assert_reduced(expected, row.oracle(x, **params), _magnitude(row, x, params), max(1, x.size),
                       f"{row.id}{params} reference vs oracle")
    _check(row, x, params, run_all(row.popjit_fn(**params), x), expected)


# ----------------------------------------------------------------------------------------------
# Specific semantics


def test__argmax_argmin__first_occurrence_of_ties_and_of_nan() -> None:
    x = np.array([[1.0, 3.0, 3.0, -1.0, -1.0], [np.nan, 2.0, np.nan, 0.0, -0.0]], np.float32)
    for fn, want in ((tf.argmax, [[1, 0]]), (tf.argmin, [[3, 0]])):
        check_paths(run_all(lambda v, f=fn: f(v, axis=1, output_type=tf.int32), x),
                    np.array(want[0], np.int32), exact=True, what=fn.__name__)


@pytest.mark.parametrize("output_type", ["int32", "int64"])
def test__argmax__output_type(output_type: str) -> None:
    x = np.array([[0, 5, 2], [7, 1, 7]], np.int32)
    check_paths(run_all(lambda v: tf.argmax(v, axis=-1, output_type=output_type), x),
                np.array([1, 0], output_type), exact=True, what="argmax")
    check_paths(run_all(tf.argmax, x), np.array([1, 0, 1], np.int64), exact=True, what="argmax default")


def test__cumsum__exclusive_and_reverse() -> None:
    x = np.array([1, 2, 3, 4], np.int32)
    for exclusive, reverse, want in ((False, False, [1, 3, 6, 10]), (True, False, [0, 1, 3, 6]),
                                     (False, True, [10, 9, 7, 4]), (True, True, [9, 7, 4, 0])):
        check_paths(run_all(lambda v, e=exclusive, r=reverse: tf.cumsum(v, exclusive=e, reverse=r), x),
                    np.array(want, np.int32), exact=True, what=f"cumsum exclusive={exclusive} reverse={reverse}")


def test__reduce_mean__int32_truncates_toward_zero_and_wraps_like_xla() -> None:
    x = np.array([[-3, -4], [3, 4], [INT32_MAX, INT32_MAX]], np.int32)
    check_paths(run_all(lambda v: tf.reduce_mean(v, axis=1), x), np.array([-3, 3, -1], np.int32), exact=True,
                what="reduce_mean")


def test__float16_sum_and_mean__accumulate_in_float32() -> None:
    x = np.array([60000.0, 60000.0, -60000.0], np.float16)
    check_paths(run_all(tf.reduce_sum, x), np.float16(60000.0), exact=True, what="reduce_sum")
    check_paths(run_all(tf.reduce_mean, x[:2]), np.float16(60000.0), exact=True, what="reduce_mean")
    check_paths(run_all(tf.cumsum, x), np.array([60000.0, np.inf, 60000.0], np.float16), exact=True, what="cumsum")


def test__reduce_over_no_axes__is_the_identity() -> None:
    x = np.array([[1.5, -2.0], [np.nan, 4.0]], np.float32)
    for fn in (tf.reduce_sum, tf.reduce_prod, tf.reduce_max, tf.reduce_min, tf.reduce_mean):
        check_paths(run_all(lambda v, f=fn: f(v, axis=[]), x), x, exact=True, what=fn.__name__)


# ----------------------------------------------------------------------------------------------
# Cross-check with TensorFlow on fixed edge cases (skipped without TensorFlow)

TF_CASES = [
    ("reduce_sum", F, {"axis": 1, "keepdims": True}), ("reduce_sum", I, {"axis": None, "keepdims": False}),
    ("reduce_prod", F, {"axis": 0, "keepdims": False}), ("reduce_max", F, {"axis": [0, 1], "keepdims": False}),
    ("reduce_min", I, {"axis": -1, "keepdims": True}), ("reduce_any", B, {"axis": 0, "keepdims": False}),
    ("reduce_all", B, {"axis": 1, "keepdims": False}), ("argmax", F, {"axis": 1, "output_type": "int32"}),
    ("argmin", I, {"axis": 0, "output_type": "int64"}), ("cumsum", F, {"axis": 1, "exclusive": True, "reverse": True}),
    ("reduce_mean", I, {"axis": 1, "keepdims": False}), ("reduce_mean", F, {"axis": 0, "keepdims": False}),
]
_TF_X = {
    F: np.array([[1.5, -2.0, 3.0, 0.25], [np.inf, 7.0, -1.0, 2.0], [-0.5, 2.0, 2.0, -8.0]], np.float32),
    I: np.array([[7, -3, 2, 9], [-7, 4, 4, 1], [INT32_MIN, 5, -2, 3]], np.int32),
    B: np.array([[True, False, True, True], [False, False, True, True], [True, True, True, True]]),
}


@pytest.mark.parametrize(("name", "dtype", "params"), TF_CASES, ids=[f"{n}-{d}" for n, d, _ in TF_CASES])
def test__reduction__fixed_cases__match_tensorflow(name: str, dtype: str, params: dict[str, Any]) -> None:
    real_tf = tensorflow_or_skip()
    row = next(r for r in ROWS if r.op == name)
    x = _TF_X[dtype]
    tf_params = {**params, "output_type": getattr(real_tf, params["output_type"])} if "output_type" in params \
        else params
    theirs = np.asarray(row.fn(real_tf, real_tf.constant(x), **tf_params))
    for path in ("cpu", "jit"):
        assert_matches(run_path(path, row.popjit_fn(**params), x), theirs, where=f"{name} via {path} vs TensorFlow")


# ----------------------------------------------------------------------------------------------
# Errors: bad axes and dtypes raise InvalidArgumentError naming the user's file and line


def _sum_axis_2(x: Any) -> Any:
    return tf.reduce_sum(x, axis=2)  # the failing line


BAD_CALLS = [
    ("axis out of range", _sum_axis_2, "Invalid reduction dimension"),
    ("negative axis out of range", lambda x: tf.reduce_max(x, axis=-3), "Invalid reduction dimension"),
    ("duplicate axes", lambda x: tf.reduce_sum(x, axis=[0, -2]), "duplicate"),
    ("argmax axis out of range", lambda x: tf.argmax(x, axis=2), "dimension"),
    ("cumsum axis out of range", lambda x: tf.cumsum(x, axis=-3), "dimension"),
    ("argmax of a scalar", lambda x: tf.argmax(x[0, 0]), "dimension"),
    ("cumsum of a scalar", lambda x: tf.cumsum(x[0, 0]), "axis"),
    ("reduce a scalar over axis 0", lambda x: tf.reduce_sum(x[0, 0], axis=0), "Invalid reduction dimension"),
]


@pytest.mark.parametrize(("fn", "message"), [pytest.param(f, m, id=i) for i, f, m in BAD_CALLS])
@pytest.mark.parametrize("path", ["cpu", "jit", "ipu"])
def test__errors__bad_axis__raises_invalid_argument_at_the_user_line(fn: Callable, message: str, path: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message) as info:
        run_path(path, fn, np.ones((2, 3), np.float32))
    assert f'File "{__file__}"' in str(info.value), str(info.value)


def test__errors__bad_axis__names_the_line() -> None:
    line = _sum_axis_2.__code__.co_firstlineno + 1
    with pytest.raises(InvalidArgumentError, match=f"line {line}"):
        run_path("jit", _sum_axis_2, np.ones((2, 3), np.float32))


def _unsupported() -> list[Any]:
    return [pytest.param(r, d, id=f"{r.id}-{d}") for r in ROWS for d in DTYPES if d not in r.dtypes]


@pytest.mark.parametrize(("row", "dtype"), _unsupported())
@pytest.mark.parametrize("path", ["cpu", "jit"])
def test__reduction__unsupported_dtype__raises_naming_the_dtype(row: Reduction, dtype: str, path: str) -> None:
    params = {"reduce": {"axis": 0, "keepdims": False}, "mean": {"axis": 0, "keepdims": False},
              "arg": {"axis": 0, "output_type": "int64"}, "scan": {"axis": 0, "exclusive": False, "reverse": False}}
    with pytest.raises((InvalidArgumentError, UnimplementedError)) as info:
        run_path(path, row.popjit_fn(**params[row.kind]), np.ones((2,), dtype))
    assert dtype in str(info.value) and __file__ in str(info.value), str(info.value)


@pytest.mark.parametrize("row", [r for r in ROWS if r.kind in ("reduce", "mean")], ids=lambda r: r.id)
def test__reduction__axis_as_tensor_and_tuple__agree_with_list(row: Reduction) -> None:
    x = (np.arange(24).reshape(2, 3, 4) % 5).astype(row.dtypes[0])
    want = run_path("cpu", row.popjit_fn(axis=[0, 2], keepdims=False), x)
    for axis in ((0, 2), np.array([0, 2], np.int32), tf.constant([-3, -1]), [tf.constant(0), -1]):
        got = run_path("jit", row.popjit_fn(axis=axis, keepdims=False), x)
        assert_matches(got, want, exact=True, where=f"{row.id} axis={axis!r}")


@pytest.mark.parametrize("path", ["cpu", "jit"])
def test__reduction__axis_computed_from_a_traced_argument__raises_compile_time_constant_error(path: str) -> None:
    def fn(x: Any, axis: Any) -> Any:
        return tf.reduce_sum(x, axis=axis)

    if path == "cpu":
        assert_matches(run_path(path, fn, np.ones((2, 3), np.float32), np.array(1, np.int32)),
                       np.full((2,), 3.0, np.float32))
        return
    with pytest.raises(InvalidArgumentError, match="compile-time constant"):
        run_path(path, fn, np.ones((2, 3), np.float32), np.array(1, np.int32))


@pytest.mark.slow
@pytest.mark.parametrize(("shape", "axis"), [((1031, 37), 1), ((1031, 3, 5), [1, 2]), ((37, 1031), 0),
                                             ((37, 1031), None)])
def test__parallel_reductions__match_reference(shape: tuple[int, ...], axis: Any) -> None:
    """Kept extents of >= 1024 elements (lowered threshold) reduce on several threads."""
    from popjit import config

    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    row = next(r for r in ROWS if r.op == "reduce_sum")
    params = {"axis": axis, "keepdims": False}
    with config.context(PARALLEL_MIN_ELEMENTS=1024):
        results = run_all(lambda v: (tf.reduce_sum(v * v, axis=axis), tf.reduce_max(v, axis=axis)), x,
                          paths=("jit", "ipu"))
    expected = row.reference(x * x, **params)
    for path, (total, top) in results.items():
        assert_reduced(total, expected, _magnitude(row, x * x, params), x.size, f"sum via {path}")
        assert_matches(top, registry.get("reduce_max").reference(x, axes=_norm_axes(axis, x.ndim), keepdims=False),
                       exact=True, where=f"max via {path}")


@pytest.mark.parametrize(("shape", "axis"), [((4099, 6), 1), ((4, 997, 7), 1), ((6, 4099), 0)])
def test__parallel_argmax__first_extreme_as_numpy(shape: tuple[int, ...], axis: int) -> None:
    """Arg-reductions of enough work (outputs x reduced elements, threshold lowered) run on several
    threads in ranges of their outer loop; ties and NaN keep the first index, as NumPy's."""
    from popjit import config

    x = np.random.default_rng(4).integers(-3, 3, shape).astype(np.float32)  # many ties
    x.reshape(-1)[::101] = np.nan
    with config.context(PARALLEL_MIN_ELEMENTS=1024):
        fn = tf.function(lambda v: (tf.argmax(v, axis=axis), tf.argmin(v, axis=axis)), jit_compile=True)
        top, bottom = fn(x)
        engine = fn.get_concrete_function(x).executable("cpu").as_text("engine")
    assert engine.count("split(") == 2, engine
    np.testing.assert_array_equal(top.numpy(), np.argmax(x, axis=axis))
    np.testing.assert_array_equal(bottom.numpy(), np.argmin(x, axis=axis))
