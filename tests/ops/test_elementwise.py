"""Property tests for every element-wise op in the registry, table-driven.

One :class:`Op` row per op (like JAX's ``op_record``): the registry name, a TF-named callable
``fn(tf, *tensors)`` written once and run against popjit's ``tf`` and, in the cross-checks, the
real TensorFlow; the dtypes it allows; the value strategy; an optional domain restriction; and,
where the semantics are subtle, an independent oracle (plain Python per element) that the
registry's NumPy reference must agree with. Each hypothesis example runs the op compiled
(``jit``), eagerly on the CPU and eagerly on ``/device:IPU:0`` and compares all three with the
reference. A registered element-wise op without a row fails ``test__registry__every_op_has_a_row``.

Chosen semantics are listed in :mod:`tests.ops.strategies`.
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import popjit.tensorflow as tf
from popjit import dtypes
from popjit.errors import InvalidArgumentError, UnimplementedError
from popjit.ir.graph import Aval
from popjit.ops import registry
from tests.helpers import TOLERANCE
from tests.ops.strategies import (
    DTYPES,
    INT32_MAX,
    INT32_MIN,
    Elements,
    any_values,
    arrays,
    assert_matches,
    bounded,
    broadcast_shapes,
    check_paths,
    no_denormals,
    run_all,
    run_path,
    shapes,
    small_ints,
    tensorflow_or_skip,
)

F, H, I, B = "float32", "float16", "int32", "bool"
FLOATS, NUMERIC, ALL = (F, H), (F, H, I), (F, H, I, B)


@dataclass(frozen=True)
class Op:
    """One element-wise op under test."""

    op: str
    fn: Callable[..., Any]  # fn(tf_module, *tensors) -> tensor
    dtypes: tuple[str, ...]
    arity: int = 1
    elements: Elements | tuple[Elements, ...] = any_values
    domain: Callable[..., tuple[np.ndarray, ...]] | None = None  # restricts generated inputs
    oracle: Callable[..., np.ndarray] | None = None  # independent statement of TF's semantics
    exact: bool = False
    tol: dict | None = None
    attrs: dict = field(default_factory=dict)  # the registry op's attributes (for the reference)
    label: str = ""
    cond_arg: bool = False  # first argument is a bool condition (select)
    converts: tuple[str, ...] = ()  # other dtypes the TF callable accepts by converting them first
    tf_exclude: Callable[..., np.ndarray] | None = None  # inputs where TF's CPU kernels flush denormals
    broadcast_rank: int = 2  # max rank of broadcast shapes; 3 on the rows that stand for the broadcasting machinery

    @property
    def id(self) -> str:
        return f"{self.op}{'-' + self.label if self.label else ''}"

    def arg_dtypes(self, dtype: str) -> tuple[str, ...]:
        return (B, *[dtype] * (self.arity - 1)) if self.cond_arg else (dtype,) * self.arity

    def arg_elements(self, k: int) -> Elements:
        if self.cond_arg and k == 0:
            return any_values
        return self.elements[k] if isinstance(self.elements, tuple) else self.elements

    def popjit_fn(self) -> Callable[..., Any]:
        return functools.partial(self.fn, tf)

    def restrict(self, *args: np.ndarray) -> tuple[np.ndarray, ...]:
        return tuple(self.domain(*args)) if self.domain else args

    def reference(self, *args: np.ndarray) -> Any:
        return registry.get(self.op).reference(*args, **self.attrs)


# ----------------------------------------------------------------------------------------------
# Oracles: TF's documented behaviour, element by element in plain Python (independent of NumPy's
# ufuncs used by the registry references).


def _wrap32(v: int) -> int:
    return (int(v) + 2**31) % 2**32 - 2**31


def _is_int(x: Any) -> bool:
    return isinstance(x, int)  # Python ints (and bools): integer inputs reach the oracles as these


def _scalar(v: Any) -> Any:
    """Integers as unbounded Python ints (the oracle wraps), floats as NumPy scalars of their
    dtype (so ``a / b`` rounds as the dtype does, and divides by zero as IEEE says)."""
    if isinstance(v, np.bool_):
        return bool(v)
    if isinstance(v, np.integer):
        return int(v)
    return v


def per_element(fn: Callable[..., Any], out: Any = None) -> Callable[..., np.ndarray]:
    """Apply a scalar Python function with NumPy broadcasting; the result takes ``out`` (or the first input's) dtype."""

    def oracle(*args: np.ndarray) -> np.ndarray:
        bs = np.broadcast_arrays(*args)
        dt = np.dtype(out) if out is not None else args[0].dtype
        with np.errstate(all="ignore"):
            flat = [fn(*map(_scalar, vals)) for vals in zip(*(b.ravel() for b in bs))]
            return np.array(flat, dtype=np.float64 if dt.kind == "f" else object).astype(dt).reshape(bs[0].shape)

    return oracle


def _floordiv(a: Any, c: Any) -> Any:
    if _is_int(a):
        return -1 if c == 0 else _wrap32(a // c)
    q = a / c
    return float(math.floor(q)) if math.isfinite(q) else q


def _floormod(a: Any, c: Any) -> Any:
    if _is_int(a):
        return a if c == 0 else _wrap32(a % c)
    if c == 0 or not math.isfinite(a) or math.isnan(c):
        return math.nan
    if math.isinf(c):
        return a if a == 0 or (a > 0) == (c > 0) else c
    r = math.fmod(a, c)
    return r + c if r != 0 and (r < 0) != (c < 0) else r


def _truncdiv(a: Any, c: Any) -> Any:
    if _is_int(a):
        if c == 0:
            return -1
        q = abs(a) // abs(c)
        return _wrap32(q if (a >= 0) == (c >= 0) else -q)
    q = a / c
    return float(math.trunc(float(q))) if math.isfinite(q) else q


def _int_pow(a: int, c: int) -> int:
    if c < 0:
        return 1 if a == 1 else ((1 if c % 2 == 0 else -1) if a == -1 else 0)
    return _wrap32(pow(a, c, 2**32))


def _round_half_even(x: Any) -> Any:
    return float(round(float(x))) if math.isfinite(x) else x


def _sign(x: Any) -> Any:
    return x if x != x else int(x > 0) - int(x < 0)


def _f2i(lo: int, hi: int) -> Callable[[Any], int]:
    def conv(x: Any) -> int:
        if _is_int(x):
            return _wrap32(x)
        if not math.isfinite(x) or not lo - 1 < x < hi + 1:
            return lo
        return int(x)

    return conv


def _gelu(x: float) -> float:
    return 0.5 * x * (1.0 + math.erf(x / math.sqrt(2.0)))


def _softplus(x: float) -> float:
    if math.isnan(x):
        return x
    return max(x, 0.0) + math.log1p(math.exp(-abs(x))) if math.isfinite(x) else max(x, 0.0)


def _sigmoid(x: float) -> float:
    if math.isnan(x):
        return x
    return 1.0 / (1.0 + math.exp(-x)) if x > -700 else 0.0


def _shift_wrap(fn: Callable[[int, int], int]) -> Callable[[int, int], int]:
    return lambda a, b: _wrap32(fn(a, b))


# ----------------------------------------------------------------------------------------------
# Domains


def nonzero_divisor(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Integer division by zero raises in TF eager: keep it out (the chosen semantics are pinned below)."""
    if y.dtype.kind != "i":
        return x, y
    return x, np.where(y == 0, np.ones_like(y), y)


def denormal_quotient(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Where ``x / y`` is a denormal: TF's CPU kernels flush it to zero before flooring/truncating."""
    if x.dtype.kind != "f":
        return np.zeros(np.broadcast(x, y).shape, bool)
    with np.errstate(all="ignore"):
        q = np.abs(x.astype(np.float64) / y.astype(np.float64))
    return (q > 0) & (q < np.finfo(x.dtype).tiny)


def sin_cos_range(x: np.ndarray) -> tuple[np.ndarray]:
    """``|x| <= 1e4``: float32 range reduction of larger arguments is not meaningful (TF's neither)."""
    return (np.where(np.abs(x) > 1e4, np.zeros_like(x), x),)


# ----------------------------------------------------------------------------------------------
# The table

u = functools.partial(Op, arity=1)
b = functools.partial(Op, arity=2)
NONNEG_EXPONENT = (any_values, small_ints(0, 40))

UNARY: list[Op] = [
    u("neg", lambda t, x: t.negative(x), NUMERIC, exact=True, oracle=per_element(lambda x: _wrap32(-x)
                                                                             if _is_int(x) else -x)),
    u("abs", lambda t, x: t.abs(x), NUMERIC, exact=True,
      oracle=per_element(lambda x: _wrap32(abs(x)) if _is_int(x) else abs(x))),
    u("exp", lambda t, x: t.exp(x), FLOATS, oracle=per_element(lambda x: math.inf if x >= 710 else math.exp(x))),
    u("expm1", lambda t, x: t.math.expm1(x), FLOATS),
    u("log", lambda t, x: t.math.log(x), FLOATS),
    u("log1p", lambda t, x: t.math.log1p(x), FLOATS),
    u("sqrt", lambda t, x: t.sqrt(x), FLOATS),
    u("rsqrt", lambda t, x: t.math.rsqrt(x), FLOATS),
    u("square", lambda t, x: t.square(x), NUMERIC, exact=True,
      oracle=per_element(lambda x: _wrap32(x * x) if _is_int(x) else x * x)),
    u("tanh", lambda t, x: t.tanh(x), FLOATS),
    u("sigmoid", lambda t, x: t.sigmoid(x), FLOATS, oracle=per_element(_sigmoid)),
    u("relu", lambda t, x: t.nn.relu(x), NUMERIC, exact=True,
      oracle=per_element(lambda x: x if (x > 0 or x != x) else 0)),
    u("relu6", lambda t, x: t.nn.relu6(x), NUMERIC, exact=True,
      oracle=per_element(lambda x: x if math.isnan(x) else min(max(x, 0), 6))),
    u("elu", lambda t, x: t.nn.elu(x), FLOATS),
    u("gelu", lambda t, x: t.nn.gelu(x), FLOATS, oracle=per_element(_gelu)),
    u("gelu", lambda t, x: t.nn.gelu(x, approximate=True), FLOATS, attrs={"approximate": True}, label="tanh"),
    u("softplus", lambda t, x: t.math.softplus(x), FLOATS, oracle=per_element(_softplus)),
    u("sin", lambda t, x: t.sin(x), FLOATS, domain=sin_cos_range),
    u("cos", lambda t, x: t.cos(x), FLOATS, domain=sin_cos_range),
    u("floor", lambda t, x: t.floor(x), FLOATS, exact=True),
    u("ceil", lambda t, x: t.math.ceil(x), FLOATS, exact=True),
    u("round", lambda t, x: t.round(x), FLOATS, exact=True, oracle=per_element(_round_half_even)),
    u("sign", lambda t, x: t.sign(x), NUMERIC, exact=True, oracle=per_element(_sign)),
    u("reciprocal", lambda t, x: t.math.reciprocal(x), FLOATS),
    u("erf", lambda t, x: t.math.erf(x), FLOATS, oracle=per_element(math.erf)),
    u("logical_not", lambda t, x: t.logical_not(x), (B,), exact=True),
    u("is_nan", lambda t, x: t.math.is_nan(x), FLOATS, exact=True, oracle=per_element(math.isnan, bool)),
    u("is_finite", lambda t, x: t.math.is_finite(x), FLOATS, exact=True, oracle=per_element(math.isfinite, bool)),
    u("invert", lambda t, x: t.bitwise.invert(x), (I,), exact=True, oracle=per_element(lambda x: ~x)),
]

BINARY: list[Op] = [
    b("add", lambda t, x, y: t.add(x, y), NUMERIC, exact=True, broadcast_rank=3),
    b("sub", lambda t, x, y: t.subtract(x, y), NUMERIC, exact=True),
    b("mul", lambda t, x, y: t.multiply(x, y), NUMERIC, exact=True,
      oracle=per_element(lambda a, c: _wrap32(a * c) if _is_int(a) else a * c)),
    b("div", lambda t, x, y: t.math.divide(x, y), FLOATS, converts=(I,), tf_exclude=denormal_quotient),
    b("floordiv", lambda t, x, y: t.math.floordiv(x, y), NUMERIC, exact=True, domain=nonzero_divisor,
      oracle=per_element(_floordiv), tf_exclude=denormal_quotient),
    b("mod", lambda t, x, y: t.math.floormod(x, y), NUMERIC, exact=True, domain=nonzero_divisor,
      oracle=per_element(_floormod)),
    b("truncdiv", lambda t, x, y: t.truncatediv(x, y), NUMERIC, exact=True, domain=nonzero_divisor,
      oracle=per_element(_truncdiv), tf_exclude=denormal_quotient),
    b("pow", lambda t, x, y: t.pow(x, y), NUMERIC, elements=NONNEG_EXPONENT,
      oracle=per_element(lambda a, c: _int_pow(a, c) if _is_int(a) else _fpow(a, c))),
    b("maximum", lambda t, x, y: t.maximum(x, y), NUMERIC, exact=True, broadcast_rank=3),
    b("minimum", lambda t, x, y: t.minimum(x, y), NUMERIC, exact=True),
    b("squared_difference", lambda t, x, y: t.math.squared_difference(x, y), NUMERIC,
      oracle=per_element(lambda a, c: _wrap32((a - c) ** 2) if _is_int(a) else (a - c) ** 2)),
    b("equal", lambda t, x, y: t.equal(x, y), ALL, exact=True, broadcast_rank=3),
    b("not_equal", lambda t, x, y: t.not_equal(x, y), ALL, exact=True),
    b("less", lambda t, x, y: t.less(x, y), NUMERIC, exact=True),
    b("less_equal", lambda t, x, y: t.less_equal(x, y), NUMERIC, exact=True),
    b("greater", lambda t, x, y: t.greater(x, y), NUMERIC, exact=True),
    b("greater_equal", lambda t, x, y: t.greater_equal(x, y), NUMERIC, exact=True),
    b("logical_and", lambda t, x, y: t.logical_and(x, y), (B,), exact=True),
    b("logical_or", lambda t, x, y: t.logical_or(x, y), (B,), exact=True),
    b("bitwise_and", lambda t, x, y: t.bitwise.bitwise_and(x, y), (I,), exact=True, oracle=per_element(operator.and_)),
    b("bitwise_or", lambda t, x, y: t.bitwise.bitwise_or(x, y), (I,), exact=True, oracle=per_element(operator.or_)),
    b("bitwise_xor", lambda t, x, y: t.bitwise.bitwise_xor(x, y), (I,), exact=True, oracle=per_element(operator.xor)),
]


def _fpow(a: Any, c: Any) -> float:
    """C99 ``pow`` (what TF's float Pow computes), from Python's ``math.pow``, which raises instead."""
    a, c = float(a), float(c)
    odd = math.isfinite(c) and c == int(c) and int(c) % 2 == 1
    try:
        return math.pow(a, c)
    except ValueError:  # 0 ** negative, or negative ** non-integer
        if a == 0:
            return math.copysign(math.inf, a) if odd else math.inf
        return math.nan
    except OverflowError:
        return -math.inf if a < 0 and odd else math.inf


def _cast_row(target: str) -> Op:
    to = dtypes.as_dtype(target)
    if to.is_integer:
        info = np.iinfo(to.np)
        conv = _f2i(int(info.min), int(info.max))
        oracle = per_element(conv, to.np)
    elif to.is_bool:
        oracle = per_element(lambda x: x != 0, bool)
    else:
        oracle = per_element(float, to.np)
    return Op("cast", lambda t, x: t.cast(x, target), tuple(d for d in ALL if d != target), exact=True,
              attrs={"dtype": to}, oracle=oracle, label=f"to_{target}")


OTHER: list[Op] = [
    Op("select", lambda t, c, x, y: t.where(c, x, y), ALL, arity=3, exact=True, cond_arg=True, broadcast_rank=3),
    *[_cast_row(d) for d in ALL],
]

ROWS: list[Op] = UNARY + BINARY + OTHER
ROW_IDS = [r.id for r in ROWS]


def cases(rows: list[Op]) -> list[Any]:
    return [pytest.param(r, d, id=f"{r.id}-{d}") for r in rows for d in r.dtypes]


def _draw_inputs(data: st.DataObject, row: Op, dtype: str) -> tuple[np.ndarray, ...]:
    if row.arity == 1:
        shps: tuple[tuple[int, ...], ...] = (data.draw(shapes(max_dims=4), label="shape"),)
    else:
        shps = data.draw(broadcast_shapes(row.arity, max_dims=row.broadcast_rank), label="shapes")
    args = tuple(data.draw(arrays(dt, s, row.arg_elements(k)), label=f"arg{k}")
                 for k, (dt, s) in enumerate(zip(row.arg_dtypes(dtype), shps)))
    return row.restrict(*args)


# ----------------------------------------------------------------------------------------------
# Coverage: every registered element-wise op has a row, with every device dtype it accepts.

ELEMENTWISE_OPS = sorted(n for n, op in registry.all_ops().items() if op.is_elementwise)


@pytest.mark.parametrize("name", ELEMENTWISE_OPS)
def test__registry__every_op_has_a_row(name: str) -> None:
    assert name in {r.op for r in ROWS}, f"element-wise op '{name}' has no row in tests/ops/test_elementwise.py"


def _accepts(op: str, dtype: str, row: Op) -> bool:
    avals = [Aval((2,), dtypes.as_dtype(d)) for d in row.arg_dtypes(dtype)]
    try:
        registry.get(op).infer(*avals, **row.attrs)
    except (InvalidArgumentError, TypeError):
        return False
    return True


@pytest.mark.parametrize("row", ROWS, ids=ROW_IDS)
def test__registry__row_lists_exactly_the_device_dtypes_the_op_accepts(row: Op) -> None:
    accepted = {d for d in DTYPES if _accepts(row.op, d, row)}
    if row.op == "cast":
        accepted.discard(row.attrs["dtype"].name)  # casting to the same dtype is the identity, no op
    assert accepted == set(row.dtypes)


# ----------------------------------------------------------------------------------------------
# The property test: three paths against the reference (and the oracle).


@pytest.mark.parametrize(("row", "dtype"), cases(ROWS))
@given(data=st.data())
def test__op__three_paths__match_reference(row: Op, dtype: str, data: st.DataObject) -> None:
    args = _draw_inputs(data, row, dtype)
    expected = row.reference(*args)
    if row.oracle is not None:
        assert_matches(expected, row.oracle(*args), exact=row.exact, tol=row.tol, where=f"{row.id} reference vs oracle")
    check_paths(run_all(row.popjit_fn(), *args), expected, exact=row.exact, tol=row.tol, what=row.id)


# ----------------------------------------------------------------------------------------------
# Cross-check with the real TensorFlow on a grid of edge values (skipped without TensorFlow).

EDGES = {
    "float": [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, 2.5, -2.5, 3.0, -3.0, 7.0, 0.7, -0.3, 1e-8, 10.0, -10.0, 20.0,
              -20.0, 88.0, -104.0, 100.0, 1e4, -1e4, 65504.0, 3e38, -3e38, np.inf, -np.inf, np.nan],
    "int32": [INT32_MIN, INT32_MIN + 1, -65536, -100, -7, -3, -2, -1, 0, 1, 2, 3, 7, 31, 46341, 65536, INT32_MAX],
    "bool": [False, True],
}


def _grid(dtype: str) -> np.ndarray:
    key = "float" if dtype in FLOATS else dtype
    with np.errstate(all="ignore"):
        return no_denormals(np.array(EDGES[key]).astype(dtype))


def _grid_args(row: Op, dtype: str) -> tuple[np.ndarray, ...]:
    grids = [_grid(d) for d in row.arg_dtypes(dtype)]
    mesh = np.meshgrid(*grids, indexing="ij")
    args = tuple(m.ravel() for m in mesh)
    if row.elements == NONNEG_EXPONENT and dtype == I:
        args = (args[0], np.abs(args[1]) % 41)
    return row.restrict(*args)


def _comparable(x: np.ndarray, args: tuple[np.ndarray, ...], row: Op) -> np.ndarray:
    """Positions where TF's answer is comparable: no denormal results or intermediates (TF flushes them)."""
    keep = np.ones(x.shape, bool)
    if x.dtype.kind == "f":
        keep &= (x == 0) | ~(np.abs(x.astype(np.float64)) < np.finfo(x.dtype).tiny)
    if row.tf_exclude is not None:
        keep &= ~row.tf_exclude(*args)
    return keep


@pytest.mark.parametrize(("row", "dtype"), cases(ROWS))
def test__op__edge_values__match_tensorflow(row: Op, dtype: str) -> None:
    real_tf = tensorflow_or_skip()
    args = _grid_args(row, dtype)
    theirs = np.asarray(row.fn(real_tf, *[real_tf.constant(a) for a in args]))
    for path in ("cpu", "jit"):
        ours = np.asarray(run_path(path, row.popjit_fn(), *args))
        keep = _comparable(theirs, args, row) & _comparable(ours, args, row)
        assert_matches(ours[keep], theirs[keep], exact=row.exact, tol=row.tol,
                       where=f"{row.id} via {path} vs TensorFlow")


# ----------------------------------------------------------------------------------------------
# Chosen semantics where TensorFlow raises (documented in tests/ops/strategies.py).

SEMANTICS = [
    ("floordiv", [7, -7, 0, INT32_MIN, 5], [0, 0, 0, -1, 2], [-1, -1, -1, INT32_MIN, 2]),
    ("mod", [7, -7, 0, INT32_MIN, 5], [0, 0, 0, -1, 2], [7, -7, 0, 0, 1]),
    ("truncdiv", [7, -7, 0, INT32_MIN, -5], [0, 0, 0, -1, 2], [-1, -1, -1, INT32_MIN, -2]),
    ("pow", [2, 1, -1, -1, 0, 3], [-1, -3, -3, -2, -1, 40], [0, 1, -1, 1, 0, 689956897]),
]


@pytest.mark.parametrize(("op", "x", "y", "want"), SEMANTICS, ids=[s[0] for s in SEMANTICS])
def test__documented_semantics__integer_division_by_zero_and_negative_powers(op: str, x: list[int], y: list[int],
                                                                              want: list[int]) -> None:
    fn = next(r for r in BINARY if r.op == op).popjit_fn()
    args = (np.array(x, np.int32), np.array(y, np.int32))
    check_paths(run_all(fn, *args), np.array(want, np.int32), exact=True, what=op)


def test__documented_semantics__float_to_int_cast_of_nan_and_out_of_range_gives_int_min() -> None:
    x = np.array([np.nan, np.inf, -np.inf, 3e9, -3e9, -2.7, 2.7, 2147483520.0], np.float32)
    want = np.array([INT32_MIN] * 5 + [-2, 2, 2147483520], np.int32)
    check_paths(run_all(lambda v: tf.cast(v, tf.int32), x), want, exact=True, what="cast")


# ----------------------------------------------------------------------------------------------
# Unsupported dtypes: a clear error naming the op and the dtype, on every path.


def _unsupported(rows: list[Op]) -> list[Any]:
    seen: set[tuple[str, str]] = set()
    out = []
    for r in rows:
        for d in DTYPES:
            if d not in r.dtypes + r.converts and (r.op, d) not in seen and r.op != "cast":
                seen.add((r.op, d))
                out.append(pytest.param(r, d, id=f"{r.id}-{d}"))
    return out


@pytest.mark.parametrize(("row", "dtype"), _unsupported(ROWS))
@pytest.mark.parametrize("path", ["jit", "cpu", "ipu"])
def test__op__unsupported_dtype__raises_naming_op_and_dtype(row: Op, dtype: str, path: str) -> None:
    args = tuple(np.ones((2,), dt) for dt in row.arg_dtypes(dtype))
    with pytest.raises((InvalidArgumentError, TypeError, UnimplementedError)) as info:
        run_path(path, row.popjit_fn(), *args)
    msg = str(info.value)
    assert row.op in msg and dtype in msg, msg
    assert __file__ in msg, msg


# ----------------------------------------------------------------------------------------------
# Composite TF functions (several registry ops) against NumPy statements of their semantics.


def _np_clip(x: np.ndarray, lo: Any, hi: Any) -> np.ndarray:
    return np.minimum(np.maximum(x, np.asarray(lo, x.dtype)), np.asarray(hi, x.dtype))


@pytest.mark.parametrize("dtype", NUMERIC)
@given(data=st.data())
def test__clip_by_value__three_paths__match_numpy(dtype: str, data: st.DataObject) -> None:
    x = data.draw(arrays(dtype, data.draw(shapes(max_dims=3)), bounded(1e4)))
    lo, hi = sorted(data.draw(st.lists(st.integers(-100, 100), min_size=2, max_size=2)))
    with np.errstate(all="ignore"):
        expected = _np_clip(x, lo, hi)
    check_paths(run_all(lambda v: tf.clip_by_value(v, lo, hi), x), expected, exact=True, what="clip_by_value")


@given(data=st.data())
def test__logical_xor__three_paths__match_numpy(data: st.DataObject) -> None:
    s1, s2 = data.draw(broadcast_shapes(2))
    x, y = data.draw(arrays(B, s1)), data.draw(arrays(B, s2))
    check_paths(run_all(tf.math.logical_xor, x, y), np.logical_xor(x, y), exact=True, what="logical_xor")


@pytest.mark.parametrize("dtype", NUMERIC)
@given(data=st.data())
def test__add_n__three_paths__match_numpy(dtype: str, data: st.DataObject) -> None:
    shape = data.draw(shapes(max_dims=3))
    xs = [data.draw(arrays(dtype, shape, bounded(1e4))) for _ in range(3)]
    with np.errstate(all="ignore"):
        expected = (xs[0] + xs[1]) + xs[2]
    check_paths(run_all(lambda a, c, d: tf.add_n([a, c, d]), *xs), expected, exact=True, what="add_n")


def test__truediv__int32__gives_float64_on_the_host_and_is_refused_on_the_device() -> None:
    x, y = np.array([1, -7, 9], np.int32), np.array([2, 2, 0], np.int32)
    with np.errstate(all="ignore"):
        expected = x.astype(np.float64) / y.astype(np.float64)
    assert_matches(run_path("cpu", tf.math.truediv, x, y), expected, exact=True)
    assert_matches(run_path("jit", tf.math.truediv, x, y), expected, exact=True)  # host-compiled: as TF on a CPU
    with pytest.raises(UnimplementedError, match="float64 is not supported on the IPU"):
        run_path("ipu", tf.math.truediv, x, y)


# ----------------------------------------------------------------------------------------------
# Fused chains: several element-wise ops in one compiled loop agree with the op-by-op reference
# (each op's result rounds to its dtype: float16 per op, int32 wrapping per op).


@dataclass(frozen=True)
class Step:
    """One link of a chain: ``row`` applied to the running value (and a fresh input if binary)."""

    row: Op

    def apply(self, t: Any, value: Any, other: Any) -> Any:
        return self.row.fn(t, value, other) if self.row.arity == 2 else self.row.fn(t, value)


_SMOOTH = {"add", "sub", "mul", "maximum", "minimum", "neg", "abs", "relu", "tanh", "sigmoid", "square"}
_EXACT_INT = {"add", "sub", "mul", "maximum", "minimum", "neg", "abs", "square", "floordiv", "mod", "sign",
              "bitwise_xor", "bitwise_and", "relu"}


def _chain_steps(dtype: str) -> list[Step]:
    names = _EXACT_INT if dtype == I else _SMOOTH
    return [Step(r) for r in UNARY + BINARY if r.op in names and dtype in r.dtypes and not r.label]


def _chain_fn(steps: list[Step]) -> Callable[..., Any]:
    def chain(t: Any, x: Any, *others: Any) -> Any:
        value = x
        for step, other in zip(steps, others):
            value = step.apply(t, value, other)
        return value

    return chain


def _chain_reference(steps: list[Step], x: np.ndarray, others: list[np.ndarray]) -> tuple[np.ndarray, float]:
    """The chain op by op, and the largest finite magnitude on the way (rounding differences, e.g.
    from FMA contraction, are relative to it, not to the possibly cancelled result)."""
    value, scale = x, 0.0
    for step, other in zip(steps, others):
        value = step.row.reference(value, other) if step.row.arity == 2 else step.row.reference(value)
        finite = np.abs(np.asarray(value, np.float64))
        finite = finite[np.isfinite(finite)]
        scale = max(scale, float(finite.max()) if finite.size else 0.0)
    return np.asarray(value), scale


@pytest.mark.parametrize("dtype", NUMERIC)
@settings(max_examples=max(5, settings.default.max_examples // 2))  # every example is a new codelet
@given(data=st.data())
def test__fused_chain__three_paths__match_op_by_op_reference(dtype: str, data: st.DataObject) -> None:
    steps = data.draw(st.lists(st.sampled_from(_chain_steps(dtype)), min_size=2, max_size=4), label="chain")
    shape = data.draw(shapes(max_dims=3), label="shape")
    elements = bounded(4.0) if dtype != I else any_values
    x = data.draw(arrays(dtype, shape, elements), label="x")
    others = []
    for step in steps:
        y = data.draw(arrays(dtype, shape, elements), label=step.row.op)
        others.append(nonzero_divisor(x, y)[1])
    expected, scale = _chain_reference(steps, x, others)
    fn = functools.partial(_chain_fn(steps), tf)
    eps = float(np.finfo(dtype).eps) if dtype != I else 0.0
    tol = {"rtol": max(TOLERANCE[dtype]["rtol"], 4 * eps * len(steps)), "atol": 16 * eps * len(steps) * scale} \
        if dtype != I else None
    check_paths(run_all(fn, x, *others), expected, exact=dtype == I, tol=tol, what=" -> ".join(s.row.op for s in steps))


def test__fused_chain__int32_intermediates_wrap_like_tensorflow() -> None:
    x, y, z = (np.array(v, np.int32) for v in ([65536, 2**30, -7], [65536, 4, 3], [3, 3, 2]))
    check_paths(run_all(lambda a, c, d: (a * c) // d, x, y, z), np.array([0, 0, -11], np.int32), exact=True,
                what="(a * b) // c")


def test__fused_chain__float16_rounds_after_every_op() -> None:
    x, y = np.array([2048.0, 1.0], np.float16), np.array([1.0, 2048.0], np.float16)
    # 2048 + 1 rounds to 2048 in float16, so (x + y) - x is 0 and 2047, not 1 and 2048.
    check_paths(run_all(lambda a, c: (a + c) - a, x, y), np.array([0.0, 2047.0], np.float16), exact=True,
                what="(a + b) - a")


@pytest.mark.parametrize("divisor", [3.0, 7.0, 10.0, 0.1, 0.3, 49.0])
def test__division_by_broadcast_scalar__correctly_rounded(divisor: float) -> None:
    x = np.arange(1, 200, dtype=np.float32)
    y = np.array(divisor, np.float32)
    check_paths(run_all(lambda a, c: a / c, x, y), x / y, exact=True, what="x / scalar")
    check_paths(run_all(lambda a, c: a // c, x * y, y), np.floor((x * y) / y), exact=True, what="x // scalar")


# ----------------------------------------------------------------------------------------------
# Python operators on tensors, with Python scalars on either side (TF's conversion rules).

OPERATORS: dict[str, tuple[Callable[[Any, Any], Any], tuple[str, ...]]] = {
    "+": (operator.add, NUMERIC),
    "-": (operator.sub, NUMERIC),
    "*": (operator.mul, NUMERIC),
    "/": (operator.truediv, NUMERIC),
    "//": (operator.floordiv, NUMERIC),
    "%": (operator.mod, NUMERIC),
    "**": (operator.pow, NUMERIC),
    "<": (operator.lt, NUMERIC),
    "<=": (operator.le, NUMERIC),
    ">": (operator.gt, NUMERIC),
    ">=": (operator.ge, NUMERIC),
    "==": (operator.eq, ALL),
    "!=": (operator.ne, ALL),
    "&": (operator.and_, (I, B)),
    "|": (operator.or_, (I, B)),
    "^": (operator.xor, (I, B)),
}
UNARY_OPERATORS: dict[str, tuple[Callable[[Any], Any], tuple[str, ...]]] = {
    "-": (operator.neg, NUMERIC),
    "~": (operator.invert, (I, B)),
    "abs": (abs, NUMERIC),
    "+": (operator.pos, NUMERIC),
}
_LEFT = {F: [[-3.5, 5.0, 7.25], [2.0, -8.0, 0.5]], H: [[-3.5, 5.0, 7.25], [2.0, -8.0, 0.5]],
         I: [[-3, 5, 7], [2, -8, 1]], B: [[True, False, True], [False, False, True]]}
_RIGHT = {F: [2.0, -3.0, 0.25], H: [2.0, -3.0, 0.25], I: [2, -3, 4], B: [True, True, False]}
_SCALAR = {F: 2.5, H: 2.5, I: 3, B: True}


def _operator_cases() -> list[Any]:
    out = []
    for sym, (_, allowed) in OPERATORS.items():
        for d in allowed:
            for form in ("tensor-tensor", "tensor-scalar", "scalar-tensor"):
                out.append(pytest.param(sym, d, form, id=f"{sym}-{d}-{form}"))
    return out


def _operands(symbol: str, dtype: str, form: str) -> tuple[Any, Any]:
    x, y = np.array(_LEFT[dtype], dtype), np.array(_RIGHT[dtype], dtype)
    if symbol == "**" and dtype == I:  # TF raises on negative integer exponents
        x, y = (np.abs(x), np.abs(y)) if form == "scalar-tensor" else (x, np.abs(y))
    s = _SCALAR[dtype]
    return {"tensor-tensor": (x, y), "tensor-scalar": (x, s), "scalar-tensor": (s, x)}[form]


@pytest.mark.parametrize(("symbol", "dtype", "form"), _operator_cases())
def test__python_operator__eager_and_compiled__match_numpy(symbol: str, dtype: str, form: str) -> None:
    op, _ = OPERATORS[symbol]
    a, c = _operands(symbol, dtype, form)
    with np.errstate(all="ignore"):
        expected = np.asarray(op(a, c))
    tensors = [v for v in (a, c) if isinstance(v, np.ndarray)]

    def fn(*ts: Any) -> Any:
        it = iter(ts)
        return op(*(next(it) if isinstance(v, np.ndarray) else v for v in (a, c)))

    # the compiled tensor-tensor form is the op itself, tested above; the scalar forms compile here
    paths = ("cpu",) if (symbol == "/" and dtype == I) or form == "tensor-tensor" else ("cpu", "jit")
    tol = {"rtol": 2e-3, "atol": 2e-3} if dtype == H else None
    check_paths(run_all(fn, *tensors, paths=paths), expected, exact=symbol not in ("/", "**"), tol=tol,
                what=f"x {symbol} y")


@pytest.mark.parametrize(("symbol", "dtype"), [pytest.param(s, d, id=f"{s}-{d}") for s, (_, ds) in
                                               UNARY_OPERATORS.items() for d in ds])
def test__python_unary_operator__eager_and_compiled__match_numpy(symbol: str, dtype: str) -> None:
    op, _ = UNARY_OPERATORS[symbol]
    x = np.array(_LEFT[dtype], dtype)
    expected = np.asarray(op(x) if not (symbol == "~" and dtype == B) else np.logical_not(x))
    check_paths(run_all(op, x, paths=("cpu", "jit")), expected, exact=True, what=f"{symbol}x")


def test__python_operator__matmul() -> None:
    a, c = np.arange(6, dtype=np.float32).reshape(2, 3), np.arange(12, dtype=np.float32).reshape(3, 4)
    check_paths(run_all(operator.matmul, a, c), a @ c, what="a @ b")


@pytest.mark.parametrize("symbol", ["-", "abs", "~"])
def test__python_unary_operator__unsupported_dtype__raises(symbol: str) -> None:
    op, allowed = UNARY_OPERATORS[symbol]
    bad = next(d for d in (B, F) if d not in allowed)
    with pytest.raises(InvalidArgumentError, match=bad):
        op(tf.constant(np.array(_LEFT[bad], bad)))


# ----------------------------------------------------------------------------------------------
# TF's conversion rules for the non-tensor operand.

FLOAT_INTO_INT = [
    ("t + 1.5", lambda t: t + 1.5), ("1.5 + t", lambda t: 1.5 + t), ("t * 0.5", lambda t: t * 0.5),
    ("t + 2.0", lambda t: t + 2.0), ("tf.add(t, 2.0)", lambda t: tf.add(t, 2.0)),
    ("tf.maximum(0.5, t)", lambda t: tf.maximum(0.5, t)), ("tf.where(c, t, 1.5)", lambda t: tf.where(t > 0, t, 1.5)),
    ("clip(t, 0.5, 2)", lambda t: tf.clip_by_value(t, 0.5, 2)),
]


@pytest.mark.parametrize("expr", [pytest.param(f, id=i) for i, f in FLOAT_INTO_INT])
@pytest.mark.parametrize("path", ["cpu", "jit"])
def test__conversion__python_float_into_int_tensor__raises_type_error(expr: Callable, path: str) -> None:
    with pytest.raises(TypeError, match=r"Cannot convert .* to EagerTensor of dtype int32"):
        run_path(path, expr, np.array([1, 2], np.int32))


@pytest.mark.parametrize("expr", [lambda t: t + 1, lambda t: t & 1, lambda t: tf.logical_or(t, 0)])
def test__conversion__python_int_into_bool_tensor__raises_type_error(expr: Callable) -> None:
    with pytest.raises(TypeError, match="dtype bool"):
        expr(tf.constant([True, False]))


PYTHON_SCALARS = [
    (F, 1, np.float32), (F, True, np.float32), (F, 2**40, np.float32), (H, 1e6, np.float16), (H, 3, np.float16),
    (I, True, np.int32), (I, -5, np.int32), (F, np.float64(1.5), np.float32), (I, np.int64(7), np.int32),
    (F, np.array([1.5, 2.5]), np.float32),
]


@pytest.mark.parametrize(("dtype", "scalar", "want"), PYTHON_SCALARS,
                         ids=[f"{d}+{type(s).__name__}" for d, s, _ in PYTHON_SCALARS])
@pytest.mark.parametrize("path", ["cpu", "jit"])
def test__conversion__non_tensor_operand__takes_the_tensor_dtype(dtype: str, scalar: Any, want: type,
                                                                 path: str) -> None:
    x = np.array([1, 2], dtype)
    got_left = run_path(path, lambda t: t + scalar, x)
    got_right = run_path(path, lambda t: scalar + t, x)
    with np.errstate(all="ignore"):
        expected = x + np.asarray(scalar).astype(want)
    assert_matches(got_left, expected, where="tensor + scalar")
    assert_matches(got_right, expected, where="scalar + tensor")


TYPED_BINARY = [r for r in BINARY if r.op != "div"]  # tf.math.divide raises TypeError (tested below)


@pytest.mark.parametrize("row", TYPED_BINARY, ids=[r.id for r in TYPED_BINARY])
@pytest.mark.parametrize("path", ["cpu", "jit", "ipu"])
def test__conversion__mismatched_tensor_dtypes__raise_invalid_argument_naming_the_op(row: Op, path: str) -> None:
    first, second = (I, F) if row.dtypes != (B,) else (B, I)
    x, y = np.ones((2,), row.dtypes[0] if first not in row.dtypes else first), np.ones((2,), second)
    with pytest.raises(InvalidArgumentError, match=r"\[Op:\w+\]") as info:
        run_path(path, row.popjit_fn(), x, y)
    assert __file__ in str(info.value)


def test__conversion__truediv_of_mixed_dtypes__raises_type_error() -> None:
    with pytest.raises(TypeError, match="must have the same dtype"):
        _ = tf.constant([1.0]) / tf.constant([1])
    with pytest.raises(TypeError, match="bool"):
        _ = tf.constant([True]) / tf.constant([True])


# ----------------------------------------------------------------------------------------------
# Shape and dtype errors: InvalidArgumentError at trace time, naming the user's file and line.


def _bad_shapes(x: Any, y: Any) -> Any:
    return x + y  # the failing line: _BAD_SHAPES_LINE


_BAD_SHAPES_LINE = _bad_shapes.__code__.co_firstlineno + 1


@pytest.mark.parametrize("path", ["cpu", "jit", "ipu"])
def test__errors__incompatible_shapes__name_user_file_and_line(path: str) -> None:
    with pytest.raises(InvalidArgumentError, match="Incompatible shapes") as info:
        run_path(path, _bad_shapes, np.ones((2, 3), np.float32), np.ones((4,), np.float32))
    msg = str(info.value)
    assert f'File "{__file__}", line {_BAD_SHAPES_LINE}' in msg, msg


def test__errors__raised_while_tracing_before_anything_compiles() -> None:
    fn = tf.function(_bad_shapes, jit_compile=True)
    with pytest.raises(InvalidArgumentError, match=f"line {_BAD_SHAPES_LINE}"):
        fn.get_concrete_function(np.ones((2, 3), np.float32), np.ones((4,), np.float32))


@pytest.mark.parametrize("select_shapes", [((2,), (3,), (2,)), ((2, 1), (3,), (4,))])
def test__errors__select_incompatible_shapes__raise(select_shapes: tuple) -> None:
    c, x, y = (np.ones(s, dt) for s, dt in zip(select_shapes, (bool, np.float32, np.float32)))
    with pytest.raises(InvalidArgumentError, match="Incompatible shapes"):
        run_path("jit", lambda a, d, e: tf.where(a, d, e), c, x, y)


# ----------------------------------------------------------------------------------------------
# Large tensors run the multi-threaded codelets: each thread claims chunks of the outer loop.


@pytest.mark.slow
@pytest.mark.parametrize("rows, cols", [(37, 1031), (997, 131)])  # 2 chunks; 4 chunks of 250 rows, the last short
def test__parallel_codelets__match_reference(rows: int, cols: int) -> None:
    from popjit import config

    rng = np.random.default_rng(7)
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    y = rng.standard_normal((cols,)).astype(np.float32)
    h = x.astype(np.float16)

    def fn(a: Any, c: Any, d: Any) -> Any:
        return tf.exp(a) * c - a, tf.cast(d, tf.float32) + c, tf.where(a > c, d, -d)

    expected = (np.exp(x.astype(np.float64)).astype(np.float32) * y - x, h.astype(np.float32) + y,
                np.where(x > y, h, -h))
    with config.context(PARALLEL_MIN_ELEMENTS=1024):
        results = run_all(fn, x, y, h, paths=("jit", "ipu"))
    check_paths(results, expected, what="parallel element-wise")


def test__pow__negative_infinity_and_zero_bases__follow_c_pow_as_tensorflow() -> None:
    # NumPy's power differs here (NaN for -inf ** 0.5, -0 for -0 ** 0.5); TensorFlow and the kernels follow C99
    x = np.array([-np.inf, -np.inf, -np.inf, -np.inf, -0.0, -0.0, -0.0], np.float32)
    y = np.array([0.5, -0.5, 3.0, -3.0, 0.5, -0.5, 3.0], np.float32)
    want = np.array([np.inf, 0.0, -np.inf, -0.0, 0.0, np.inf, -0.0], np.float32)
    reference = registry.get("pow").reference(x, y)
    computed = tf.function(tf.pow, jit_compile=True)(x, y).numpy()
    for got in (reference, computed):
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
