"""Shared machinery of the op property tests: value strategies, the three execution paths, and
comparison with per-dtype tolerances.

Every op test runs the same inputs three ways and compares each with the op's NumPy reference:

- ``jit``: ``tf.function(jit_compile=True)``: traced, compiled to Numba codelets, run natively;
- ``cpu``: eagerly on the CPU (each op's NumPy reference, plus the frontend's conversions);
- ``ipu``: eagerly under ``tf.device('/device:IPU:0')`` (each op compiled on its own).

Numba compiles dominate the run time. Codelets are keyed by structure (op, dtypes, broadcast
pattern, rank after collapsing dims), never by sizes, so hypothesis may vary sizes freely; what
must stay bounded is the number of distinct *structures*, hence the rank limits below.

Chosen semantics where TensorFlow itself is undefined or inconsistent (the tests pin them, see
``test_elementwise.test__documented_semantics__*``):

- integer ``x // 0`` is -1, ``x % 0`` is x, ``truncatediv(x, 0)`` is -1 (TF eager raises; XLA
  gives -1 for x >= 0); integer ``x ** negative`` is 0 unless ``|x| == 1`` (as XLA; TF eager raises);
- float → int casts truncate toward zero; NaN and out-of-range values give INT_MIN (TF eager on
  x86; XLA saturates instead);
- denormals are kept (IEEE gradual underflow, as NumPy); TF's CPU kernels flush them to zero,
  so the TF cross-checks leave denormals out;
- the sign of a zero result is not compared: TF's own kernels disagree (``relu(-0.)``,
  ``sign(-0.)`` differ between its eager and XLA paths);
- argmax/argmin treat NaN as the extreme value and return its first index (NumPy; TF eager
  skips NaN, XLA returns the last NaN);
- float16 sums, means and cumulative sums accumulate in float32 (as XLA and poplibs; TF eager
  accumulates in float16 and overflows early).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tests.helpers import TOLERANCE, run_compiled, run_eager, run_on_ipu

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
PATHS = ("jit", "cpu", "ipu")
DTYPES = ("float32", "float16", "int32", "bool")

Elements = Callable[[np.dtype], st.SearchStrategy]


# ----------------------------------------------------------------------------------------------
# Element strategies


def any_values(dtype: np.dtype) -> st.SearchStrategy:
    """Every value of the dtype, edge values (±0, ±inf, nan, max, denormals, int extremes) often."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        width = dtype.itemsize * 8
        moderate = st.floats(-8, 8, width=width)
        specials = st.sampled_from([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, 2.5, -2.5])
        return st.one_of(moderate, st.floats(width=width), specials)
    if dtype.kind == "i":
        info = np.iinfo(dtype)
        edges = st.sampled_from([int(info.min), int(info.max), 0, 1, -1, int(info.min) + 1])
        return st.one_of(st.integers(-100, 100), st.integers(int(info.min), int(info.max)), edges)
    return st.booleans()


def finite_values(dtype: np.dtype, bound: float = 1e4) -> st.SearchStrategy:
    """Finite values with ``|x| <= bound`` (ints in range), plus ±0."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        width = dtype.itemsize * 8
        bound = float(min(bound, np.finfo(dtype).max))
        return st.one_of(st.floats(-8, 8, width=width), st.floats(-bound, bound, width=width),
                         st.sampled_from([0.0, -0.0]))
    if dtype.kind == "i":
        b = int(min(bound, np.iinfo(dtype).max))
        return st.integers(-b, b)
    return st.booleans()


def bounded(bound: float) -> Elements:
    """An :data:`Elements` factory: finite values within ``bound`` plus nan and ±inf."""

    def elements(dtype: np.dtype) -> st.SearchStrategy:
        if np.dtype(dtype).kind != "f":
            return finite_values(dtype, bound)
        return st.one_of(finite_values(dtype, bound), st.sampled_from([np.nan, np.inf, -np.inf]))

    return elements


def small_ints(lo: int, hi: int) -> Elements:
    """Integers in ``[lo, hi]`` for integer dtypes; floats get :func:`any_values`."""

    def elements(dtype: np.dtype) -> st.SearchStrategy:
        return st.integers(lo, hi) if np.dtype(dtype).kind == "i" else any_values(dtype)

    return elements


def arrays(dtype: str, shape: Sequence[int], elements: Elements = any_values) -> st.SearchStrategy[np.ndarray]:
    dt = np.dtype(dtype)
    return hnp.arrays(dt, tuple(shape), elements=elements(dt))


def shapes(max_dims: int = 4, max_side: int = 5) -> st.SearchStrategy[tuple[int, ...]]:
    """Shapes of rank 0..max_dims, size-1 dims included, no empty dims."""
    return hnp.array_shapes(min_dims=0, max_dims=max_dims, min_side=1, max_side=max_side)


def broadcast_shapes(num: int, max_dims: int = 3, max_side: int = 4) -> st.SearchStrategy[tuple[tuple[int, ...], ...]]:
    """``num`` mutually broadcastable shapes (rank <= max_dims bounds the codelet structures)."""
    return hnp.mutually_broadcastable_shapes(num_shapes=num, min_dims=0, max_dims=max_dims, min_side=1,
                                             max_side=max_side).map(lambda b: b.input_shapes)


# ----------------------------------------------------------------------------------------------
# Running and comparing


def run_path(path: str, fn: Callable, *args: np.ndarray) -> Any:
    """``fn(*args)`` through one path: ``jit``, ``cpu`` (eager) or ``ipu`` (eager on an IPU)."""
    if path == "jit":
        return run_compiled(fn, *args)
    if path == "cpu":
        return run_eager(fn, *args)
    return run_on_ipu(fn, *args)


def run_all(fn: Callable, *args: np.ndarray, paths: Sequence[str] = PATHS) -> dict[str, Any]:
    """``fn(*args)`` through each path; the result of each as NumPy."""
    return {p: run_path(p, fn, *args) for p in paths}


def _saturated(actual: np.ndarray, expected: np.ndarray, rtol: float) -> np.ndarray:
    """Where one side overflowed to ±inf and the other is within ``rtol`` of the largest finite
    value of the same sign, take the overflowed value for both (a rounding at the edge of range)."""
    big = np.finfo(expected.dtype).max * (1.0 - rtol)
    a64, e64 = actual.astype(np.float64), expected.astype(np.float64)
    same_sign = np.sign(a64) == np.sign(e64)
    edge = same_sign & ((np.isinf(a64) & (np.abs(e64) >= big)) | (np.isinf(e64) & (np.abs(a64) >= big)))
    return np.where(edge, a64, e64)


def assert_matches(actual: Any, expected: Any, *, exact: bool = False, tol: dict | None = None,
                   where: str = "") -> None:
    """Same shape and dtype; equal values (ints, bools, ``exact``) or close floats, NaN == NaN."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    tag = f" [{where}]" if where else ""
    assert actual.shape == expected.shape, f"shape {actual.shape} != {expected.shape}{tag}"
    assert actual.dtype == expected.dtype, f"dtype {actual.dtype} != {expected.dtype}{tag}"
    if exact or actual.dtype.kind != "f":
        np.testing.assert_array_equal(actual, expected, err_msg=where, strict=True)
        return
    t = {**TOLERANCE.get(str(actual.dtype), TOLERANCE["float32"]), **(tol or {})}
    np.testing.assert_allclose(actual.astype(np.float64), _saturated(actual, expected, t["rtol"]),
                               equal_nan=True, err_msg=where, **t)


def check_paths(results: dict[str, Any], expected: Any, *, exact: bool = False, tol: dict | None = None,
                what: str = "") -> None:
    """Every path's result matches ``expected`` (the message names the path that does not)."""
    for path, got in results.items():
        outs = got if isinstance(got, tuple) else (got,)
        exps = expected if isinstance(expected, tuple) else (expected,)
        assert len(outs) == len(exps), f"{what} via {path}: {len(outs)} outputs, expected {len(exps)}"
        for k, (a, e) in enumerate(zip(outs, exps)):
            assert_matches(a, e, exact=exact, tol=tol, where=f"{what} via {path}, output {k}")


def tensorflow_or_skip() -> Any:
    """The real TensorFlow, for cross-checking semantics; skips the test when it is not installed."""
    import os

    import pytest

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    return pytest.importorskip("tensorflow")


def no_denormals(x: np.ndarray) -> np.ndarray:
    """``x`` with denormals replaced by 0 (TF's CPU kernels flush them)."""
    if x.dtype.kind != "f":
        return x
    tiny = np.finfo(x.dtype).tiny
    return np.where((x != 0) & (np.abs(x) < tiny), np.zeros_like(x), x)
