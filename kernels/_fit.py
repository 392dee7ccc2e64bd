"""Regenerate the polynomial coefficients of :mod:`popjit.kernels.math` (``python -m popjit.kernels._fit``).

Every approximation in ``math.py`` has the form ``F(x) = A(x) + B(x) * P(t(x))`` on a reduced
interval, where ``A`` and ``B`` are fixed (e.g. ``exp(r) = 1 + r + r^2 P(r)``) and only the
coefficients of ``P`` are fitted. The fit is a discrete minimax (linear program, solved with
HiGHS) in float64 on a dense grid, weighted for relative error (or absolute error where the
function is close to a constant, as ``erf`` near 1). Coefficients are then rounded to float32
one at a time, lowest degree first, re-fitting the remaining ones after each rounding so that
the higher ones absorb the rounding of the lower ones.

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


def _erf(x: np.ndarray) -> np.ndarray:
    from scipy.special import erf

    return erf(x)


LN2 = float(np.log(2.0))
SQRT_HALF = float(np.sqrt(0.5))
TANH_SMALL = 0.6  # tanh: polynomial below, 1 - 2 / (exp(2x) + 1) above
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
    Form("TANH", np.tanh, lambda x: x, lambda x: x**3, lambda x: x * x, 0.0, TANH_SMALL, 4),
    Form("SIN", np.sin, lambda r: r, lambda r: r**3, lambda r: r * r, 0.0, np.pi / 4 + 1e-6, 2),
    Form("COS", np.cos, lambda r: 1 - r * r / 2, lambda r: r**4, lambda r: r * r, 0.0, np.pi / 4 + 1e-6, 2),
    Form("ERF_SMALL", _erf, lambda x: x, lambda x: x, lambda x: x * x, 0.0, ERF_SMALL, 8),
    Form("ERF_LARGE", _erf, lambda x: 0 * x + 1, lambda x: 0 * x + 1, lambda x: x - ERF_CENTRE,
         ERF_SMALL, ERF_ONE, 12, relative=False),
]


def main() -> None:
    """Print the coefficient tuples in the form ``math.py`` uses."""
    for form in FORMS:
        coef, err = fit(form)
        body = ", ".join(f"np.float32({float(c)!r})" for c in coef)
        print(f"# {form.name}: degree {form.degree} on [{form.lo:.6g}, {form.hi:.6g}], max weighted err {err:.3g}")
        print(f"_{form.name} = ({body})")


if __name__ == "__main__":
    main()
