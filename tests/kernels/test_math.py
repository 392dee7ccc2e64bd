"""The scalar math of :mod:`popjit.kernels.math`: accuracy in float32 ulps, special values,
vectorisation, the float64 and ``POPJIT_DISABLE_NUMBA=1`` paths.

Accuracy is measured through real Numba-compiled loops (the way generated codelets call these
functions) against float64 NumPy/SciPy references rounded to float32: dense sweeps over every
binade (evenly spaced bit patterns, so denormals, tiny and huge arguments are all hit) plus evenly
spaced values over each function's interesting range. ``python tests/kernels/test_math.py``
prints the table of measured maxima and the throughput of the benchmark chain.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from functools import cache

import numba
import numpy as np
import pytest
import scipy.special as sp

from popjit.kernels import _fit
from popjit.kernels import math as km
from popjit.kernels.bits import f32_bits, f32_from_bits, f64_bits
from popjit.kernels.jit import OPTIONS

F32 = np.float32
FLT_MAX = float(np.finfo(np.float32).max)
TINY = 2.0**-149  # the smallest denormal: the ulp of every float32 below 2^-125


def _gelu_tanh_ref(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))


# name -> (float64 reference, ranges swept evenly besides the bit-pattern sweep, max ulp allowed)
CASES: dict[str, tuple[Callable[[np.ndarray], np.ndarray], list[tuple[float, float]], float]] = {
    "exp": (np.exp, [(-104.0, 89.0), (-1.0, 1.0)], 1.5),
    "expm1": (np.expm1, [(-20.0, 89.0), (-1.0, 1.0)], 2.0),
    "log": (np.log, [(0.0, 4.0), (0.5, 2.0), (0.0, 1e-37)], 1.5),
    "log1p": (np.log1p, [(-1.0, 4.0), (-0.5, 0.5), (100.0, 1e6)], 2.0),
    # tanh is one rational function, as XLA's (4.9 ulps over every float32; popjit's 5.07 there)
    "tanh": (np.tanh, [(-10.0, 10.0), (-1.0, 1.0), (5.5, 9.6)], 5.1),
    "sigmoid": (sp.expit, [(-110.0, 20.0), (-5.0, 5.0)], 3.0),
    "erf": (sp.erf, [(-4.5, 4.5), (-2.0, 2.0)], 2.5),
    "sin": (np.sin, [(-10.0, 10.0), (-1e4, 1e4), (1e6, 2e9)], 2.0),
    "cos": (np.cos, [(-10.0, 10.0), (-1e4, 1e4), (1e6, 2e9)], 2.0),
    "sqrt": (np.sqrt, [(0.0, 100.0)], 0.5),
    "rsqrt": (lambda x: 1.0 / np.sqrt(x), [(0.0, 100.0)], 1.5),
    "softplus": (lambda x: np.logaddexp(0.0, x), [(-110.0, 100.0), (-5.0, 5.0)], 2.0),
    "elu": (lambda x: np.where(x > 0, x, np.expm1(x)), [(-20.0, 5.0), (-1.0, 1.0)], 2.0),
}
# gelu = x Φ(x) is computed as TensorFlow does, x/2 (1 + erf(x/√2)): for x << 0 the sum cancels,
# so its error is bounded by ulps of the result plus ulps of x/2 (the size of the terms summed).
GELU: dict[str, tuple[Callable[[np.ndarray], np.ndarray], float]] = {
    "gelu_erf": (lambda x: 0.5 * x * sp.erfc(-x / np.sqrt(2.0)), 2.0),
    # through the rational tanh: 4.50 over every float32 in ±[1e-3, 20]; XLA's gelu(approximate=True) 4.72
    "gelu_tanh": (_gelu_tanh_ref, 4.5),
}
SIN_RANGE = 2.0**32  # sin/cos: within the bound for |x| below this (with or without FMA contraction)


@cache
def compiled(name: str) -> Callable[[np.ndarray, np.ndarray], None]:
    """``out[i] = km.<name>(a[i])`` compiled with the codelet options, as generated codelets are."""
    fn = getattr(km, name)

    @numba.njit(**OPTIONS)
    def loop(a, out):
        for i in range(a.shape[0]):
            out[i] = fn(a[i])

    return loop


def run(name: str, x: np.ndarray) -> np.ndarray:
    out = np.empty_like(x)
    compiled(name)(x, out)
    return out


def by_bits(lo: float, hi: float, n: int) -> np.ndarray:
    """``n`` float32 in [lo, hi] (0 <= lo <= hi) evenly spaced in bit pattern: every binade covered."""
    b = np.linspace(F32(lo).view(np.int32), F32(hi).view(np.int32), n)
    return b.astype(np.int32).view(np.float32)


def sweep(ranges: list[tuple[float, float]], n: int = 1 << 18) -> np.ndarray:
    """All finite float32 by bit pattern (both signs), then each range by bits and evenly."""
    parts = [by_bits(0.0, FLT_MAX, n), -by_bits(0.0, FLT_MAX, n)]
    for lo, hi in ranges:
        if hi > 0:
            parts.append(by_bits(max(lo, 0.0), hi, n))
        if lo < 0:
            parts.append(-by_bits(max(-hi, 0.0), -lo, n))
        parts.append(np.linspace(lo, hi, n).astype(np.float32))
    return np.unique(np.concatenate(parts))


def ulp_errors(y: np.ndarray, ref: np.ndarray, scale: np.ndarray | None = None) -> np.ndarray:
    """|y - ref| in ulps of the float32-rounded reference; exact agreement required where that is
    not finite (inf, nan). ``scale`` adds to the ulp (for gelu)."""
    with np.errstate(all="ignore"):
        r32 = ref.astype(np.float32)
        ulp = np.maximum(np.spacing(np.abs(r32)).astype(np.float64), TINY)
        if scale is not None:
            ulp = ulp + scale
        err = np.abs(y.astype(np.float64) - ref) / ulp
    special = ~np.isfinite(r32)
    same = (y == r32) | (np.isnan(y) & np.isnan(r32))
    err[special] = np.where(same[special], 0.0, np.inf)
    err[np.isnan(err)] = np.inf  # a NaN where the reference is finite
    return err


def measure(name: str) -> tuple[float, float]:
    """(max ulp error, an argument where it occurs) over the sweep."""
    ref_fn, ranges, _ = CASES[name]
    x = sweep(ranges)
    if name in ("sin", "cos"):
        x = x[np.abs(x) < SIN_RANGE]
    with np.errstate(all="ignore"):
        err = ulp_errors(run(name, x), ref_fn(x.astype(np.float64)))
    i = int(np.argmax(err))
    return float(err[i]), float(x[i])


def measure_gelu(name: str) -> tuple[float, float]:
    ref_fn, _ = GELU[name]
    x = sweep([(-20.0, 20.0), (-3.0, 3.0)])
    with np.errstate(all="ignore"):
        ref = ref_fn(x.astype(np.float64))
        ok = np.isfinite(ref)  # x = -inf is 0 · inf = NaN, as in TensorFlow
        err = ulp_errors(run(name, x)[ok], ref[ok], scale=np.spacing(np.abs(x[ok] / 2)).astype(np.float64))
    i = int(np.argmax(err))
    return float(err[i]), float(x[ok][i])


@pytest.mark.parametrize("name", sorted(CASES))
def test_max_ulp(name: str) -> None:
    worst, at = measure(name)
    assert worst <= CASES[name][2], f"{name}: {worst:.3f} ulp at x = {at!r}"


@pytest.mark.parametrize("name", sorted(GELU))
def test_gelu_error(name: str) -> None:
    worst, at = measure_gelu(name)
    assert worst <= GELU[name][1], f"{name}: {worst:.3f} (ulp of result + ulp of x/2) at x = {at!r}"


INF, NAN = np.inf, np.nan
DENORM = float(2.0**-149)
# (name, argument, exact float32 result); -0.0 results are checked with their sign
EXACT = [
    ("exp", 0.0, 1.0), ("exp", -0.0, 1.0), ("exp", INF, INF), ("exp", -INF, 0.0), ("exp", NAN, NAN),
    ("exp", 88.7229, INF), ("exp", -104.0, 0.0), ("exp", -103.5, 2.0**-149), ("exp", -102.5, 2.0**-148),
    ("exp", DENORM, 1.0),
    ("expm1", 0.0, 0.0), ("expm1", -0.0, -0.0), ("expm1", INF, INF), ("expm1", -INF, -1.0), ("expm1", NAN, NAN),
    ("expm1", DENORM, DENORM), ("expm1", -DENORM, -DENORM), ("expm1", 88.7229, INF), ("expm1", -20.0, -1.0),
    ("log", 0.0, -INF), ("log", -0.0, -INF), ("log", INF, INF), ("log", -INF, NAN), ("log", -1.0, NAN),
    ("log", -DENORM, NAN), ("log", NAN, NAN), ("log", 1.0, 0.0),
    ("log1p", 0.0, 0.0), ("log1p", -0.0, -0.0), ("log1p", -1.0, -INF), ("log1p", -1.5, NAN), ("log1p", INF, INF),
    ("log1p", -INF, NAN), ("log1p", NAN, NAN), ("log1p", DENORM, DENORM), ("log1p", -DENORM, -DENORM),
    ("tanh", 0.0, 0.0), ("tanh", -0.0, -0.0), ("tanh", INF, 1.0), ("tanh", -INF, -1.0), ("tanh", NAN, NAN),
    ("tanh", DENORM, DENORM), ("tanh", -DENORM, -DENORM), ("tanh", 9.1, 1.0), ("tanh", -1e30, -1.0),
    ("sigmoid", 0.0, 0.5), ("sigmoid", -0.0, 0.5), ("sigmoid", INF, 1.0), ("sigmoid", -INF, 0.0),
    ("sigmoid", NAN, NAN), ("sigmoid", 17.0, 1.0), ("sigmoid", -104.0, 0.0), ("sigmoid", -103.0, 2.0**-149),
    ("sigmoid", -102.5, 2.0**-148),
    ("erf", 0.0, 0.0), ("erf", -0.0, -0.0), ("erf", INF, 1.0), ("erf", -INF, -1.0), ("erf", NAN, NAN),
    ("erf", 3.92, 1.0), ("erf", -5.0, -1.0), ("erf", 1e30, 1.0),
    ("sin", 0.0, 0.0), ("sin", -0.0, -0.0), ("sin", INF, NAN), ("sin", -INF, NAN), ("sin", NAN, NAN),
    ("sin", DENORM, DENORM), ("sin", -DENORM, -DENORM),
    ("cos", 0.0, 1.0), ("cos", -0.0, 1.0), ("cos", INF, NAN), ("cos", -INF, NAN), ("cos", NAN, NAN),
    ("cos", DENORM, 1.0),
    ("sqrt", 0.0, 0.0), ("sqrt", -0.0, -0.0), ("sqrt", INF, INF), ("sqrt", -1.0, NAN), ("sqrt", NAN, NAN),
    ("rsqrt", 0.0, INF), ("rsqrt", -0.0, -INF), ("rsqrt", INF, 0.0), ("rsqrt", -1.0, NAN), ("rsqrt", NAN, NAN),
    ("rsqrt", 4.0, 0.5), ("rsqrt", 2.0**-148, 2.0**74),
    ("softplus", INF, INF), ("softplus", -INF, 0.0), ("softplus", NAN, NAN), ("softplus", 100.0, 100.0),
    ("softplus", -104.0, 0.0),
    ("elu", 0.0, 0.0), ("elu", -0.0, -0.0), ("elu", INF, INF), ("elu", -INF, -1.0), ("elu", NAN, NAN),
    ("gelu_erf", 0.0, 0.0), ("gelu_erf", INF, INF), ("gelu_erf", NAN, NAN), ("gelu_erf", 10.0, 10.0),
    ("gelu_tanh", 0.0, 0.0), ("gelu_tanh", INF, INF), ("gelu_tanh", NAN, NAN), ("gelu_tanh", 10.0, 10.0),
]


def _same(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a == b) & (np.signbit(a) == np.signbit(b)) | (np.isnan(a) & np.isnan(b))


@pytest.mark.parametrize("name", sorted({n for n, _, _ in EXACT}))
def test_special_values(name: str) -> None:
    cases = [(x, y) for n, x, y in EXACT if n == name]
    x = np.array([c[0] for c in cases], np.float32)
    want = np.array([c[1] for c in cases], np.float32)
    got = run(name, x)
    bad = ~_same(got, want)
    assert not bad.any(), f"{name}: at {x[bad]} got {got[bad]}, want {want[bad]}"


@pytest.mark.parametrize("name", ["exp", "sigmoid", "expm1", "log", "log1p", "softplus"])
def test_near_thresholds(name: str) -> None:
    """Overflow/underflow edges, denormal arguments and results: within the ulp bound, neighbours too."""
    edges = [88.72283, 88.7228394, -87.33654, -103.27893, -103.97208, -16.635532, 17.32868, -17.32868,
             1.1754944e-38, 2.0**-149, 1e-40, 3.4028235e38, 0.99999994, 1.0000001, -0.99999994, 1e-30]
    base = np.array(edges + [-e for e in edges], np.float32)
    steps = np.arange(-64, 65, dtype=np.int32)
    x = (base.view(np.int32)[:, None] + steps[None, :]).ravel().view(np.float32)
    x = x[np.isfinite(x)]
    ref_fn, _, bound = CASES[name]
    with np.errstate(all="ignore"):
        err = ulp_errors(run(name, x), ref_fn(x.astype(np.float64)))
    assert err.max() <= bound, f"{name}: {err.max():.3f} ulp at x = {x[np.argmax(err)]!r}"


def test_sin_cos_bounded_everywhere() -> None:
    """Beyond the accurate range sin/cos lose accuracy, never their range [-1, 1]."""
    x = sweep([])
    for name in ("sin", "cos"):
        y = run(name, x)
        assert np.all(np.abs(y) <= 1.0), name


def test_float64_versions_have_float64_precision() -> None:
    """``km.<name>64`` (what float64 codelets call) give full float64 results, not float32 ones."""
    x = np.array([-3.7, -0.2, 1e-300, 0.1, 0.5, 2.25, 30.0], np.float64)
    refs = {"erf64": sp.erf, "sigmoid64": sp.expit, "softplus64": lambda v: np.logaddexp(0.0, v),
            "elu64": lambda v: np.where(v > 0, v, np.expm1(v)),
            "gelu_erf64": lambda v: 0.5 * v * (1.0 + sp.erf(v / np.sqrt(2.0)))}
    with np.errstate(invalid="ignore"):
        for name, ref in refs.items():
            np.testing.assert_allclose(run(name, x), ref(x), rtol=1e-14, atol=1e-300, err_msg=name)


def test_float64_templates_never_call_float32_kernels() -> None:
    """Every float template names a float64 version, so float64 code never calls a float32 kernel."""
    from popjit import dtypes
    from popjit.ops import all_ops

    for op in all_ops().values():
        if op.scalar is None:
            continue
        try:
            code = op.scalar(["x", "y", "z"], dtypes.float64)
        except (KeyError, TypeError, IndexError):
            continue
        kernels_called = set(re.findall(r"km\.(\w+)\(", code))
        float32_only = {k for k in kernels_called if hasattr(km, k + "64")}
        assert not float32_only, f"{op.name}: float64 code calls float32 kernels {float32_only}"


# ---- vectorisation ----------------------------------------------------------------------------

LIBM = re.compile(r"^_*(exp|expm1|exp2|log|log1p|log2|tanh|erf|erfc|sin|cos|sincos|pow|sqrt)f?(@plt)?$", re.I)
PACKED = re.compile(r"\bv(?:fn?m(?:add|sub)\d+|mul|add|sub|div|sqrt|max|min)ps\b[^\n]*%[yz]mm")  # arithmetic


@pytest.mark.parametrize("name", sorted([*CASES, *GELU]))
def test_vectorises(name: str) -> None:
    """The loop uses packed float32 ops on ymm/zmm registers and calls nothing (all inlined)."""
    loop = compiled(name)
    x = np.linspace(-3, 3, 64, dtype=np.float32)
    loop(x, np.empty_like(x))
    sig = loop.signatures[0]
    asm = loop.inspect_asm(sig)
    assert PACKED.search(asm), f"{name}: no packed ymm/zmm float32 instructions"
    # direct calls, and symbol addresses loaded for an indirect call (`movabsq $tanhf, %rbp`)
    called = set(re.findall(r"(?:\bcall\w*\s+|\$)([A-Za-z_][\w.@]*)", asm))
    assert not {c for c in called if LIBM.match(c)}, f"{name} calls libm: {called}"
    # (the IR may name sqrtf: LLVM lowers it to vsqrtss, the asm check above is what counts)
    in_ir = set(re.findall(r"call [^\n]*?@\"?([\w.$]+)\"?\(", loop.inspect_llvm(sig)))
    assert not {c for c in in_ir if "kernels" in c}, f"{name}: a kernel was not inlined: {in_ir}"


# ---- other paths ------------------------------------------------------------------------------


def test_bits_roundtrip() -> None:
    @numba.njit
    def f(x, d):
        return f32_bits(x), f32_from_bits(f32_bits(x)), f32_from_bits(np.int64(0x3F800000)), f64_bits(d)

    b, back, one, db = f(F32(-1.5), -1.5)
    assert b == np.float32(-1.5).view(np.int32) and back == F32(-1.5) and one == F32(1.0)
    assert db == np.float64(-1.5).view(np.int64)


PY_SCRIPT = """
import json, sys, warnings
import numpy as np
warnings.simplefilter("ignore")
from popjit.kernels import math as km
assert type(km.exp).__name__ == "function", type(km.exp)
xs = json.loads(sys.argv[1])
out = {}
for name, vals in xs.items():
    f = getattr(km, name)
    out[name] = [float(f(np.float32(v))) for v in vals]
out["erf64"] = float(km.erf64(np.float64(1.0)))
print(json.dumps(out))
"""


def test_disable_numba_runs_plain_python() -> None:
    """With POPJIT_DISABLE_NUMBA=1 every function is plain Python on NumPy scalars, same accuracy."""
    rng = np.random.default_rng(7)
    samples = np.concatenate([rng.standard_normal(24) * 3, rng.standard_normal(8) * 40,
                              [0.0, -0.0, 1e-40, 88.5, -100.0, 0.75, np.inf, -np.inf, np.nan]]).astype(np.float32)
    names = [*CASES, *GELU]
    inputs = {n: [float(v) for v in samples] for n in names}
    env = {**os.environ, "POPJIT_DISABLE_NUMBA": "1"}
    res = subprocess.run([sys.executable, "-c", PY_SCRIPT, json.dumps(inputs)], env=env, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout.strip().splitlines()[-1])
    assert got["erf64"] == pytest.approx(0.8427007929497149, rel=1e-15)
    for name in names:
        y = np.array(got[name], np.float32)
        with np.errstate(all="ignore"):
            if name in GELU:
                ref, bound = GELU[name]
                r = ref(samples.astype(np.float64))
                ok = np.isfinite(r) | np.isfinite(samples)
                err = ulp_errors(y[ok], r[ok], scale=np.spacing(np.abs(samples[ok] / 2)).astype(np.float64))
            else:
                ref, _, bound = CASES[name]
                err = ulp_errors(y, ref(samples.astype(np.float64)))
        assert err.max() <= bound, f"{name} (Python): {err.max():.3f} ulp at {samples[np.argmax(err)]!r}"


def test_coefficients_regenerate() -> None:
    """The fitter reproduces the coefficients in math.py (the cheap fits; all: ``python -m popjit.kernels._fit``)."""
    for form in _fit.FORMS:
        if form.name in ("SIN", "COS", "EXPM1"):
            coef, _ = _fit.fit(form)
            assert np.array_equal(coef, np.array(getattr(km, "_" + form.name), np.float32)), form.name


@pytest.mark.slow
def test_rational_tanh_regenerates() -> None:
    """The rational fit (Loeb's iteration, 72 linear programs) reproduces tanh's P and Q, and their
    quotient is within 0.2 float32 ulps of tanh in float64 (the rest of its 5 ulps is float32 rounding)."""
    (form,) = _fit.RATIONAL_FORMS
    p, q, err = _fit.fit_rational(form)
    assert np.array_equal(p, np.array(km._TANH_P, np.float32))
    assert np.array_equal(q, np.array(km._TANH_Q, np.float32))
    assert err < 0.2 * 2.0**-24


# ---- throughput (printed, never asserted) ----------------------------------------------------


@numba.njit(**OPTIONS)
def _chain_km(x, out, a, b):
    for i in range(x.shape[0]):
        v = x[i]
        out[i] = km.tanh(a * v + b) * km.sigmoid(v) - np.float32(0.5) * v


@numba.njit(**OPTIONS)
def _chain_libm(x, out, a, b):
    for i in range(x.shape[0]):
        v = x[i]
        out[i] = np.tanh(a * v + b) * (np.float32(1.0) / (np.float32(1.0) + np.exp(-v))) - np.float32(0.5) * v


def chain_throughput(repeats: int = 5) -> dict[str, float]:
    """GB/s (bytes read + written) of ``tanh(a*x+b)*sigmoid(x) - 0.5*x`` over 2^22 float32, one thread."""
    x = np.random.default_rng(0).standard_normal(1 << 22).astype(np.float32)
    out = np.empty_like(x)
    a, b = F32(0.7), F32(0.1)
    result = {}
    for label, fn in (("libm (np.tanh/np.exp)", _chain_libm), ("popjit.kernels.math", _chain_km)):
        fn(x, out, a, b)
        best = min(_timed(fn, x, out, a, b) for _ in range(repeats))
        result[label] = 2 * x.nbytes / best / 1e9
    return result


def _timed(fn: Callable, *args: object) -> float:
    t = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t


def test_print_chain_throughput(capsys: pytest.CaptureFixture[str]) -> None:
    rates = chain_throughput(repeats=3)
    with capsys.disabled():
        print("\n  tanh(a*x+b)*sigmoid(x)-0.5*x, 2^22 float32, 1 thread: "
              + ", ".join(f"{k} {v:.2f} GB/s" for k, v in rates.items()))
    assert all(v > 0 for v in rates.values())


if __name__ == "__main__":
    for n in sorted(CASES):
        w, at = measure(n)
        print(f"{n:10s} max {w:6.3f} ulp at {at!r}")
    for n in sorted(GELU):
        w, at = measure_gelu(n)
        print(f"{n:10s} max {w:6.3f} (ulp + ulp(x/2)) at {at!r}")
    for k, v in chain_throughput().items():
        print(f"chain {k}: {v:.2f} GB/s")
