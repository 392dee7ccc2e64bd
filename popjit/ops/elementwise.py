"""Element-wise ops: unary, binary (with NumPy broadcasting), select and cast.

Each row defines the op once: allowed dtypes, NumPy reference, the scalar Numba template used by
generated codelets, and the per-loop cycle figures of the matching poplibs vertex
(``docs/ipu_hardware.md`` §3.2; rows marked ``# est`` have no published figure and are estimates).

Scalar templates receive argument expressions already in *compute* form: float16 and float32
values are float32, integers are integers, booleans are booleans. ``{0}``, ``{1}`` name the
arguments; ``km`` is :mod:`popjit.kernels.math`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from popjit import dtypes
from popjit.dtypes import DType
from popjit.ir.graph import Aval
from popjit.ir.lazy import elementwise
from popjit.ir.opdef import BINARY, ELEMENTWISE, REGISTRY, UNARY, ElementCost, OpDef, register
from popjit.ops.shapes import ANY, broadcast_shapes, check_dtype, same_dtype

FLOATS = (dtypes.float16, dtypes.float32, dtypes.float64)
INTS = (dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32, dtypes.int64)
NUMERIC = FLOATS + INTS
BOOL = (dtypes.bool_,)
Template = str | Callable[..., str] | dict[str, str | Callable[..., str]]


def _erf(x: np.ndarray) -> np.ndarray:
    import scipy.special  # why: imported on first use; it costs ~0.3 s at start-up

    return scipy.special.erf(x)


def _f64(fn: Callable[[np.ndarray], np.ndarray]) -> Callable[..., np.ndarray]:
    """Reference computed in float64 and rounded to the input's dtype."""

    def ref(x: np.ndarray, **_: Any) -> np.ndarray:
        with np.errstate(all="ignore"):
            return np.asarray(fn(x.astype(np.float64))).astype(x.dtype)

    return ref


def _same(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    """Reference keeping the first input's dtype (NumPy may promote)."""

    def ref(*xs: np.ndarray, **attrs: Any) -> np.ndarray:
        with np.errstate(all="ignore"):
            return np.asarray(fn(*xs, **attrs)).astype(xs[0].dtype)

    return ref


def render(template: Template, args: list[str], in_dtype: DType, **attrs: Any) -> str:
    """Fill a scalar template for the input dtype family (``float``/``int``/``bool``)."""
    if isinstance(template, dict):
        family = "float" if in_dtype.is_floating else ("bool" if in_dtype.is_bool else "int")
        if in_dtype == dtypes.float64 and "float64" in template:
            family = "float64"
        template = template.get(family) or template["any"]
    if callable(template):
        return template(*args, dtype=in_dtype, **attrs)
    return template.format(*args)


def _fl(name: str, float64: str) -> dict[str, str]:
    """Template of a scalar math function: ``km.<name>`` (float32 kernel) or its float64 version."""
    return {"float": f"km.{name}({{0}})", "float64": f"{float64}({{0}})"}


def _lower_elementwise(ctx: Any, node: Any, args: list[Any]) -> list[Any]:
    out = node.outputs[0].aval
    return [elementwise(node.op, args, out.shape, out.dtype, node.attrs)]


def _scalar(template: Template) -> Callable[..., str]:
    def scalar(args: list[str], in_dtype: DType, **attrs: Any) -> str:
        return render(template, args, in_dtype, **attrs)

    return scalar


# ----------------------------------------------------------------------------------------------
# Unary


def unary(name: str, ref: Callable[..., np.ndarray], template: Template, allowed: tuple[DType, ...] = FLOATS,
          cost: ElementCost = ElementCost(), out: DType | None = None, doc: str = "",
          half_exact: bool = False) -> OpDef:
    """Register a unary element-wise op (``half_exact``: exact on float16 inputs)."""

    def infer(x: Aval, **attrs: Any) -> Aval:
        check_dtype(name, x.dtype, allowed)
        return Aval(x.shape, out or x.dtype)

    doc = doc or f"element-wise {name}"
    return register(OpDef(name, UNARY, infer, ref, _lower_elementwise, _scalar(template), cost, doc=doc,
                          half_exact=half_exact, extra={"dtypes": allowed}))


def _c(f: tuple[int, int, bool], h: tuple[int, int, bool], i: tuple[int, int, bool] = (7, 1, False),
       flops: int = 1, **more: Any) -> ElementCost:
    return ElementCost(f, h, i, flops, **more)


NAT_F, NAT_H = (2, 2, True), (2, 4, True)

unary("neg", lambda x: np.negative(x), "(-{0})", NUMERIC, _c((2, 2, False), (2, 4, False), (2, 1, False)),
      half_exact=True)
unary("abs", lambda x: np.abs(x), "abs({0})", NUMERIC, _c((1, 1, True), (1, 1, True), (2, 1, False)), half_exact=True)
unary("exp", _f64(np.exp), _fl("exp", "np.exp"), FLOATS, _c((6, 2, False), (4, 4, False), entry_1d=33))
unary("expm1", _f64(np.expm1), _fl("expm1", "np.expm1"), FLOATS, _c((8, 2, False), (6, 4, False)))  # est
unary("log", _f64(np.log), _fl("log", "np.log"), FLOATS, _c((12, 2, False), (4, 4, False)))
unary("log1p", _f64(np.log1p), _fl("log1p", "np.log1p"), FLOATS, _c((14, 2, False), (6, 4, False)))  # est
unary("sqrt", _f64(np.sqrt), "km.sqrt({0})", FLOATS, _c((10, 2, False), (23, 4, False)))
unary("rsqrt", _f64(lambda x: 1.0 / np.sqrt(x)), "km.rsqrt({0})", FLOATS, _c((8, 2, False), (19, 4, False)))
unary("square", lambda x: np.square(x), "({0} * {0})", NUMERIC, _c((2, 2, False), (2, 4, False)))
unary("tanh", _f64(np.tanh), _fl("tanh", "np.tanh"), FLOATS, _c((12, 2, False), (4, 4, False)))
unary("sigmoid", _f64(lambda x: 0.5 * (1.0 + np.tanh(0.5 * x))), _fl("sigmoid", "km.sigmoid64"), FLOATS,
      _c((12, 2, False), (6, 4, False)))
unary("relu", _same(lambda x: np.maximum(x, 0)), {"float": "km.fmax({0}, km.F0)", "int": "max({0}, 0)"}, NUMERIC,
      _c((3, 2, False), (3, 4, False)), half_exact=True)
unary("relu6", _same(lambda x: np.minimum(np.maximum(x, 0), 6)),
      {"float": "km.fmin(km.fmax({0}, km.F0), km.F6)", "int": "min(max({0}, 0), 6)"}, NUMERIC,
      _c((4, 2, False), (4, 4, False)), half_exact=True)  # est
unary("elu", _f64(lambda x: np.where(x > 0, x, np.expm1(x))), _fl("elu", "km.elu64"), FLOATS,
      _c((8, 2, False), (8, 4, False)))  # est


def _gelu_ref(x: np.ndarray, approximate: bool = False) -> np.ndarray:
    with np.errstate(all="ignore"):
        d = x.astype(np.float64)
        if approximate:
            y = 0.5 * d * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (d + 0.044715 * d**3)))
        else:
            y = 0.5 * d * (1.0 + _erf(d / np.sqrt(2.0)))
        return y.astype(x.dtype)


unary("gelu", _gelu_ref, lambda x, dtype, approximate=False: f"km.gelu_{'tanh' if approximate else 'erf'}"
      f"{'64' if dtype == dtypes.float64 else ''}({x})", FLOATS, _c((22, 1, False), (16, 1, False)))
unary("softplus", _f64(lambda x: np.logaddexp(0.0, x)), _fl("softplus", "km.softplus64"), FLOATS,
      _c((18, 2, False), (10, 4, False)))  # est
unary("sin", _f64(np.sin), _fl("sin", "np.sin"), FLOATS, _c((2300, 1, False), (25, 1, False)))
unary("cos", _f64(np.cos), _fl("cos", "np.cos"), FLOATS, _c((2300, 1, False), (25, 1, False)))
unary("floor", lambda x: np.floor(x), "np.floor({0})", FLOATS, _c(NAT_F, NAT_H), half_exact=True)
unary("ceil", lambda x: np.ceil(x), "np.ceil({0})", FLOATS, _c(NAT_F, NAT_H), half_exact=True)
unary("round", lambda x: np.round(x), {"float": "km.round_half_even({0})", "float64": "np.rint({0})"}, FLOATS,
      _c(NAT_F, NAT_H), half_exact=True)
_SIGN_INT = "(1 if {0} > 0 else (-1 if {0} < 0 else 0))"
unary("sign", lambda x: np.sign(x), {"float": "km.sign({0})", "int": _SIGN_INT}, NUMERIC,
      _c((3, 2, False), (3, 4, False)), half_exact=True)  # est
unary("reciprocal", _f64(lambda x: 1.0 / x), "(km.F1 / {0})", FLOATS, _c((6, 2, False), (15, 4, False)))
unary("erf", _f64(lambda x: _erf(x)), _fl("erf", "km.erf64"), FLOATS, _c((41, 1, False), (13, 1, False)))
unary("logical_not", lambda x: np.logical_not(x), "(not {0})", BOOL, _c((2, 4, False), (2, 4, False), (2, 4, False)))
unary("is_nan", lambda x: np.isnan(x), "km.is_nan({0})", FLOATS, _c((3, 2, False), (3, 4, False)), out=dtypes.bool_)
unary("is_finite", lambda x: np.isfinite(x), "km.is_finite({0})", FLOATS, _c((3, 2, False), (3, 4, False)),
      out=dtypes.bool_)

# ----------------------------------------------------------------------------------------------
# Binary


def binary(name: str, ref: Callable[..., np.ndarray], template: Template, allowed: tuple[DType, ...] = NUMERIC,
           cost: ElementCost = ElementCost(), out: DType | None = None, commutative: bool = False,
           tf_name: str = "", half_exact: bool = False) -> OpDef:
    """Register a binary element-wise op with NumPy broadcasting (``half_exact``: exact on float16 inputs)."""
    tf_name = tf_name or name.title().replace("_", "")

    def infer(x: Aval, y: Aval, **attrs: Any) -> Aval:
        dtype = same_dtype(tf_name, x, y)
        check_dtype(name, dtype, allowed)
        return Aval(broadcast_shapes(x.shape, y.shape, op=tf_name), out or dtype)

    return register(OpDef(name, BINARY, infer, ref, _lower_elementwise, _scalar(template), cost,
                          commutative=commutative, doc=f"element-wise, broadcasting (TensorFlow's {tf_name})",
                          half_exact=half_exact, extra={"dtypes": allowed}))


def _int_floordiv(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    safe = np.where(y == 0, 1, y)
    return np.where(y == 0, -1, np.floor_divide(x, safe)).astype(np.result_type(x, y))


def _int_floormod(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    safe = np.where(y == 0, 1, y)
    return np.where(y == 0, x, np.mod(x, safe)).astype(np.result_type(x, y))


def _floordiv_ref(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    if x.dtype.kind in "iu":
        return _int_floordiv(x, y)
    with np.errstate(all="ignore"):
        return np.floor(x / y).astype(x.dtype)


def _quotient(x: str, y: str, dtype: DType) -> str:
    """``x / y`` rounded to ``dtype``: a float16 quotient rounds to float16 before it is floored or
    truncated, as in TensorFlow (computing it in float32 would floor 9.997 where TF floors 10)."""
    return f"f16_to_f32(f32_to_f16({x} / {y}))" if dtype == dtypes.float16 else f"({x} / {y})"


def _floordiv_f(x: str, y: str, dtype: DType) -> str:
    return f"np.floor({_quotient(x, y, dtype)})"


def _truncdiv_f(x: str, y: str, dtype: DType) -> str:
    return f"np.trunc({_quotient(x, y, dtype)})"


def _mod_ref(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    if x.dtype.kind in "iu":
        return _int_floormod(x, y)
    with np.errstate(all="ignore"):
        return np.mod(x, y).astype(x.dtype)


def _pow_ref(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    if x.dtype.kind in "iu":
        xb, yb = np.broadcast_arrays(x.astype(np.int64), y.astype(np.int64))
        out = np.ones(xb.shape, np.int64)
        base, exp = xb.copy(), yb.copy()
        neg = exp < 0
        exp = np.where(neg, 0, exp)
        while np.any(exp > 0):
            odd = (exp & 1) == 1
            out = np.where(odd, out * base, out)
            base = base * base
            exp >>= 1
        out = np.where(neg, np.where(xb == 1, 1, np.where(xb == -1, np.where(yb % 2 == 0, 1, -1), 0)), out)
        return out.astype(x.dtype)
    xf, yf = np.broadcast_arrays(x.astype(np.float64), y.astype(np.float64))
    with np.errstate(all="ignore"):
        out = np.power(xf, yf)
        # C99's pow (TensorFlow's, and the kernels') where NumPy's differs: a negative base of -inf
        # or -0 to a power that is not an odd integer gives +inf or +0 (NumPy: NaN, -0)
        odd = (np.floor(yf) == yf) & (np.fmod(np.abs(yf), 2.0) == 1.0)
        even_sign = ~odd & ~np.isnan(yf) & (yf != 0)
        out = np.where(np.isneginf(xf) & even_sign, np.where(yf > 0, np.inf, 0.0), out)
        out = np.where((xf == 0) & np.signbit(xf) & even_sign & (yf > 0), 0.0, out)
    return out.astype(x.dtype)


_ADD = _c((1, 2, True), (1, 4, True), (7, 1, False), assembly=True)
_CMP = _c((14, 4, False), (9, 4, False), (22, 4, False))
binary("add", _same(np.add), "({0} + {1})", NUMERIC, _ADD, commutative=True, tf_name="AddV2")
binary("sub", _same(np.subtract), "({0} - {1})", NUMERIC, _ADD, tf_name="Sub")
binary("mul", _same(np.multiply), "({0} * {1})", NUMERIC, _ADD, commutative=True, tf_name="Mul")
binary("div", _same(np.true_divide), "({0} / {1})", FLOATS, _c((10, 2, False), (21, 4, False), (277, 1, False)),
       tf_name="RealDiv")
binary("floordiv", _floordiv_ref, {"float": _floordiv_f, "int": "km.floordiv_i({0}, {1})"}, NUMERIC,
       _c((12, 2, False), (23, 4, False), (277, 1, False)), tf_name="FloorDiv")  # est
binary("mod", _mod_ref, {"float": "km.floormod_f({0}, {1})", "int": "km.floormod_i({0}, {1})"}, NUMERIC,
       _c((133, 2, False), (300, 4, False), (292, 1, False)), tf_name="FloorMod")
binary("pow", _pow_ref, {"float": "km.pow_f({0}, {1})", "int": "km.pow_i({0}, {1})"}, NUMERIC,
       _c((312, 1, False), (325, 1, False), (32, 1, False)), tf_name="Pow")
binary("maximum", _same(np.maximum), {"float": "km.fmax({0}, {1})", "any": "max({0}, {1})"}, NUMERIC,
       _c((3, 2, False), (4, 4, False), (7, 1, False)), commutative=True, tf_name="Maximum", half_exact=True)
binary("minimum", _same(np.minimum), {"float": "km.fmin({0}, {1})", "any": "min({0}, {1})"}, NUMERIC,
       _c((3, 2, False), (4, 4, False), (7, 1, False)), commutative=True, tf_name="Minimum", half_exact=True)
def _squared_difference(x: str, y: str, dtype: DType) -> str:
    """``(x - y)^2``; a float16 difference rounds to float16 first, as TensorFlow's does."""
    d = f"f16_to_f32(f32_to_f16({x} - {y}))" if dtype == dtypes.float16 else f"({x} - {y})"
    return f"({d} * {d})"


binary("squared_difference", _same(lambda x, y: np.square(x - y)), _squared_difference, NUMERIC,
       _c((2, 2, True), (2, 4, True), (14, 1, False), flops=2), commutative=True, tf_name="SquaredDifference")
binary("equal", lambda x, y: np.equal(x, y), "({0} == {1})", ANY, _CMP, dtypes.bool_, True, "Equal")
binary("not_equal", lambda x, y: np.not_equal(x, y), "({0} != {1})", ANY, _CMP, dtypes.bool_, True, "NotEqual")
binary("less", lambda x, y: np.less(x, y), "({0} < {1})", NUMERIC, _CMP, dtypes.bool_, tf_name="Less")
binary("less_equal", lambda x, y: np.less_equal(x, y), "({0} <= {1})", NUMERIC, _CMP, dtypes.bool_, tf_name="LessEqual")
binary("greater", lambda x, y: np.greater(x, y), "({0} > {1})", NUMERIC, _CMP, dtypes.bool_, tf_name="Greater")
binary("greater_equal", lambda x, y: np.greater_equal(x, y), "({0} >= {1})", NUMERIC, _CMP, dtypes.bool_,
       tf_name="GreaterEqual")
binary("logical_and", lambda x, y: np.logical_and(x, y), "({0} and {1})", BOOL,
       _c((5, 4, False), (5, 4, False), (5, 4, False)), commutative=True, tf_name="LogicalAnd")
binary("logical_or", lambda x, y: np.logical_or(x, y), "({0} or {1})", BOOL,
       _c((5, 4, False), (5, 4, False), (5, 4, False)), commutative=True, tf_name="LogicalOr")

_BITWISE = _c((7, 1, False), (7, 1, False), (2, 1, False))  # est
binary("bitwise_and", _same(np.bitwise_and), "({0} & {1})", INTS, _BITWISE, commutative=True, tf_name="BitwiseAnd")
binary("bitwise_or", _same(np.bitwise_or), "({0} | {1})", INTS, _BITWISE, commutative=True, tf_name="BitwiseOr")
binary("bitwise_xor", _same(np.bitwise_xor), "({0} ^ {1})", INTS, _BITWISE, commutative=True, tf_name="BitwiseXor")
unary("invert", lambda x: np.invert(x), "(~{0})", INTS, _BITWISE, doc="tf.bitwise.invert")

# ----------------------------------------------------------------------------------------------
# Select and cast


def _select_infer(c: Aval, x: Aval, y: Aval) -> Aval:
    if not c.dtype.is_bool:
        check_dtype("select", c.dtype, BOOL)
    dtype = same_dtype("SelectV2", x, y)
    return Aval(broadcast_shapes(c.shape, x.shape, y.shape, op="SelectV2"), dtype)


register(OpDef(
    "select", ELEMENTWISE, _select_infer, lambda c, x, y: np.where(c, x, y).astype(x.dtype),
    _lower_elementwise, _scalar("({1} if {0} else {2})"), _c((4, 2, False), (4, 4, False), (4, 1, False)),
    half_exact=True, doc="tf.where(cond, x, y) with broadcasting",
))


def _cast_infer(x: Aval, dtype: DType) -> Aval:
    return Aval(x.shape, dtype)


def _cast_ref(x: np.ndarray, dtype: DType) -> np.ndarray:
    with np.errstate(all="ignore"):
        if dtype.is_integer and x.dtype.kind == "f":
            info = np.iinfo(dtype.np)
            # why: float→int truncates toward zero; out-of-range and NaN give INT_MIN like x86 / TF.
            bad = ~np.isfinite(x) | (x > info.max) | (x < info.min)
            fill = 0 if dtype.is_unsigned else info.min
            return np.where(bad, fill, np.trunc(np.where(bad, 0, x))).astype(dtype.np)
        if dtype.is_bool:
            return x != 0
        return x.astype(dtype.np)


def _cast_scalar(args: list[str], in_dtype: DType, dtype: DType) -> str:
    (x,) = args
    if dtype.is_bool:
        return f"({x} != 0)"
    if dtype.is_floating:
        return f"np.float32({x})" if dtype != dtypes.float64 else f"np.float64({x})"
    if in_dtype.is_floating:
        bad = 0 if dtype.is_unsigned else int(dtype.min)
        return f"km.f2i({x}, {int(dtype.min)}, {int(dtype.max)}, {bad})"
    return f"np.{dtype.np.name}({x})"


register(OpDef("cast", ELEMENTWISE, _cast_infer, _cast_ref, _lower_elementwise, _cast_scalar,
               _c((3, 2, False), (2, 4, False), (3, 1, False)), doc="tf.cast"))


def _truncdiv_ref(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        if x.dtype.kind in "iu":
            # why: in int64, so that |INT_MIN| does not overflow; INT_MIN / -1 wraps to INT_MIN.
            x64, y64 = x.astype(np.int64), y.astype(np.int64)
            safe = np.where(y64 == 0, 1, y64)
            q = np.abs(x64) // np.abs(safe) * np.sign(x64) * np.sign(safe)
            return np.where(y64 == 0, -1, q).astype(np.result_type(x, y))
        return np.trunc(x / y).astype(x.dtype)


# why: int64 operands, so that |INT_MIN| does not overflow inside km.truncdiv_i.
_TRUNCDIV = {"float": _truncdiv_f, "int": "km.truncdiv_i(np.int64({0}), np.int64({1}))"}
binary("truncdiv", _truncdiv_ref, _TRUNCDIV, NUMERIC, _c((12, 2, False), (23, 4, False), (277, 1, False)),
       tf_name="TruncateDiv")  # est

# ----------------------------------------------------------------------------------------------
# Gradient rules: vjp(t, primals, outputs, cotangents) -> input cotangents (see popjit.autodiff).
# `t` is the TensorFlow-named namespace; `t.unbroadcast` sums a cotangent back to an input's shape.
#
# Conventions follow TensorFlow's registered gradients (checked against TF 2.21):
# - floor, ceil, round, floordiv, truncdiv: no gradient (None), as TF's rules return;
# - sign: zeros; abs: sign(x) (0 at x = 0); relu/relu6: 0 at the kinks (x = 0, x = 6); elu: 1 at 0;
# - maximum/minimum: the whole cotangent goes to x where x >= y (maximum) / x <= y (minimum), to y
#   elsewhere, so ties go to x;
# - pow: dx = g * y * x^(y-1) (NaN at x = y = 0, as TF); dy = g * z * log(x) where x > 0, else 0;
# - mod (FloorMod): dx = g, dy = -g * floor(x / y);
# - comparisons, logical and bitwise ops, is_nan/is_finite: None for every input (TF's
#   NotDifferentiable; their outputs are bool or integer, which never carry a cotangent).


def no_gradient(t: Any, primals: list, outputs: list, cts: list, **attrs: Any) -> list[Any]:
    """The rule of an op nothing differentiates through (TensorFlow's ``NotDifferentiable``): None
    for every input."""
    return [None] * len(primals)


def _is_float(x: Any) -> bool:
    return bool(x.dtype.is_floating)


def _binary_vjp(fx: Callable[..., Any] | None, fy: Callable[..., Any] | None) -> Callable[..., list[Any]]:
    """The vjp of ``z = f(x, y)`` from ``ct * dz/dx`` and ``ct * dz/dy`` written as ``f(t, x, y, z, ct)``
    (``None``: no gradient there); each is summed back over the axes broadcasting added."""

    def vjp(t: Any, primals: list, outputs: list, cts: list, **attrs: Any) -> list[Any]:
        (x, y), (z,), (ct,) = primals, outputs, cts
        if not _is_float(z):
            return [None, None]
        gx = None if fx is None else t.unbroadcast(fx(t, x, y, z, ct), t.shape_of(x))
        gy = None if fy is None else t.unbroadcast(fy(t, x, y, z, ct), t.shape_of(y))
        return [gx, gy]

    return vjp


def _unary_vjp(f: Callable[..., Any]) -> Callable[..., list[Any]]:
    """The vjp of ``y = f(x)`` from ``ct * dy/dx`` written as ``f(t, x, y, ct)``."""

    def vjp(t: Any, primals: list, outputs: list, cts: list, **attrs: Any) -> list[Any]:
        x = primals[0]
        return [f(t, x, outputs[0], cts[0], **attrs) if _is_float(x) else None]

    return vjp


def _masked(t: Any, keep: Any, g: Any) -> Any:
    """``g`` where ``keep``, else 0."""
    return t.where(keep, g, t.zeros_like(g))


def _gelu_grad(t: Any, x: Any, y: Any, g: Any, approximate: bool = False) -> Any:
    """d gelu / dx: ``Phi(x) + x phi(x)`` (exact), or the derivative of the tanh approximation."""
    if approximate:
        c = float(np.sqrt(2.0 / np.pi))
        th = t.tanh(c * (x + 0.044715 * x * x * x))
        return g * (0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * (c * (1.0 + 3.0 * 0.044715 * x * x)))
    cdf = 0.5 * (1.0 + t.erf(x * float(1.0 / np.sqrt(2.0))))
    pdf = t.exp(-0.5 * x * x) * float(1.0 / np.sqrt(2.0 * np.pi))
    return g * (cdf + x * pdf)


def _pow_dy(t: Any, x: Any, y: Any, z: Any, g: Any) -> Any:
    """``g * z * log(x)`` where ``x > 0``; 0 elsewhere (no false singularity at ``x = 0``)."""
    positive = x > 0.0
    log_x = t.where(positive, t.log(t.where(positive, x, t.ones_like(x))), t.zeros_like(x))
    return g * z * log_x


def _select_vjp(t: Any, primals: list, outputs: list, cts: list) -> list[Any]:
    """``where(c, x, y)``: the cotangent goes to ``x`` where ``c``, to ``y`` elsewhere; ``c`` gets None."""
    (c, x, y), (ct,) = primals, cts
    if not _is_float(x):
        return [None, None, None]
    zero = t.zeros_like(ct)
    return [None, t.unbroadcast(t.where(c, ct, zero), t.shape_of(x)),
            t.unbroadcast(t.where(c, zero, ct), t.shape_of(y))]


def _cast_vjp(t: Any, primals: list, outputs: list, cts: list, dtype: DType) -> list[Any]:
    """A float-to-float cast passes the cotangent back in the input's dtype; other casts cut it."""
    x = primals[0]
    return [t.cast(cts[0], x.dtype) if _is_float(x) and dtype.is_floating else None]


_SQRT_PI = float(2.0 / np.sqrt(np.pi))

VJPS: dict[str, Callable[..., list[Any]]] = {
    "add": _binary_vjp(lambda t, x, y, z, g: g, lambda t, x, y, z, g: g),
    "sub": _binary_vjp(lambda t, x, y, z, g: g, lambda t, x, y, z, g: -g),
    "mul": _binary_vjp(lambda t, x, y, z, g: g * y, lambda t, x, y, z, g: g * x),
    "div": _binary_vjp(lambda t, x, y, z, g: g / y, lambda t, x, y, z, g: -g * z / y),
    "pow": _binary_vjp(lambda t, x, y, z, g: g * y * t.pow(x, y - 1.0), _pow_dy),
    "maximum": _binary_vjp(lambda t, x, y, z, g: _masked(t, x >= y, g), lambda t, x, y, z, g: _masked(t, x < y, g)),
    "minimum": _binary_vjp(lambda t, x, y, z, g: _masked(t, x <= y, g), lambda t, x, y, z, g: _masked(t, x > y, g)),
    "squared_difference": _binary_vjp(lambda t, x, y, z, g: 2.0 * g * (x - y),
                                      lambda t, x, y, z, g: -2.0 * g * (x - y)),
    "mod": _binary_vjp(lambda t, x, y, z, g: g, lambda t, x, y, z, g: -g * t.floordiv(x, y)),
    "neg": _unary_vjp(lambda t, x, y, g: -g),
    "abs": _unary_vjp(lambda t, x, y, g: g * t.sign(x)),
    "exp": _unary_vjp(lambda t, x, y, g: g * y),
    "expm1": _unary_vjp(lambda t, x, y, g: g * (y + 1.0)),
    "log": _unary_vjp(lambda t, x, y, g: g / x),
    "log1p": _unary_vjp(lambda t, x, y, g: g / (x + 1.0)),
    "sqrt": _unary_vjp(lambda t, x, y, g: g * 0.5 / y),
    "rsqrt": _unary_vjp(lambda t, x, y, g: g * -0.5 * y * y * y),
    "square": _unary_vjp(lambda t, x, y, g: g * (2.0 * x)),  # TF's order: 2x first (g * 2 may overflow float16)
    "reciprocal": _unary_vjp(lambda t, x, y, g: -g * y * y),
    "tanh": _unary_vjp(lambda t, x, y, g: g * (1.0 - y * y)),
    "sigmoid": _unary_vjp(lambda t, x, y, g: g * y * (1.0 - y)),
    # why: the relus' masks read the output (y > 0 exactly where x > 0, NaN included), so the
    # pre-activation has one use and fuses into the relu instead of being kept for the backward pass
    "relu": _unary_vjp(lambda t, x, y, g: _masked(t, y > 0.0, g)),
    "relu6": _unary_vjp(lambda t, x, y, g: _masked(t, (y > 0.0) & (y < 6.0), g)),
    "elu": _unary_vjp(lambda t, x, y, g: t.where(y > 0.0, g, g * (y + 1.0))),
    "gelu": _unary_vjp(_gelu_grad),
    "softplus": _unary_vjp(lambda t, x, y, g: g * t.sigmoid(x)),
    "sin": _unary_vjp(lambda t, x, y, g: g * t.cos(x)),
    "cos": _unary_vjp(lambda t, x, y, g: -g * t.sin(x)),
    "erf": _unary_vjp(lambda t, x, y, g: g * _SQRT_PI * t.exp(-(x * x))),
    "sign": _unary_vjp(lambda t, x, y, g: t.zeros_like(x)),
    "select": _select_vjp,
    "cast": _cast_vjp,
}
NOT_DIFFERENTIABLE = ("floor", "ceil", "round", "floordiv", "truncdiv", "equal", "not_equal", "less", "less_equal",
                      "greater", "greater_equal", "logical_and", "logical_or", "logical_not", "bitwise_and",
                      "bitwise_or", "bitwise_xor", "invert", "is_nan", "is_finite")
for _name, _rule in VJPS.items():
    REGISTRY[_name].vjp = _rule
for _name in NOT_DIFFERENTIABLE:
    REGISTRY[_name].vjp = no_gradient
