"""Counter-based random numbers for generated codelets: Philox-4x32-10 (Salmon et al., SC'11).

Every element of a random tensor is a pure function of a 64-bit key (the seed pair) and a
128-bit counter (the element's flat index, the op's call count), so a random op is an ordinary
element-wise expression: it fuses with its consumers and any loop order or thread split gives
the same numbers. :mod:`popjit.ops.random` holds the bit-exact NumPy twin of these functions.

All arithmetic is on uint64 values below 2**32 (products below 2**64), so nothing overflows and
the same code runs as plain Python when ``POPJIT_DISABLE_NUMBA=1``.

Counter layout: ``(flat & 0xffffffff, flat >> 32, call, lane)``; ``lane`` is 0 except for the
retries of a truncated normal.
"""

from __future__ import annotations

import math

import numpy as np

from .jit import codelet

M32 = np.uint64(0xFFFFFFFF)
MUL0 = np.uint64(0xD2511F53)
MUL1 = np.uint64(0xCD9E8D57)
WEYL0 = np.uint64(0x9E3779B9)
WEYL1 = np.uint64(0xBB67AE85)
S32 = np.uint64(32)
S8 = np.uint64(8)
S21 = np.uint64(21)
TWO_M24 = 1.0 / 16777216.0
TWO_M11 = 1.0 / 2048.0
TWO_M32 = 1.0 / 4294967296.0
TWO_M53 = 1.0 / 9007199254740992.0
TWO_PI = 2.0 * math.pi


@codelet
def u32(x):
    """The low 32 bits of an integer, as uint64."""
    return np.uint64(np.int64(x) & np.int64(0xFFFFFFFF))


@codelet
def philox(k0, k1, flat, call, lane):
    """Words 0 and 1 of Philox-4x32-10 at key ``(k0, k1)`` and counter ``(flat, call, lane)``."""
    key0 = u32(k0)
    key1 = u32(k1)
    f = np.int64(flat)
    c0 = u32(f)
    c1 = u32(f >> np.int64(32))
    c2 = u32(call)
    c3 = u32(lane)
    for _ in range(10):
        p0 = MUL0 * c0
        p1 = MUL1 * c2
        n0 = (p1 >> S32) ^ c1 ^ key0
        n2 = (p0 >> S32) ^ c3 ^ key1
        c1 = p1 & M32
        c3 = p0 & M32
        c0 = n0
        c2 = n2
        key0 = (key0 + WEYL0) & M32
        key1 = (key1 + WEYL1) & M32
    return c0, c1


@codelet
def uniform_f32(k0, k1, flat, call):
    """A float32 in [0, 1): the top 24 bits of word 0."""
    x0, _ = philox(k0, k1, flat, call, 0)
    return np.float32(np.float64(x0 >> S8) * TWO_M24)


@codelet
def uniform_f16(k0, k1, flat, call):
    """A float32 holding a float16 in [0, 1): the top 11 bits of word 0 (exact in half)."""
    x0, _ = philox(k0, k1, flat, call, 0)
    return np.float32(np.float64(x0 >> S21) * TWO_M11)


@codelet
def uniform_f64(k0, k1, flat, call):
    """A float64 in [0, 1) from 53 bits of words 0 and 1."""
    x0, x1 = philox(k0, k1, flat, call, 0)
    bits = ((x0 << S21) | (x1 >> np.uint64(11))) & np.uint64(0x1FFFFFFFFFFFFF)
    return np.float64(bits) * TWO_M53


@codelet
def uniform_int(k0, k1, flat, call, lo, span):
    """An integer in [lo, lo + span) (``span`` < 2**32: word 0 modulo span, as TensorFlow does)."""
    x0, _ = philox(k0, k1, flat, call, 0)
    return np.int64(lo) + np.int64(x0 % np.uint64(span))


@codelet
def _box_muller(x0, x1):
    u1 = (np.float64(x0) + 0.5) * TWO_M32
    u2 = np.float64(x1) * TWO_M32
    return math.sqrt(-2.0 * math.log(u1)) * math.cos(TWO_PI * u2)


@codelet
def normal(k0, k1, flat, call):
    """A standard normal (float64) by Box-Muller from words 0 and 1."""
    x0, x1 = philox(k0, k1, flat, call, 0)
    return _box_muller(x0, x1)


@codelet
def truncated_normal(k0, k1, flat, call):
    """A standard normal conditioned on |x| <= 2: retries on lanes 0, 1, 2... until one lands inside."""
    lane = 0
    while True:
        x0, x1 = philox(k0, k1, flat, call, lane)
        z = _box_muller(x0, x1)
        if abs(z) <= 2.0:
            return z
        lane += 1
