"""Mid-sized float matmuls on the system BLAS split over popjit's threads (:mod:`popjit.kernels.blas_split`):
any cut of the units into ranges computes NumPy's product, each task is large enough, the thread's
BLAS thread count is restored, only products between ``SERIAL_GEMM_MACS`` and ``BLAS_THREADS_MACS``
are split (with a pool that spins when idle: every product from ``SPLIT_SPINNING_MACS``), and a
compiled program uses the split kernel for such a product (and gives NumPy's numbers, gradients
included) and OpenBLAS's own call for a larger one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import popjit.tensorflow as tf
from popjit.codegen.engine import Invoke, render_engine
from popjit.codegen.numerics import DEFAULT, Numerics
from popjit.kernels import blas
from popjit.kernels.blas_split import (
    BLOCK,
    FEW_CHUNKS_MACS,
    FEW_CHUNKS_PER_THREAD,
    SPLIT_MIN_DEPTH,
    SPLIT_MIN_ROWS,
    SPLIT_SPINNING_MACS,
    blas_split,
    chunks_per_thread,
    splits_by_rows,
)
from popjit.kernels.jit import single_threaded
from popjit.kernels.threads import threads_to_use
from popjit.pipeline.compiler import lower_graph, optimize_graph
from tests.helpers import thread_local_count

pytestmark = pytest.mark.skipif(not blas.HAVE_CBLAS, reason="NumPy's OpenBLAS is not available")


@pytest.fixture(autouse=True)
def system_blas(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every product on the system BLAS: the default rules give some to popjit's own gemm on AVX-512 hosts."""
    monkeypatch.setenv("POPJIT_MATMUL", "blas")


def units(batch: int, m: int, n: int) -> int:
    """How many units :func:`matmul_split` cuts a product into (as :func:`blas_split` counts them)."""
    return batch * -(-(m if splits_by_rows(m, n) else n) // BLOCK)


@st.composite
def products(draw: st.DrawFn) -> dict:
    """A batched product with transposes, broadcast operands, alpha/beta and a random cut of its units."""
    batch, m, n = draw(st.integers(1, 3)), draw(st.integers(1, 60)), draw(st.integers(1, 60))
    k = draw(st.integers(1, 40))
    total = units(batch, m, n)
    cuts = sorted(draw(st.lists(st.integers(0, total), max_size=4)))
    return {"batch": batch, "m": m, "n": n, "k": k, "ta": draw(st.booleans()), "tb": draw(st.booleans()),
            "share_a": draw(st.booleans()), "share_b": draw(st.booleans()),
            "alpha": draw(st.sampled_from([1.0, 0.5, -2.0])), "beta": draw(st.sampled_from([0.0, 1.0, 0.25])),
            "dtype": draw(st.sampled_from([np.float32, np.float64])), "ranges": list(zip([0, *cuts], [*cuts, total]))}


@settings(max_examples=60, deadline=None)
@given(products())
def test__any_cut_of_the_units__computes_numpys_product(p: dict) -> None:
    from popjit.kernels.blas_split import matmul_split

    rng = np.random.default_rng(p["m"] * 131 + p["n"] * 7 + p["k"])
    batch, m, n, k, dtype = p["batch"], p["m"], p["n"], p["k"], p["dtype"]
    a = rng.uniform(-1, 1, (1 if p["share_a"] else batch, *((k, m) if p["ta"] else (m, k)))).astype(dtype)
    b = rng.uniform(-1, 1, (1 if p["share_b"] else batch, *((n, k) if p["tb"] else (k, n)))).astype(dtype)
    out = rng.uniform(-1, 1, (batch, m, n)).astype(dtype)
    op_a = np.swapaxes(a, -1, -2) if p["ta"] else a
    op_b = np.swapaxes(b, -1, -2) if p["tb"] else b
    want = p["alpha"] * (op_a.astype(np.float64) @ op_b) + p["beta"] * out
    flat = out.reshape(-1)
    before = thread_local_count(2)
    try:
        for lo, hi in p["ranges"]:
            matmul_split(flat, a.reshape(-1), b.reshape(-1), batch, m, n, k, p["ta"], p["tb"],
                         0 if p["share_a"] else m * k, 0 if p["share_b"] else k * n, p["alpha"], p["beta"], lo, hi)
        assert thread_local_count(2) == 2, "the split gemm left this thread's BLAS thread count changed"
    finally:
        thread_local_count(before)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(out, want, rtol=tol, atol=tol * k)


@given(st.integers(1, 4), st.integers(1, 3000), st.integers(1, 3000), st.integers(1, 3000))
def test__a_split__covers_the_product_in_tasks_of_serial_size(batch: int, m: int, n: int, k: int) -> None:
    split = blas_split(batch, m, n, k, spins=False)
    if batch * m * n * k < blas.SERIAL_GEMM_MACS:
        assert split is None, "small products stay one serial call"
        return
    if batch * m * n * k >= blas.BLAS_THREADS_MACS or (m < SPLIT_MIN_ROWS and k < SPLIT_MIN_DEPTH):
        assert split is None, "large products, and short shallow ones, run on OpenBLAS's threads"
        return
    assert split is not None
    count, grain = split
    assert count == units(batch, m, n)
    other = n if splits_by_rows(m, n) else m
    assert grain * BLOCK * other * k >= blas.SERIAL_GEMM_MACS > (grain - 1) * BLOCK * other * k


@given(st.integers(1, 4), st.integers(1, 3000), st.integers(1, 3000), st.integers(1, 3000))
@pytest.mark.parametrize("threads_from", [blas.SPINNING_BLAS_THREADS_MACS, blas.NEVER])
def test__beside_a_spinning_pool__products_from_the_threshold_split_but_the_largest(threads_from, batch, m, n,
                                                                                     k) -> None:
    split = blas_split(batch, m, n, k, spins=True, threads_from=threads_from)
    if batch * m * n * k < SPLIT_SPINNING_MACS:
        assert split is None, "small products stay one serial call"
        return
    if m * n * k >= threads_from:
        assert split is None, "products whose entries are this large run on OpenBLAS's threads"
        return
    assert split is not None, "smaller products do not run on OpenBLAS's threads beside a spinning pool"
    count, grain = split
    assert count == units(batch, m, n)
    other = n if splits_by_rows(m, n) else m
    assert grain * BLOCK * other * k >= SPLIT_SPINNING_MACS > (grain - 1) * BLOCK * other * k


def test__beside_a_sleeping_pool__a_filter_gradient_splits_and_an_mlps_weight_gradient_does_not() -> None:
    assert blas_split(1, 288, 64, 3872, spins=False) is not None, "K1's second filter gradient: 288 rows, 3,872 deep"
    assert blas_split(1, 9, 32, 21632, spins=False) is not None, "K1's first: 9 rows, 21,632 deep (cut by columns)"
    assert blas_split(1, 784, 256, 32, spins=False) is None, "W1's first weight gradient: 784 rows, 32 deep"
    assert blas_split(1, 32, 256, 784, spins=False) is None, "W1's first layer: 32 rows, 784 deep"


def dense_step(x, w):
    with tf.GradientTape() as tape:
        tape.watch(w)
        loss = tf.reduce_sum(tf.matmul(x, w) ** 2)
    return [loss, tape.gradient(loss, w)]


def test__a_compiled_large_product__runs_split_and_equals_numpy() -> None:
    rng = np.random.default_rng(3)
    x = rng.uniform(-1, 1, (1100, 130)).astype(np.float32)
    w = rng.uniform(-0.2, 0.2, (130, 40)).astype(np.float32)
    step = tf.function(dense_step, jit_compile=True)
    loss, grad = (r.numpy() for r in step(x, w))
    callees = [c.name for c in step.get_concrete_function(x, w).executable("/device:CPU:0").engine_source.callees]
    assert "matmul_split" in callees
    h = x.astype(np.float64) @ w
    np.testing.assert_allclose(loss, (h ** 2).sum(), rtol=1e-5)
    np.testing.assert_allclose(grad, 2 * x.T.astype(np.float64) @ h, rtol=1e-4, atol=1e-3)


def test__a_compiled_product_past_the_split_range__is_split_unless_openblas_threads_run_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Beside a sleeping pool a product past the split range runs on OpenBLAS's threads; beside a spinning
    one too when popjit compiles on a quiet host (``PLANNED_THREADS_FROM``), else it is split."""
    # why a cache of its own: the choice is the compiling process's, and the other test worker, started
    # on a quieter or busier host, may have compiled this program into the shared one
    monkeypatch.setenv("POPJIT_CACHE_DIR", str(tmp_path))
    side = 1 + round(blas.BLAS_THREADS_MACS ** (1 / 3))
    a = np.ones((side, side), np.float32)
    matmul = tf.function(tf.matmul, jit_compile=True)
    callees = [c.name for c in matmul.get_concrete_function(a, a).executable("/device:CPU:0").engine_source.callees]
    on_openblas_threads = side ** 3 >= blas.PLANNED_THREADS_FROM
    assert on_openblas_threads == (not blas.POOL_SPINS or blas.PLANNED_THREADS_FROM == blas.SPINNING_BLAS_THREADS_MACS)
    assert ("matmul_split" in callees) != on_openblas_threads and ("matmul_f32" in callees) == on_openblas_threads
    np.testing.assert_array_equal(matmul(a, a).numpy()[:2, :2], np.full((2, 2), side, np.float32))


def test__a_large_split_product__is_cut_into_fewer_chunks_per_thread() -> None:
    """Each chunk of a split product is a BLAS call that packs its own copy of the operand it does not
    cut: from FEW_CHUNKS_MACS on, a product is cut into FEW_CHUNKS_PER_THREAD chunks per thread, below
    into the engine's usual number (None)."""
    assert chunks_per_thread(1, 256, 256, 512) == FEW_CHUNKS_PER_THREAD == 2 and FEW_CHUNKS_MACS == 256 * 256 * 512
    assert chunks_per_thread(1, 256, 256, 511) is None and chunks_per_thread(2, 128, 256, 512) == 2
    rng = np.random.default_rng(5)
    a = rng.uniform(-1, 1, (400, 300)).astype(np.float32)
    b = rng.uniform(-1, 1, (300, 400)).astype(np.float32)
    matmul = tf.function(tf.matmul, jit_compile=True)
    src = matmul.get_concrete_function(a, b).executable("/device:CPU:0").engine_source
    splits = [n for n in src.body if isinstance(n, Invoke) and src.callees[n.slot].name == "matmul_split"]
    if blas.POOL_SPINS:  # why: beside a sleeping pool this product runs on OpenBLAS's threads, unsplit
        assert [n.chunks for n in splits] == [2] and "2 chunks per thread" in src.source
    np.testing.assert_allclose(matmul(a, b).numpy(), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


def test__a_split_product__gives_the_same_bits_on_one_thread_as_on_the_pool() -> None:
    """A BLAS call's sums round differently with its shape (OpenBLAS's edge kernels: on a Zen 3, a
    32x784x256 product cut into 16-column calls differs from one call in 2580 elements), so the engine
    cuts a split product as planned at compile time whatever threads run it: a replica's engine, on one
    thread, makes the same calls one after another and gives the same bits. (Beside a sleeping pool the
    product runs on OpenBLAS's threads instead, whose sums change with their count.)"""
    if not blas.POOL_SPINS:
        pytest.skip("beside a sleeping pool (workqueue) this product runs on OpenBLAS's threads, unsplit")
    rng = np.random.default_rng(6)
    a = rng.uniform(0, 1, (32, 784)).astype(np.float32)
    w = rng.standard_normal((784, 256)).astype(np.float32)
    matmul = tf.function(tf.matmul, jit_compile=True)
    on_the_pool = matmul(a, w).numpy()
    with single_threaded():
        on_one_thread = matmul(a, w).numpy()
    np.testing.assert_array_equal(on_one_thread, on_the_pool)
    source = matmul.get_concrete_function(a, w).executable("/device:CPU:0").engine_source.source
    assert f"cut for {threads_to_use()} threads" in source
    np.testing.assert_allclose(on_the_pool, a.astype(np.float64) @ w, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("numerics", [DEFAULT, Numerics(inv=True, oflo=True)], ids=["default", "traps"])
def test__a_split_product__is_cut_for_the_compiling_machines_threads_with_or_without_traps(numerics) -> None:
    """The planned cut holds whatever the floating-point behaviour: with traps on, the product is followed
    by its check call, and it is cut the same way."""
    a = np.ones((32, 784), np.float32)
    w = np.ones((784, 256), np.float32)
    graph = tf.function(tf.matmul).get_concrete_function(a, w).graph
    src = render_engine(lower_graph(optimize_graph(graph.copy())), numerics)
    splits = [n for n in src.body if isinstance(n, Invoke) and src.callees[n.slot].name == "matmul_split"]
    assert len(splits) == (1 if blas.POOL_SPINS else 0)
    assert all(n.planned == threads_to_use() for n in splits)


STEP_PRODUCT = textwrap.dedent("""
    import json, numba, numpy as np
    import popjit.tensorflow as tf
    from popjit.kernels import blas
    rng = np.random.default_rng(4)
    h = rng.uniform(-1, 1, (32, 128)).astype(np.float32)
    w = rng.uniform(-1, 1, (128, 512)).astype(np.float32)
    product = tf.function(tf.matmul, jit_compile=True)
    got = product(h, w).numpy()
    source = product.get_concrete_function(h, w).executable("/device:CPU:0").engine_source
    print(json.dumps({"layer": numba.threading_layer(), "spins": blas.POOL_SPINS,
                      "callees": [c.name for c in source.callees],
                      "error": float(np.abs(got - h.astype(np.float64) @ w).max())}))
""")


@pytest.mark.parametrize("layer", ["workqueue", "omp"])
def test__a_recurrent_layers_step_product__is_split_only_over_a_spinning_pool(layer: str, tmp_path) -> None:
    """An LSTM(128)'s per-step product on a batch of 32 (2M multiply-adds): one serial call beside
    workqueue's sleeping workers, split over OpenMP's spinning ones, NumPy's numbers either way."""
    env = {**os.environ, "NUMBA_THREADING_LAYER": layer, "POPJIT_CACHE_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", STEP_PRODUCT], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["layer"] == layer and result["spins"] == (layer == "omp")
    assert ("matmul_split" in result["callees"]) == (layer == "omp")
    assert ("matmul_f32" in result["callees"]) == (layer == "workqueue")
    assert result["error"] < 1e-4
