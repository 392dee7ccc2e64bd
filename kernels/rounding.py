"""Rounding to float16 as the IPU's floating-point unit does it, and the checks behind its traps.

Generated codelets compute float16 in float32 and round each result to float16. By default that is
round-to-nearest-even (:func:`popjit.kernels.bits.f32_to_f16`); ``IPUConfig.floating_point_behaviour``
changes it:

- ``nanoo`` (NaN on overflow): a finite value that overflows float16 becomes NaN instead of ±inf
  (:func:`f32_to_f16_nanoo`);
- ``esr`` (stochastic rounding): a value between two float16 numbers rounds away from zero with a
  probability equal to its distance from the one nearer zero, in units of their gap, so the mean of
  many roundings is the value itself (:func:`f32_to_f16_sr`). The random bits are a hash of the
  device's rounding key, the call and the rounding's position (:func:`sr_base`, :func:`sr_bits`):
  one draw per rounded element, so it must be cheap (a 32-bit hash; Philox would cost several
  times the arithmetic it rounds).

The trap checks (``inv``, ``div0``, ``oflo``) of generated codelets are inline comparisons; the ones
here check whole buffers after a library call (a matmul). Each returns a mask of :data:`INV`,
:data:`DIV0` and :data:`OFLO`.

The rounding helpers are branch-free selects on bit patterns, so loops calling them still vectorise.
"""

from __future__ import annotations

import numpy as np

from .bits import f32_bits, f32_from_bits, f32_to_f16
from .jit import codelet
from .random import M32 as _M32
from .random import u32
from .traps import DIV0, INV, OFLO  # noqa: F401  (re-exported: codelets' trap masks)

_INF = np.float32(np.inf)
_NAN = np.float32(np.nan)
_HALF_OVERFLOW = np.float32(65520.0)  # the smallest float32 that rounds to float16 ±inf (to nearest)
_MAGNITUDE = np.uint16(0x7FFF)
_HALF_INF = np.uint16(0x7C00)
_QUIET = np.uint16(0x0200)
_S15, _S16 = np.uint32(15), np.uint32(16)
_MIX0, _MIX1 = np.uint64(0x7FEB352D), np.uint64(0x846CA68B)  # the "lowbias32" hash's multipliers (C. Wellons)
_GOLD, _ODD1, _ODD2 = np.uint64(0x9E3779B9), np.uint64(0x85EBCA6B), np.uint64(0xC2B2AE35)
_I32 = np.int32
_ABS, _ONE = _I32(0x7FFFFFFF), _I32(1)
_S16I, _S23, _S24, _S32 = _I32(16), _I32(23), _I32(24), _I32(32)
# float32 exponents (biased): 2^-14 (float16's smallest normal; 13 mantissa bits are dropped at and
# above it, 126 - e below it), 2^-24 (float16's smallest subnormal) and inf/NaN
_E_HALF, _K_NORMAL, _E_SUB, _E_TINY, _E_NAN = _I32(113), _I32(13), _I32(126), _I32(103), _I32(255)
_TWO_48 = np.float32(2.0**48)
_TWO_M24 = np.float32(2.0**-24)

precise = codelet(fastmath={"contract"})


@precise
def f32_to_f16_nanoo(x):
    """float32 → float16 bits, round to nearest even; a finite value beyond float16's range gives NaN."""
    ax = abs(x)
    return f32_to_f16(_NAN if (ax >= _HALF_OVERFLOW) & (ax < _INF) else x)


@precise
def _mul32(x, c):
    """The low 32 bits of ``x * c`` (LLVM narrows this to a 32-bit multiply, which vectorises)."""
    return np.uint32((np.uint64(x) * c) & _M32)


@precise
def _mix32(x):
    """A bijective avalanche of a 32-bit value (the "lowbias32" hash)."""
    x = np.uint32(x ^ (x >> _S16))
    x = _mul32(x, _MIX0)
    x = np.uint32(x ^ (x >> _S15))
    x = _mul32(x, _MIX1)
    return np.uint32(x ^ (x >> _S16))


@precise
def sr_base(k0, k1, call, lane):
    """The random state of one rounding site in one codelet call: a hash of the device's rounding key
    ``(k0, k1)``, the call number and the site's lane (computed once per call, outside the loops)."""
    x = np.uint32(u32(k0)) ^ _mul32(u32(call), _ODD1) ^ _mul32(u32(lane), _ODD2)
    return _mix32(_mix32(x) ^ np.uint32(u32(k1)))


@precise
def sr_bits(base, index):
    """32 random bits for the rounding at position ``index`` of a site whose state is ``base``."""
    return _mix32(_mul32(u32(index), _GOLD) ^ base)


@precise
def f32_to_f16_sr(x, bits):
    """float32 → float16 bits, rounded stochastically with the 32 random bits ``bits``: up (away from
    zero) with probability the distance from the float16 nearer zero over the gap between the two.
    The ``k`` float32 mantissa bits float16 drops get ``k`` random bits added, then are cut (a carry
    rounds up); values below 2^-25 round to 2^-24 or 0. Exact values, ±inf and NaN convert as they
    are; a finite value past 65504 may round to ±inf. (32-bit integer arithmetic throughout: each
    result is cast back to 32 bits, so LLVM keeps 8 lanes per vector.)"""
    b = f32_bits(x)
    mag = _I32(b & _ABS)
    e = _I32(mag >> _S23)
    k = _K_NORMAL if e >= _E_HALF else _I32(_E_SUB - e)  # the dropped bits: 13, more for float16 subnormals
    k = k if k < _S24 else _S23  # (below 2^-25 the ``tiny`` path is taken instead)
    r = _I32(np.uint32(bits) >> np.uint32(_S32 - k))  # the top k random bits
    cut = f32_from_bits(_I32(_I32(mag + r) & _I32(~_I32(_I32(_ONE << k) - _ONE))))  # a float16 value, or 65536
    down = np.uint32(bits ^ np.uint32(0xFFFFFFFF)) >> np.uint32(8)  # large bits round up, as in ``cut``
    tiny = _TWO_M24 if np.float32(down) < abs(x) * _TWO_48 else np.float32(0.0)
    magnitude = tiny if e < _E_TINY else cut
    rounded = np.uint16(f32_to_f16(magnitude) | np.uint16(_I32(b >> _S16I) & _I32(0x8000)))
    return rounded if e < _E_NAN else f32_to_f16(x)


@precise
def f32_to_f16_sr_nanoo(x, bits):
    """:func:`f32_to_f16_sr` with NaN, not ±inf, for a finite value that rounds past float16's range."""
    r = f32_to_f16_sr(x, bits)
    overflow = ((r & _MAGNITUDE) == _HALF_INF) & (abs(x) < _INF)
    return np.uint16(r | _QUIET) if overflow else r


@codelet
def _float_flags(x):
    """(NaN count, ±inf count) of a float buffer."""
    nan = 0
    inf = 0
    for i in range(x.size):
        v = x[i]
        nan += v != v
        inf += abs(v) == np.inf
    return nan, inf


@codelet
def _half_flags(x):
    """(NaN count, ±inf count) of a float16 buffer held as uint16 bits."""
    nan = 0
    inf = 0
    for i in range(x.size):
        m = x[i] & _MAGNITUDE
        nan += m > _HALF_INF
        inf += m == _HALF_INF
    return nan, inf


@codelet
def _product_traps(out_nan, out_inf, a_nan, a_inf, b_nan, b_inf, inv, oflo):
    """The trap mask of ``out = a @ b``: a NaN operand or result is an invalid operation; a non-finite
    result of finite operands an overflow (an infinite partial sum, or NaN on overflow). Only the
    traps switched on (``inv``, ``oflo``) count."""
    mask = 0
    if inv and (out_nan + a_nan + b_nan) > 0:
        mask |= INV
    if oflo and (out_inf + out_nan) > 0 and (a_nan + a_inf + b_nan + b_inf) == 0:
        mask |= OFLO
    return mask


@codelet
def product_traps_float(out, a, b, inv, oflo):
    """The trap mask of a float32/float64 matmul ``out = a @ b`` (see :func:`_product_traps`)."""
    on, oi = _float_flags(out)
    an, ai = _float_flags(a)
    bn, bi = _float_flags(b)
    return _product_traps(on, oi, an, ai, bn, bi, inv, oflo)


@codelet
def product_traps_half(out, a, b, inv, oflo):
    """The trap mask of a float16 matmul ``out = a @ b`` on uint16 buffers (see :func:`_product_traps`)."""
    on, oi = _half_flags(out)
    an, ai = _half_flags(a)
    bn, bi = _half_flags(b)
    return _product_traps(on, oi, an, ai, bn, bi, inv, oflo)
