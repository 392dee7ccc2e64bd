"""Regenerate the polynomial coefficients of :mod:`popjit.kernels.math` (``python -m popjit.kernels._fit``).

Most approximations in ``math.py`` have the form ``F(x) = A(x) + B(x) * P(t(x))`` on a reduced
interval, where ``A`` and ``B`` are fixed (e.g. ``exp(r) = 1 + r + r^2 P(r)``) and only the
coefficients of ``P`` are fitted. The fit is a discrete minimax (linear program, solved with
HiGHS) in float64 on a dense grid, weighted for relative error (or absolute error where the
function is close to a constant, as ``erf`` near 1). Coefficients are then rounded to float32
one at a time, lowest degree first, re-fitting the remaining ones after each rounding so that
the higher ones absorb the rounding of the lower ones.

``tanh`` is one rational function ``x P(x^2) / Q(x^2)`` (:class:`RationalForm`), fitted the same
way with Loeb's linearisation: ``P - f Q`` is minimised with the weights ``1 / (|f| Q_prev)`` of the
previous iteration's denominator, which converges to the relative minimax error of the quotient.

The accuracy that matters is end-to-end in float32; ``tests/kernels/test_math.py`` measures it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

Fn = Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True)
class Form:
    """One fitted approximation: ``target(x) ≈ a(x) + b(x) * P(t(x))`` on ``[lo, hi]``."""

    name: str
    target: Fn
    a: Fn
    b: Fn
    t: Fn
    lo: float
    hi: float
    degree: int
    relative: bool = True
    weight: Fn | None = None  # extra weight on the error (multiplies the relative/absolute one)


def _grid(lo: float, hi: float, n: int = 6000) -> np.ndarray:
    """Chebyshev-distributed points on [lo, hi] plus a uniform grid (denser near the ends)."""
    k = np.arange(n)
    cheb = 0.5 * (lo + hi) + 0.5 * (hi - lo) * np.cos(np.pi * (k + 0.5) / n)
    return np.unique(np.concatenate([cheb, np.linspace(lo, hi, n)]))


def _minimax(cols: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """min_c max_i |cols_i . c - rhs_i| as a linear program (columns and errors rescaled)."""
    from scipy.optimize import linprog

    c0, *_ = np.linalg.lstsq(cols, rhs, rcond=None)
    r0 = cols @ c0 - rhs
    e0 = max(float(np.abs(r0).max()), 1e-300)
    scale = np.abs(cols).max(axis=0)
    m = cols / scale / e0  # unknown: scaled correction d, with c = c0 + d / scale
    rr = r0 / e0
    n, k = m.shape
    # variables [d (k), e]; minimise e subject to -e <= m d + rr <= e
    ones = np.ones((n, 1))
    a_ub = np.vstack([np.hstack([m, -ones]), np.hstack([-m, -ones])])
    b_ub = np.concatenate([-rr, rr])
    cost = np.zeros(k + 1)
    cost[-1] = 1.0
    res = linprog(cost, A_ub=a_ub, b_ub=b_ub, bounds=[(None, None)] * k + [(0, None)], method="highs")
    if not res.success:  # pragma: no cover - the LP is always feasible
        return c0
    return c0 + res.x[:k] / scale


def fit(form: Form) -> tuple[np.ndarray, float]:
    """float32 coefficients of ``P`` (lowest degree first) and the float64 max weighted error."""
    x = _grid(form.lo, form.hi)
    y = form.target(x)
    a, b, t = form.a(x), form.b(x), form.t(x)
    w = 1.0 / np.where(y == 0, 1.0, np.abs(y)) if form.relative else np.ones_like(x)
    if form.weight is not None:
        w = w * form.weight(x)
    keep = b != 0
    x, y, a, b, t, w = x[keep], y[keep], a[keep], b[keep], t[keep], w[keep]
    powers = np.stack([t**j for j in range(form.degree + 1)], axis=1)
    cols = (w * b)[:, None] * powers
    rhs = w * (y - a)
    fixed: list[float] = []
    for j in range(form.degree + 1):
        rest = rhs - cols[:, :j] @ np.array(fixed, dtype=np.float64) if fixed else rhs
        c = _minimax(cols[:, j:], rest)
        fixed.append(float(np.float32(c[0])))
    coef = np.array(fixed, dtype=np.float64)
    err = float(np.abs(cols @ coef - rhs).max())
    return coef.astype(np.float32), err


@dataclass(frozen=True)
class RationalForm:
    """One fitted odd rational function: ``target(x) ≈ x P(x^2) / Q(x^2)`` on ``[lo, hi]``, with
    ``P(0) = Q(0) = 1`` and the given degrees (in ``x^2``)."""

    name: str
    target: Fn
    lo: float
    hi: float
    numerator: int
    denominator: int


def _loeb(cols: np.ndarray, rhs: np.ndarray, y: np.ndarray, den: np.ndarray, den_fixed: np.ndarray,
          iterations: int = 8) -> np.ndarray:
    """Coefficients ``c`` minimising the relative error of a quotient (see the module docstring):
    ``cols @ c - rhs`` is its numerator minus ``y`` times its denominator, the denominator being
    ``den_fixed + den @ c[-den.shape[1]:]``. Returns the best iteration's coefficients."""
    free_den = den.shape[1]

    def denominator(c: np.ndarray) -> np.ndarray:
        return den_fixed + (den @ c[len(c) - free_den:] if free_den else 0.0)

    previous = np.ones_like(y)
    best, best_err = np.zeros(cols.shape[1]), np.inf
    for _ in range(iterations):
        w = 1.0 / (np.abs(y) * np.abs(previous))
        c = _minimax(cols * w[:, None], rhs * w)
        previous = denominator(c)
        err = float(np.abs((cols @ c - rhs) / (y * previous)).max())
        if err < best_err:
            best, best_err = c, err
    return best


def fit_rational(form: RationalForm) -> tuple[np.ndarray, np.ndarray, float]:
    """float32 coefficients of ``P`` and ``Q`` (lowest degree first, ``P(0) = Q(0) = 1``) and the
    float64 max relative error of the quotient with them. They are rounded to float32 one at a time,
    ``P``'s then ``Q``'s, the rest refitted after each."""
    x = _grid(form.lo, form.hi)
    y, s = form.target(x), x * x
    m = form.numerator
    num = np.stack([x * s**j for j in range(1, m + 1)], axis=1)
    den = np.stack([s**j for j in range(1, form.denominator + 1)], axis=1)
    cols = np.hstack([num, -y[:, None] * den])  # x + num @ p - y (1 + den @ q), p and q without the 1s
    fixed: list[float] = []
    for j in range(cols.shape[1]):
        done = np.array(fixed)
        rest = (y - x) - (cols[:, :j] @ done if j else 0.0)
        fixed_q = done[m:]
        den_fixed = 1.0 + (den[:, :len(fixed_q)] @ fixed_q if len(fixed_q) else 0.0)
        c = _loeb(cols[:, j:], rest, y, den[:, len(fixed_q):], den_fixed)
        fixed.append(float(np.float32(c[0])))
    p = np.array([1.0, *fixed[:m]])
    q = np.array([1.0, *fixed[m:]])
    quotient = x * np.polyval(p[::-1], s) / np.polyval(q[::-1], s)
    err = float(np.abs(quotient / y - 1.0).max())
    return p.astype(np.float32), q.astype(np.float32), err


def _erf(x: np.ndarray) -> np.ndarray:
    from scipy.special import erf

    return erf(x)


LN2 = float(np.log(2.0))
SQRT_HALF = float(np.sqrt(0.5))
TANH_ONE = 9.02  # tanh rounds to 1 in float32 from here on
ERF_SMALL = 1.5  # erf: x + x P(x^2) below, 1 + P(x - ERF_CENTRE) up to ERF_ONE, 1 above
ERF_CENTRE = 2.6
ERF_ONE = 3.92  # erfc(3.92) < 2^-25: erf rounds to 1 in float32 from here on

# The reduced intervals are a little wider than the exact ones, so that rounding in the
# argument reduction never leaves the fitted range.
FORMS = [
    Form("EXP", np.exp, lambda r: 1 + r, lambda r: r * r, lambda r: r, -0.35, 0.35, 4),
    Form("EXPM1", np.expm1, lambda r: r + r * r / 2, lambda r: r**3, lambda r: r, -0.35, 0.35, 4),
    Form("LOG", np.log1p, lambda f: f - f * f / 2, lambda f: f**3, lambda f: f,
         SQRT_HALF - 1 - 1e-6, 2 * SQRT_HALF - 1 + 1e-6, 7),
    Form("SIN", np.sin, lambda r: r, lambda r: r**3, lambda r: r * r, 0.0, np.pi / 4 + 1e-6, 2),
    Form("COS", np.cos, lambda r: 1 - r * r / 2, lambda r: r**4, lambda r: r * r, 0.0, np.pi / 4 + 1e-6, 2),
    Form("ERF_SMALL", _erf, lambda x: x, lambda x: x, lambda x: x * x, 0.0, ERF_SMALL, 8),
    Form("ERF_LARGE", _erf, lambda x: 0 * x + 1, lambda x: 0 * x + 1, lambda x: x - ERF_CENTRE,
         ERF_SMALL, ERF_ONE, 12, relative=False),
]


RATIONAL_FORMS = [RationalForm("TANH", np.tanh, 1e-4, TANH_ONE, 5, 4)]


def _tuple(coef: np.ndarray) -> str:
    return "(" + ", ".join(f"np.float32({float(c)!r})" for c in coef) + ")"


def main() -> None:
    """Print the coefficient tuples in the form ``math.py`` uses."""
    for form in FORMS:
        coef, err = fit(form)
        print(f"# {form.name}: degree {form.degree} on [{form.lo:.6g}, {form.hi:.6g}], max weighted err {err:.3g}")
        print(f"_{form.name} = {_tuple(coef)}")
    for rational in RATIONAL_FORMS:
        p, q, err = fit_rational(rational)
        print(f"# {rational.name}: x P(x^2) / Q(x^2), degrees {rational.numerator} and {rational.denominator}, "
              f"on [{rational.lo:.6g}, {rational.hi:.6g}], max relative err {err:.3g}")
        print(f"_{rational.name}_P = {_tuple(p)}")
        print(f"_{rational.name}_Q = {_tuple(q)}")


if __name__ == "__main__":
    main()
