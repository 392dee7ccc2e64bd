"""Scalar math for generated codelets: float32 in, float32 out (ints where named ``_i``).

These are the element functions of the unary/binary ops. Generated codelets call them inside
their loops and Numba inlines them. Semantics follow TensorFlow: IEEE inf/nan propagate, integer
division floors, integer division by zero gives -1 (as XLA does).
"""

from __future__ import annotations

import math

import numpy as np

from .jit import codelet

F1 = np.float32(1.0)
F0 = np.float32(0.0)
HALF = np.float32(0.5)


@codelet
def exp(x):
    return np.exp(x)


@codelet
def expm1(x):
    return np.expm1(x)


@codelet
def log(x):
    return np.log(x)


@codelet
def log1p(x):
    return np.log1p(x)


@codelet
def tanh(x):
    return np.tanh(x)


@codelet
def sigmoid(x):
    return F1 / (F1 + exp(-x))


@codelet
def erf(x):
    return np.float32(math.erf(x))


@codelet
def softplus(x):
    return max(x, F0) + log1p(exp(-abs(x)))


@codelet
def elu(x):
    return x if x > F0 else expm1(x)


@codelet
def gelu_erf(x):
    return HALF * x * (F1 + erf(x * np.float32(0.7071067811865476)))


@codelet
def gelu_tanh(x):
    inner = np.float32(0.7978845608028654) * (x + np.float32(0.044715) * x * x * x)
    return HALF * x * (F1 + tanh(inner))


@codelet
def sin(x):
    return np.sin(x)


@codelet
def cos(x):
    return np.cos(x)


@codelet
def sqrt(x):
    return np.sqrt(x)


@codelet
def rsqrt(x):
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
