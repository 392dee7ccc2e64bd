"""Scalar math for generated codelets: float32 in, float32 out (ints where named ``_i``).

These are the element functions of the unary/binary ops. Generated codelets call them inside
their loops and Numba inlines them. Semantics follow TensorFlow: IEEE inf/nan propagate, integer
division floors, integer division by zero gives -1 (as XLA does).

The transcendentals (exp, expm1, log, log1p, tanh, sigmoid, erf, sin, cos and what is built on
them) are branch-free float32 polynomials with range reduction, so that a loop calling them
vectorises (libm calls do not): special values are handled with selects, 2^k scaling and
exponent/mantissa splitting with bitcasts (:mod:`popjit.kernels.bits`), and rounding to an
integer with the "add 1.5·2^23" shifter. Coefficients are float32 minimax fits made by
:mod:`popjit.kernels._fit` (``python -m popjit.kernels._fit`` prints them); the measured errors
are in ``tests/kernels/test_math.py`` (all within a few float32 ulps of the correctly rounded
result; sin/cos for |x| < 2^32 or 2^50, see :func:`_sin32`). float64 arguments go to NumPy's
(libm) functions instead, chosen when the calling codelet is compiled.

They compile with ``fastmath={'contract'}`` only: the range reductions and the shifter rely on
exact float32 arithmetic that ``reassoc``/``afn``/``arcp`` would let LLVM rewrite. The flags are
per instruction, so the caller's codelet keeps its own flags around the inlined body.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from .bits import f32_bits, f32_from_bits, f64_bits
from .jit import codelet

F1 = np.float32(1.0)
F0 = np.float32(0.0)
HALF = np.float32(0.5)
F2 = np.float32(2.0)
INF = np.float32(np.inf)
NAN = np.float32(np.nan)

precise = codelet(fastmath={"contract"})
"""Decorator for functions whose float32 arithmetic must stay as written (FMA contraction only)."""


def _split(v: float, bits: int) -> tuple[np.float32, np.float32]:
    """``v`` as hi + lo: hi has ``bits`` significant bits (so k·hi is exact for small k), lo the rest."""
    e = int(np.floor(np.log2(abs(v))))
    q = 2.0 ** (bits - 1 - e)
    hi = np.floor(v * q) / q
    return np.float32(hi), np.float32(v - hi)


# ---- polynomial coefficients: `python -m popjit.kernels._fit` (float64 minimax, float32-rounded) ----
# exp(r) = 1 + r + r^2 P(r), |r| <= ln2/2: max relative error 3.4e-9
_EXP = (np.float32(0.4999999403953552), np.float32(0.16666516661643982), np.float32(0.041668280959129333),
        np.float32(0.008369253017008305), np.float32(0.0013820927124470472))
# expm1(r) = r + r^2/2 + r^3 P(r), |r| <= ln2/2: 4.6e-10
_EXPM1 = (np.float32(0.1666666567325592), np.float32(0.041666485369205475), np.float32(0.008333542384207249),
          np.float32(0.0013933224836364388), np.float32(0.00019766071636695415))
# log1p(f) = f - f^2/2 + f^3 P(f), f in [sqrt(1/2) - 1, sqrt(2) - 1]: 5.8e-9
_LOG = (np.float32(0.3333333134651184), np.float32(-0.2500081956386566), np.float32(0.2000124156475067),
        np.float32(-0.1662341058254242), np.float32(0.14201585948467255), np.float32(-0.13159599900245667),
        np.float32(0.12762144207954407), np.float32(-0.07636356353759766))
# tanh(x) = x P(x^2) / Q(x^2), 0 <= x <= 9.02: 1.2e-8 (a rational fit, python -m popjit.kernels._fit)
_TANH_P = (F1, np.float32(0.13681529462337494), np.float32(0.0038703246973454952),
           np.float32(2.804618088703137e-05), np.float32(3.067185616600909e-08), np.float32(-1.2262211211699903e-11))
_TANH_Q = (F1, np.float32(0.47014862298965454), np.float32(0.02725321426987648),
           np.float32(0.0003942095790989697), np.float32(1.289988631469896e-06))
# sin(r) = r + r^3 P(r^2), cos(r) = 1 - r^2/2 + r^4 Q(r^2), |r| <= pi/4: 4.0e-9, 1.2e-10
_SIN = (np.float32(-0.16666655242443085), np.float32(0.008332189172506332), np.float32(-0.00019518291810527444))
_COS = (np.float32(0.04166664555668831), np.float32(-0.0013887309469282627), np.float32(2.4432327336398885e-05))
# erf(x) = x + x P(x^2), |x| < 1.5: 9.7e-10 relative
_ERF_SMALL = (np.float32(0.12837916612625122), np.float32(-0.37612631916999817), np.float32(0.11283711344003677),
              np.float32(-0.026862597092986107), np.float32(0.005215930752456188),
              np.float32(-0.0008445021812804043), np.float32(0.00011258084850851446),
              np.float32(-1.118484215112403e-05), np.float32(6.04277488491789e-07))
# erf(x) = 1 + P(x - 2.6), 1.5 <= x <= 3.92: 7.0e-9 absolute
_ERF_LARGE = (np.float32(-0.0002360283542657271), np.float32(0.0013080131029710174),
              np.float32(-0.0034012894611805677), np.float32(0.0054596890695393085),
              np.float32(-0.005959563888609409), np.float32(0.004559083376079798),
              np.float32(-0.0023768360260874033), np.float32(0.0006835564272478223),
              np.float32(8.90050214366056e-05), np.float32(-0.0001901796495076269),
              np.float32(6.412264337996021e-05), np.float32(5.469566531246528e-06),
              np.float32(-5.390782916947501e-06))
_ERF_SPLIT, _ERF_CENTRE, _ERF_ONE = np.float32(1.5), np.float32(2.6), np.float32(3.92)
_TANH_ONE = np.float32(9.1)  # see _tanh32

# ---- range-reduction constants ----
_LN2 = float(np.log(2.0))
_LOG2E = np.float32(1.0 / _LN2)
_LN2_HI, _LN2_LO = _split(_LN2, 16)  # k * _LN2_HI exact for |k| < 2^8
_SHIFT = np.float32(1.5 * 2.0**23)  # x + _SHIFT rounds x to an integer k (|x| < 2^22), held in the low bits
_SHIFT_BITS = _SHIFT.view(np.int32)
_EXP_LO, _EXP_HI = np.float32(-104.0), np.float32(89.0)  # exp is 0 below, inf above
_EXPM1_LO = np.float32(-30.0)  # expm1 is -1 below
_MIN_NORMAL = np.float32(2.0**-126)
_TWO23 = np.float32(2.0**23)
_TWO_M24 = np.float32(2.0**-24)
_F23 = np.float32(23.0)
_SQRT_HALF_BITS = np.float32(np.sqrt(0.5)).view(np.int32)
_MANT = np.int32(0x007FFFFF)
_TWO_OVER_PI = 2.0 / np.pi
_SHIFT64 = 1.5 * 2.0**52
_SIN_MAX = 2.0**50  # sin/cos reduce min(|x|, 2^50): beyond, the 1.5·2^52 shifter cannot hold k
_PIO2 = Fraction("1.570796326794896619231321691639751442098584699687552910487472296153908")  # π/2, 70 digits
# π/2 = _PIO2_1 + _PIO2_2 + _PIO2_3 (+ < 2^-95): 22-bit _PIO2_1, _PIO2_2, so k·_PIO2_{1,2} are exact for
# |k| < 2^31 even without FMA; with FMA each step of the reduction is exact further out
_PIO2_1 = math.floor(_PIO2 * 2**21) / 2**21
_PIO2_2 = math.floor((_PIO2 - Fraction(_PIO2_1)) * 2**43) / 2**43
_PIO2_3 = float(_PIO2 - Fraction(_PIO2_1) - Fraction(_PIO2_2))


@precise
def _poly2(t, c):
    return (c[2] * t + c[1]) * t + c[0]


@precise
def _poly4(t, c):
    return (((c[4] * t + c[3]) * t + c[2]) * t + c[1]) * t + c[0]


@precise
def _poly5(t, c):
    return _poly4(t, c[1:]) * t + c[0]


@precise
def _poly7(t, c):
    return ((((((c[7] * t + c[6]) * t + c[5]) * t + c[4]) * t + c[3]) * t + c[2]) * t + c[1]) * t + c[0]


@precise
def _poly8(t, c):
    return _poly7(t, c[1:]) * t + c[0]


@precise
def _poly12(t, c):
    t2 = t * t
    return _poly7(t, c[5:]) * (t2 * t2 * t) + _poly4(t, c)


@precise
def _pow2(k):
    """2^k for an integer -126 <= k <= 127, built from its bits."""
    return f32_from_bits((k + 127) << 23)


@precise
def _exp_reduced(x):
    """(e^r, k) with x = k ln2 + r, |r| <= ln2/2 (Cody–Waite); |x| < 2^21 (callers clamp)."""
    z = x * _LOG2E + _SHIFT
    kf = z - _SHIFT
    r = (x - kf * _LN2_HI) - kf * _LN2_LO
    return F1 + (r + (r * r) * _poly4(r, _EXP)), f32_bits(z) - _SHIFT_BITS


@precise
def _exp32(x):
    """e^x = 2^k e^r (see :func:`_exp_reduced`); NaN passes the clamps and the arithmetic.

    2^k is applied as two normal factors 2^k1 2^(k - k1), k1 = clamp(k, -125, 127), so that
    k = 128 (x up to ln(FLT_MAX)) and the denormal results down to x = -103.97 come out with one
    rounding: y 2^k1 is exact, as y >= 1/sqrt(2) keeps it normal (-126 would not).
    """
    xc = _EXP_LO if x < _EXP_LO else x  # selects that let NaN through
    y, k = _exp_reduced(_EXP_HI if xc > _EXP_HI else xc)
    k1 = max(min(k, 127), -125)
    return (y * _pow2(k1)) * _pow2(k - k1)


@precise
def _expm1_32(x):
    """e^x - 1, accurate near 0: 2^k (expm1(r) + 1) - 1 = 2^k expm1(r) + (2^k - 1)."""
    xc = _EXPM1_LO if x < _EXPM1_LO else x
    xc = _EXP_HI if xc > _EXP_HI else xc
    z = xc * _LOG2E + _SHIFT
    kf = z - _SHIFT
    r = (xc - kf * _LN2_HI) - kf * _LN2_LO
    p = r + (r * r) * (HALF + r * _poly4(r, _EXPM1))
    k = f32_bits(z) - _SHIFT_BITS
    kk = min(k, 127)  # k = 128 only for x in (88.4, 89]: 2^127 (...) then doubled
    t = _pow2(kk)
    y = t * p + (t - F1)
    y = y if k == kk else y + y
    return x if x == F0 else y  # keeps the sign of zero


@precise
def _log_kernel(f, e):
    """e ln2 + log1p(f) for f in [sqrt(1/2) - 1, sqrt(2) - 1] and a small integer-valued e."""
    q = (f * f) * (f * _poly7(f, _LOG) - HALF)
    return e * _LN2_HI + (f + (q + e * _LN2_LO))


@precise
def _log_special(x, y):
    """log's value at the edges: +inf and NaN pass through, 0 gives -inf, negatives NaN."""
    y = y if x < INF else x
    y = -INF if x == F0 else y
    return NAN if x < F0 else y


@precise
def _log32(x):
    """Natural log: x = 2^e m with m in [sqrt(1/2), sqrt(2)), log x = e ln2 + log1p(m - 1)."""
    sub = abs(x) < _MIN_NORMAL  # denormals: scale by 2^23 first
    xs = abs(x) * _TWO23 if sub else abs(x)
    ix = f32_bits(xs) - _SQRT_HALF_BITS
    m = f32_from_bits((ix & _MANT) + _SQRT_HALF_BITS)
    e = np.float32(ix >> 23) - (_F23 if sub else F0)
    return _log_special(x, _log_kernel(m - F1, e))


@precise
def _log1p32(x):
    """log(1 + x), accurate near 0: reduce u = 1 + x as in :func:`log` and add back u's rounding error."""
    u = F1 + x
    c = (x - (u - F1)) if u <= F2 else (F1 - (u - x))  # (1 + x) - u, exactly
    ix = f32_bits(abs(u)) - _SQRT_HALF_BITS
    e = ix >> 23
    m = f32_from_bits((ix & _MANT) + _SQRT_HALF_BITS)
    f = (m - F1) + c * f32_from_bits((127 - min(e, 126)) << 23)  # c 2^-e
    y = _log_special(u, _log_kernel(f, np.float32(e)))
    return x if x == F0 else y


@precise
def _tanh32(x):
    """tanh as one rational function x P(x^2) / Q(x^2) of x clamped to ±9.1 (tanh rounds to ±1 from
    9.02 on, and the quotient is exactly 1 at 9.1).

    Within 5.1 ulps (every float32 checked): the rounding of the two polynomials' evaluation in
    float32; XLA's tanh, also a rational function, is 4.9 ulps off measured the same way. It is one
    division and eleven multiplies or multiply-adds, half the operations of the exp-based tanh it
    replaced (2 ulps): the benchmark chain, tanh and sigmoid per element, ran 1.3x faster per core.
    """
    x = _TANH_ONE if x > _TANH_ONE else x  # selects that let NaN through
    x = -_TANH_ONE if x < -_TANH_ONE else x
    s = x * x
    return x * _poly5(s, _TANH_P) / _poly4(s, _TANH_Q)


@precise
def _sigmoid32(x):
    """1 / (1 + e^-x) as e^-|x| / (1 + e^-|x|) for x < 0: relative accuracy down to the denormals.

    e^-|x| = 2^k y as in :func:`_exp32`, with -150 <= k <= 0: 2^k is applied as 2^(k+24), which
    keeps y normal, then 2^-24, so that denormal results come out with one rounding (one factor
    fewer than :func:`_exp32`'s, which must reach k = 128 too).
    """
    t = -abs(x)
    y, k = _exp_reduced(_EXP_LO if t < _EXP_LO else t)  # a select that lets NaN through; -150 <= k <= 0
    e = (y * _pow2(k + 24)) * _TWO_M24  # y 2^(k+24) is exact (normal), one rounding after
    return (F1 if x >= F0 else e) / (F1 + e)


@precise
def _erf32(x):
    """erf: x + x P(x^2) for |x| < 1.5, 1 + P(|x| - 2.6) up to 3.92, 1 above; the sign copied from x."""
    a = abs(x)
    small = a + a * _poly8(a * a, _ERF_SMALL)
    t = (_ERF_ONE if a > _ERF_ONE else a) - _ERF_CENTRE  # (clamped only to keep it finite)
    big = F1 if a >= _ERF_ONE else F1 + _poly12(t, _ERF_LARGE)
    return np.copysign(small if a < _ERF_SPLIT else big, x)


@precise
def _softplus32(x):
    """log(1 + e^x) = max(x, 0) + log1p(e^-|x|), with a log1p for arguments in [0, 1]."""
    e = _exp32(-abs(x))
    u = F1 + e  # in [1, 2]: exponent 0 or 1
    c = e - (u - F1)  # the rounding error of u
    ix = f32_bits(u) - _SQRT_HALF_BITS
    k = ix >> 23
    m = f32_from_bits((ix & _MANT) + _SQRT_HALF_BITS)
    f = (m - F1) + (c * HALF if k > 0 else c)
    return (x if x > F0 else F0) + _log_kernel(f, np.float32(k))


@precise
def _elu32(x):
    return x if x > F0 else _expm1_32(x)


@precise
def _gelu_erf32(x):
    """x Φ(x) = x/2 (1 + erf(x/√2)), as TensorFlow computes it (absolute, not relative, accuracy for x << 0)."""
    return HALF * x * (F1 + _erf32(x * np.float32(0.7071067811865476)))


@precise
def _gelu_tanh32(x):
    """x/2 (1 + tanh(√(2/π) (x + 0.044715 x^3))), TensorFlow's approximate gelu."""
    inner = np.float32(0.7978845608028654) * (x + np.float32(0.044715) * x * x * x)
    return HALF * x * (F1 + _tanh32(inner))


@precise
def _sin_cos_reduce(x):
    """x = k π/2 + r, |r| <= π/4, in float64 (Cody–Waite, 3 parts): (float32 r, k mod 4)."""
    xd = np.float64(x)
    xd = _SIN_MAX if xd > _SIN_MAX else (-_SIN_MAX if xd < -_SIN_MAX else xd)  # keeps |k| < 2^51
    z = xd * _TWO_OVER_PI + _SHIFT64
    kd = z - _SHIFT64
    r = ((xd - kd * _PIO2_1) - kd * _PIO2_2) - kd * _PIO2_3
    return np.float32(r) + (x - x), f64_bits(z) & 3  # x - x: NaN for ±inf (clamped above) and NaN


@precise
def _sin_poly(r):
    return r + r * ((r * r) * _poly2(r * r, _SIN))


@precise
def _cos_poly(r):
    r2 = r * r
    return F1 + r2 * (r2 * _poly2(r2, _COS) - HALF)


@precise
def _sin32(x):
    """sin: the quadrant k mod 4 of :func:`_sin_cos_reduce` picks ±sin(r) or ±cos(r).

    Within 1.5 ulp for |x| < 2^32 in any build, and up to |x| < 2^50 where LLVM contracts the
    reduction into FMAs (x86-64 with FMA, as on the machines we measured). Beyond 2^50 (float32
    spacing 2^27 there, no phase information left) x is reduced as ±2^50: the result is in
    [-1, 1] but meaningless. ±inf and NaN give NaN.
    """
    r, q = _sin_cos_reduce(x)
    s, c = _sin_poly(r), _cos_poly(r)
    y = c if (q & 1) != 0 else s
    y = -y if (q & 2) != 0 else y
    return x if x == F0 else y


@precise
def _cos32(x):
    """cos = sin(x + π/2): the quadrant shifted by one (same accuracy and range as :func:`sin`)."""
    r, q = _sin_cos_reduce(x)
    s, c = _sin_poly(r), _cos_poly(r)
    y = s if (q & 1) != 0 else c
    return -y if ((q + 1) & 2) != 0 else y


@codelet
def _sigmoid64(x):
    e = np.exp(-abs(x))
    return (1.0 if x >= 0.0 else e) / (1.0 + e)


@codelet
def _softplus64(x):
    return (x if x > 0.0 else 0.0) + np.log1p(np.exp(-abs(x)))


@codelet
def _gelu_erf64(x):
    return 0.5 * x * (1.0 + math.erf(x * 0.7071067811865476))


@codelet
def _gelu_tanh64(x):
    return 0.5 * x * (1.0 + np.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))


# The public scalar functions. ``km.<name>`` is the float32 kernel (float16 computes in float32);
# ``km.<name>64`` the float64 version (NumPy/libm precision) for host-compiled float64 code. The
# code generator picks one by dtype (see the templates in popjit/ops/elementwise.py), so no
# dispatch layer costs a compile.
exp, expm1, log, log1p, tanh, sigmoid = _exp32, _expm1_32, _log32, _log1p32, _tanh32, _sigmoid32
erf, softplus, elu, sin, cos = _erf32, _softplus32, _elu32, _sin32, _cos32
gelu_erf, gelu_tanh = _gelu_erf32, _gelu_tanh32
sigmoid64, softplus64, gelu_erf64, gelu_tanh64 = _sigmoid64, _softplus64, _gelu_erf64, _gelu_tanh64


@codelet
def elu64(x):
    return x if x > 0.0 else np.expm1(x)


@codelet
def erf64(x):
    return math.erf(x)


@codelet
def sqrt(x):
    return np.sqrt(x)  # llvm.sqrt: vsqrtps, correctly rounded


@precise
def rsqrt(x):
    """1/sqrt(x) with a real division: under ``afn``/``arcp`` LLVM uses the estimate + Newton
    step, which is NaN at 0 and +inf and wrong for denormals."""
    return F1 / np.sqrt(x)


@codelet
def sign(x):
    return np.float32(1.0) if x > F0 else (np.float32(-1.0) if x < F0 else x)


@codelet
def round_half_even(x):
    return np.float32(np.rint(x))


@codelet
def floordiv_f(x, y):
    return np.floor(x / y)


@codelet
def floormod_f(x, y):
    r = np.fmod(x, y)
    return r + y if (r != F0) and ((r < F0) != (y < F0)) else r


@codelet
def floordiv_i(x, y):
    if y == 0:
        return -1
    q = x // y
    return q


@codelet
def floormod_i(x, y):
    if y == 0:
        return x
    return x % y


@codelet
def truncdiv_i(x, y):
    if y == 0:
        return -1
    q = abs(x) // abs(y)
    return q if (x >= 0) == (y >= 0) else -q


@codelet
def pow_i(x, y):
    if y < 0:
        return 1 if x == 1 else ((1 if y % 2 == 0 else -1) if x == -1 else 0)
    r = 1
    b = x
    e = y
    while e > 0:
        if e & 1:
            r = r * b
        b = b * b
        e >>= 1
    return r


@codelet
def pow_f(x, y):
    return np.power(x, y)


@codelet
def is_nan(x):
    return x != x


@codelet
def is_finite(x):
    return (x == x) and (abs(x) != np.float32(np.inf))


F6 = np.float32(6.0)


@codelet
def fmax(x, y):
    """max that propagates NaN from either side (TensorFlow's tf.maximum)."""
    return (x if x >= y else y) if (x == x and y == y) else x + y


@codelet
def fmin(x, y):
    """min that propagates NaN from either side (TensorFlow's tf.minimum)."""
    return (x if x <= y else y) if (x == x and y == y) else x + y


@codelet
def f2i(x, lo, hi, bad):
    """float → int truncating toward zero; NaN and values outside [lo, hi] give ``bad``."""
    ok = (x == x) and (np.float64(x) > np.float64(lo) - 1.0) and (np.float64(x) < np.float64(hi) + 1.0)
    return int(x) if ok else bad
