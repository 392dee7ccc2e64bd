"""popjit's own gemm (packed panels, an LLVM IR micro-kernel): equal to NumPy's float64 product for
every shape, transpose, scale and batch, over any split of its row panels or column panels; chosen by measurement
once per machine, or by ``POPJIT_MATMUL``; programs give the same results either way."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import popjit.tensorflow as tf
from popjit import config
from popjit.codegen.engine import render_engine
from popjit.kernels import blas, gemm_choice
from popjit.kernels.gemm import (
    KC_MAX,
    MC,
    MR,
    NR32,
    NR64,
    gemm,
    gemm_columns,
    gemm_columns_packed_a,
    gemm_depth,
    gemm_packed_b,
    pack_a_panels,
    pack_b_panels,
    slice_depth,
    sum_depth,
)
from popjit.kernels.gemm_choice import (
    DEPTH_CHUNKS_MAX,
    DepthSplit,
    OwnSplit,
    depth_slices,
    grain,
    own_calls,
    own_split,
    panels,
    uses_own_gemm,
)
from popjit.pipeline import lower_graph, optimize_graph


def operands(rng, dtype, batch, m, n, k, ta, tb):
    a = rng.uniform(-1, 1, (batch, k, m) if ta else (batch, m, k)).astype(dtype)
    b = rng.uniform(-1, 1, (batch, n, k) if tb else (batch, k, n)).astype(dtype)
    return a, b


def reference(a, b, ta, tb, alpha, beta, out):
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    product = (a64.transpose(0, 2, 1) if ta else a64) @ (b64.transpose(0, 2, 1) if tb else b64)
    return alpha * product + (beta * out.astype(np.float64) if beta else 0.0)


def run_gemm(out, a, b, batch, m, n, k, ta, tb, alpha, beta, cuts, kernel=gemm):
    for lo, hi in itertools.pairwise(cuts):
        kernel(out.reshape(-1), a.reshape(-1), b.reshape(-1), batch, m, n, k, ta, tb, m * k, k * n, alpha, beta,
               lo, hi)


def edges(nr: int) -> st.SearchStrategy[int]:
    """Sizes around the blocking's edges: tiny, one under/over a panel, a block or a k slice, a last panel
    of each vector count (``nr + 20``: two of four vectors on AVX-512), and odd."""
    return st.sampled_from([1, 2, MR - 1, MR, MR + 1, nr - 1, nr, nr + 1, nr + 20, 2 * nr + 3, MC + 5, 257, KC_MAX,
                            KC_MAX + 1, 2 * KC_MAX + 5])


@given(dtype=st.sampled_from([np.float32, np.float64]), batch=st.integers(1, 3), data=st.data(),
       ta=st.booleans(), tb=st.booleans(), alpha=st.sampled_from([1.0, -0.5, 2.0]),
       beta=st.sampled_from([0.0, 1.0, 0.25]), by_columns=st.booleans())
def test__gemm__equals_the_float64_product_for_any_shape_transpose_scale_and_split(dtype, batch, data, ta, tb, alpha,
                                                                                     beta, by_columns):
    nr = NR32 if dtype == np.float32 else NR64
    m, n, k = (data.draw(edges(nr)) for _ in range(3))
    rng = np.random.default_rng(m * 10007 + n * 101 + k)
    a, b = operands(rng, dtype, batch, m, n, k, ta, tb)
    out = rng.uniform(-1, 1, (batch, m, n)).astype(dtype)
    want = reference(a, b, ta, tb, alpha, beta, out)
    units = batch * -(-n // nr) if by_columns else panels(batch, m)
    inner = sorted(data.draw(st.lists(st.integers(0, units), max_size=3)))
    run_gemm(out, a, b, batch, m, n, k, ta, tb, alpha, beta, [0, *inner, units], gemm_columns if by_columns else gemm)
    tol = 2e-6 * k if dtype == np.float32 else 1e-13 * k
    np.testing.assert_allclose(out, want, rtol=tol, atol=tol)


def test__gemm__with_beta_zero_never_reads_the_output():
    rng = np.random.default_rng(0)
    m, n, k = 13, 37, KC_MAX + 16  # edge blocks in both directions, two k slices
    a, b = operands(rng, np.float32, 1, m, n, k, False, False)
    out = np.full((1, m, n), np.nan, np.float32)
    run_gemm(out, a, b, 1, m, n, k, False, False, 1.0, 0.0, [0, panels(1, m)])
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out, reference(a, b, False, False, 1.0, 0.0, out), rtol=1e-5, atol=1e-5)


def test__gemm__a_range_writes_only_its_rows():
    rng = np.random.default_rng(1)
    batch, m, n, k = 2, 20, 9, 11
    a, b = operands(rng, np.float32, batch, m, n, k, False, True)
    out = np.zeros((batch, m, n), np.float32)
    per_matrix = panels(1, m)  # 4 panels of 6 rows: 6, 6, 6, 2
    run_gemm(out, a, b, batch, m, n, k, False, True, 1.0, 0.0, [per_matrix + 1, per_matrix + 3])
    want = reference(a, b, False, True, 1.0, 0.0, out)
    written = np.zeros((batch, m, n), bool)
    written[1, MR:3 * MR] = True
    np.testing.assert_allclose(out[written], want[written], rtol=1e-5, atol=1e-5)
    assert not out[~written].any(), "rows outside the range stay untouched"


def test__a_column_range__writes_only_its_columns_with_the_bits_of_a_row_split():
    rng = np.random.default_rng(3)
    batch, m, n, k = 2, 9, 2 * NR32 + 5, KC_MAX + 7
    a, b = operands(rng, np.float32, batch, m, n, k, True, False)
    by_rows = np.zeros((batch, m, n), np.float32)
    run_gemm(by_rows, a, b, batch, m, n, k, True, False, 1.0, 0.0, [0, panels(batch, m)])
    out = np.zeros((batch, m, n), np.float32)
    per_matrix = 3  # column panels of NR, NR and 5
    run_gemm(out, a, b, batch, m, n, k, True, False, 1.0, 0.0, [per_matrix - 1, per_matrix + 2], gemm_columns)
    written = np.zeros((batch, m, n), bool)
    written[0, :, 2 * NR32:] = written[1, :, :2 * NR32] = True
    np.testing.assert_array_equal(out[written], by_rows[written])
    assert not out[~written].any(), "columns outside the range stay untouched"


def test__the_split__cuts_across_the_longer_side_of_the_product():
    assert own_split(4, 2, 300, 100, 50)[:3] == ("gemm_packed_b", panels(2, 300), grain(100, 50))
    name, units, per_task, *_ = own_split(4, 2, 100, 300, 50)
    assert (name, units) == ("gemm_columns_packed_a", 2 * -(-300 // NR32))
    assert per_task * NR32 * 100 * 50 >= gemm_choice.SERIAL_GEMM_MACS > (per_task - 1) * NR32 * 100 * 50


def test__a_product_of_several_tasks__packs_the_operand_they_share_once_first():
    single = own_split(4, 1, 300, 100, 50)
    assert single.units <= single.per_task and single.packs == "pack_b_panels", "one task: the same drivers"
    wide = own_split(4, 1, 256, 1024, 784)  # W2's first layer: cut into column panels, all read A
    assert wide[:4] == ("gemm_columns_packed_a", 1024 // NR32, 1, "pack_a_panels")
    assert (wide.pack_units, wide.space) == (panels(1, 256), panels(1, 256) * MR * 784)
    tall = own_split(8, 3, 1024, 100, 512)  # cut into row panels, all read B
    assert tall[:4] == ("gemm_packed_b", panels(3, 1024), grain(100, 512), "pack_b_panels")
    assert (tall.pack_units, tall.space) == (3 * -(-100 // NR64), 3 * -(-100 // NR64) * NR64 * 512)
    for plan, panel in ((wide, MR * 784), (tall, NR64 * 512)):  # elements a panel
        assert plan.pack_per_task * panel >= gemm_choice.PACKED_PER_TASK > (plan.pack_per_task - 1) * panel
    calls = own_calls(wide, ["o", "a", "b", 1, 256, 1024, 784, "ta", "tb", "abs", "bbs", "al", "be"], "s")
    assert [(name, args[:3]) for name, args, _ in calls] == [("pack_a_panels", ["s", "a", 1]),
                                                               ("gemm_columns_packed_a", ["o", "s", "b"])]


@given(dtype=st.sampled_from([np.float32, np.float64]), batch=st.integers(1, 3), data=st.data(),
       ta=st.booleans(), tb=st.booleans(), beta=st.sampled_from([0.0, 0.25]), packs_a=st.booleans())
def test__an_operand_packed_once__gives_the_bits_of_each_task_packing_it(dtype, batch, data, ta, tb, beta, packs_a):
    nr = NR32 if dtype == np.float32 else NR64
    m, n, k = (data.draw(edges(nr)) for _ in range(3))
    rng = np.random.default_rng(m * 10007 + n * 101 + k)
    a, b = operands(rng, dtype, batch, m, n, k, ta, tb)
    out = rng.uniform(-1, 1, (batch, m, n)).astype(dtype)
    want = out.copy()
    run_gemm(want, a, b, batch, m, n, k, ta, tb, -0.5, beta, [0, panels(batch, m)])
    row_panels, column_panels = panels(batch, m), batch * -(-n // nr)
    if packs_a:
        space = np.full(row_panels * MR * k, np.nan, dtype)
        packing = (pack_a_panels, (space, a.reshape(-1), batch, m, k, ta, m * k), row_panels)
        product = (gemm_columns_packed_a, (out.reshape(-1), space, b.reshape(-1), batch, m, n, k, tb, k * n),
                   column_panels)
    else:
        space = np.full(column_panels * nr * k, np.nan, dtype)
        packing = (pack_b_panels, (space, b.reshape(-1), batch, n, k, tb, k * n), column_panels)
        product = (gemm_packed_b, (out.reshape(-1), a.reshape(-1), space, batch, m, n, k, ta, m * k), row_panels)
    for kernel, args, units in (packing, product):
        extra = (-0.5, beta) if kernel is product[0] else ()
        for lo, hi in itertools.pairwise([0, *sorted(data.draw(st.lists(st.integers(0, units), max_size=3))), units]):
            kernel(*args, *extra, lo, hi)
    np.testing.assert_array_equal(out, want)


def packed_reference(operand: np.ndarray, width: int) -> np.ndarray:
    """The layout :func:`pack_a_panels`/:func:`pack_b_panels` write, built with NumPy: each matrix of
    ``operand`` (``[batch, lines, k]``: rows of ``A`` or columns of ``B``) cut into slices of the depth, each
    slice's panels of ``width`` lines side by side, a panel ``[slice depth, width]``, zeros past the last line."""
    batch, lines, k = operand.shape
    padded = -(-lines // width) * width
    whole = np.zeros((batch, padded, k), operand.dtype)
    whole[:, :lines] = operand
    depth = slice_depth(k)
    parts = [whole[i, :, p0:p0 + depth].reshape(padded // width, width, -1).transpose(0, 2, 1).ravel()
             for i in range(batch) for p0 in range(0, k, depth)]
    return np.concatenate(parts)


@given(dtype=st.sampled_from([np.float32, np.float64]), batch=st.integers(1, 2), data=st.data(),
       transposed=st.booleans(), packs_a=st.booleans())
def test__packing__lays_out_each_panel_of_either_operand_as_numpy_would(dtype, batch, data, transposed, packs_a):
    """Every layout the packers take: ``A``'s 6-row panels (a transposed ``A``: a masked copy a step) and
    ``B``'s panels (a transposed ``B``: vectors transposed in registers), the last panel of each padded."""
    width = MR if packs_a else (NR32 if dtype == np.float32 else NR64)
    lines, k = data.draw(edges(width)), data.draw(edges(width))
    rng = np.random.default_rng(lines * 1009 + k)
    lines_first = transposed != packs_a  # A is stored [lines, k] unless transposed, B [k, lines] unless transposed
    stored = rng.uniform(-1, 1, (batch, lines, k) if lines_first else (batch, k, lines)).astype(dtype)
    lines_by_depth = stored if lines_first else stored.transpose(0, 2, 1)
    units = batch * -(-lines // width)
    space = np.full(units * width * k, np.nan, dtype)
    packer = pack_a_panels if packs_a else pack_b_panels
    for lo, hi in itertools.pairwise([0, *sorted(data.draw(st.lists(st.integers(0, units), max_size=2))), units]):
        packer(space, stored.reshape(-1), batch, lines, k, transposed, lines * k, lo, hi)
    np.testing.assert_array_equal(space, packed_reference(lines_by_depth, width))


def test__the_split__gives_each_task_enough_work():
    assert panels(3, 13) == 3 * 3
    assert grain(1024, 1024) == 1  # one panel is 6M multiply-adds: worth a task of its own
    assert grain(10, 10) * MR * 10 * 10 >= gemm_choice.SERIAL_GEMM_MACS > (grain(10, 10) - 1) * MR * 10 * 10


# --- which matmuls run where ------------------------------------------------------------------


def dense_program(x, w):
    return tf.matmul(x, w)


def matmul_callees(m: int, n: int, k: int) -> list[str]:
    x, w = np.ones((m, k), np.float32), np.ones((k, n), np.float32)
    graph = optimize_graph(tf.function(dense_program).get_concrete_function(x, w).graph)
    return [c.name for c in render_engine(lower_graph(graph)).callees]


def test__popjit_matmul_setting__chooses_the_kernel_without_measuring(tmp_path, monkeypatch):
    monkeypatch.setenv("POPJIT_CACHE_DIR", str(tmp_path))
    assert config.get("MATMUL") == "rules", "reproducible by default: no measuring"
    assert "matmul_split" in matmul_callees(1100, 50, 100), "narrow: the system BLAS, split over popjit's threads"
    assert "matmul_f32" in matmul_callees(30, 20, 10), "small: one serial BLAS call"
    with config.context(MATMUL="blas"):
        short = matmul_callees(300, 200, 100)  # 6M multiply-adds, 300 rows
    if blas.POOL_SPINS:
        assert "matmul_split" in short, "short, beside a spinning pool: split over it too"
    else:
        assert "matmul_f32" in short, "short, beside a sleeping pool: one call on OpenBLAS's threads"
    own = {"pack_b_panels", "gemm_packed_b"} <= set(matmul_callees(300, 200, 100))
    assert own is (gemm_choice.panel_vectors() == 4), "by the rules: the own gemm where it was measured faster"
    with config.context(MATMUL="popjit"):
        assert {"pack_b_panels", "gemm_packed_b"} <= set(matmul_callees(30, 20, 10))
        assert {"pack_b_panels", "gemm_packed_b"} <= set(matmul_callees(300, 200, 100)), "split: B packed once first"
    with config.context(MATMUL="blas"):
        assert "matmul_split" in matmul_callees(1100, 50, 100)
    assert not list(tmp_path.rglob("gemm-choice-*.json")), "nothing was measured"


def test__a_bad_popjit_matmul_value__names_the_choices(monkeypatch):
    monkeypatch.setenv("POPJIT_MATMUL", "mkl")
    with pytest.raises(ValueError, match="rules, auto, popjit or blas"):
        config.get("MATMUL")


@pytest.mark.parametrize(("shape", "own"), [
    ((1, 256, 1024, 784), True),  # W2's layers
    ((1, 1024, 1024, 1024), True),
    ((1, 3872, 288, 64), True),  # the Keras CNN's second convolution's input gradient
    ((1, 288, 64, 3872), True),  # ... and its filter gradient, cut across its depth (4x its longer side)
    ((1, 9, 32, 21632), False),  # its first convolution's: 9 rows
    ((1, 256, 10, 1024), False),  # a layer of 10 logits
    ((1, 32, 256, 784), False),  # an MLP's 32-row batch
    ((1, 1024, 1024, 10), False),  # a depth of 10
])
def test__the_rules__give_the_own_gemm_the_products_it_was_measured_faster_on(shape, own, monkeypatch):
    monkeypatch.setattr(gemm_choice, "panel_vectors", lambda: 4)
    assert gemm_choice.own_gemm_wins(*shape) is own
    with config.context(MATMUL="rules"):
        assert uses_own_gemm(np.dtype(np.float32), *shape, False, False) is own
    monkeypatch.setattr(gemm_choice, "panel_vectors", lambda: 2)
    assert not gemm_choice.own_gemm_wins(*shape), "AVX2 and NEON hosts: the system BLAS, faster there"


def test__auto__measures_once_per_machine_and_keeps_the_choice_on_disk(tmp_path, monkeypatch):
    monkeypatch.setenv("POPJIT_CACHE_DIR", str(tmp_path))
    gemm_choice._loaded.cache_clear()
    monkeypatch.setenv("POPJIT_MATMUL", "auto")
    shape = (np.dtype(np.float32), 1, 300, 200, 100, False, True)
    first = uses_own_gemm(*shape)
    path = gemm_choice.choice_path()
    assert path is not None and path.parent.parent == tmp_path
    table = json.loads(path.read_text())
    assert table == {"float32 1x300x200x100 NT": first}
    path.write_text(json.dumps({"float32 1x300x200x100 NT": not first}))  # as if another machine state
    gemm_choice._loaded.cache_clear()
    assert uses_own_gemm(*shape) is (not first), "the kept choice is used, not measured again"
    assert uses_own_gemm(np.dtype(np.float32), 1, 8, 8, 8, False, False) is False, "tiny: BLAS, unmeasured"
    assert json.loads(path.read_text()) == {"float32 1x300x200x100 NT": not first}
    gemm_choice._loaded.cache_clear()


#: Measures one product's kernels in a fresh process (``POPJIT_MATMUL=auto``), shapes from the command line.
MEASURE = """
import sys
import numpy as np
from popjit.kernels.gemm_choice import uses_own_gemm
m, n, k = map(int, sys.argv[1:])
print(uses_own_gemm(np.dtype(np.float32), 1, m, n, k, False, False))
"""


@pytest.mark.slow
def test__auto__measures_in_a_process_that_loads_the_kernels_from_the_cache(tmp_path) -> None:
    """The BLAS codelet calls Numba's parallel runtime by symbol. Loaded from Numba's cache (no typing, which
    starts the runtime), it crashed the measurement of a new shape before any engine had started it."""
    env = {**os.environ, "POPJIT_MATMUL": "auto", "POPJIT_CACHE_DIR": str(tmp_path / "cache"),
           "NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    for shape in ("300", "200", "100"), ("301", "200", "100"):
        run = subprocess.run([sys.executable, "-c", MEASURE, *shape], capture_output=True, text=True, env=env,
                             timeout=600)
        assert run.returncode == 0, run.stderr[-3000:]
        assert run.stdout.split() in (["True"], ["False"])


def test__integer_and_half_matmuls__never_use_the_float_gemm():
    with config.context(MATMUL="popjit"):
        assert not uses_own_gemm(np.dtype(np.int32), 1, 300, 200, 100, False, False)
        assert not uses_own_gemm(np.dtype(np.uint16), 1, 300, 200, 100, False, False)
        assert uses_own_gemm(np.dtype(np.float64), 1, 300, 200, 100, False, False)


def training_step(x, w1, w2):
    with tf.GradientTape() as tape:
        tape.watch([w1, w2])
        h = tf.nn.relu(tf.matmul(x, w1))
        loss = tf.reduce_sum(tf.matmul(h, w2, transpose_b=True) ** 2)
    return [loss, *tape.gradient(loss, [w1, w2])]


def test__a_training_step__gives_the_same_numbers_on_either_kernel():
    rng = np.random.default_rng(2)
    x = rng.uniform(-1, 1, (70, 130)).astype(np.float32)
    w1 = rng.uniform(-0.2, 0.2, (130, 90)).astype(np.float32)
    w2 = rng.uniform(-0.2, 0.2, (40, 90)).astype(np.float32)
    results = {}
    for kernel in ("popjit", "blas"):
        with config.context(MATMUL=kernel):
            step = tf.function(training_step, jit_compile=True)
            results[kernel] = [r.numpy() for r in step(x, w1, w2)]
            program = step.get_concrete_function(x, w1, w2).executable("/device:CPU:0")
            callees = [c.name for c in program.engine_source.callees]
            assert ("gemm_packed_b" in callees) == (kernel == "popjit")
            assert ("matmul_f32" in callees) == (kernel == "blas")
    for own, system in zip(results["popjit"], results["blas"]):
        np.testing.assert_allclose(own, system, rtol=1e-5, atol=1e-5)
    h = np.maximum(x.astype(np.float64) @ w1, 0)
    np.testing.assert_allclose(results["popjit"][0], ((h @ w2.T) ** 2).sum(), rtol=1e-5)


def product(x, w):
    return tf.matmul(x, w)


def run_depth(out, a, b, batch, m, n, k, ta, tb, alpha, beta, chunks, cuts, sum_cuts):
    """A product cut across its depth: ``gemm_depth`` over the ranges of chunks ``cuts``, then ``sum_depth``
    over the ranges of rows ``sum_cuts``; the partial sums start as NaN (each must be written before read)."""
    parts = np.full(batch * chunks * m * n, np.nan, out.dtype)
    for lo, hi in itertools.pairwise(cuts):
        gemm_depth(parts, a.reshape(-1), b.reshape(-1), batch, m, n, k, ta, tb, m * k, k * n, alpha, chunks, lo, hi)
    for lo, hi in itertools.pairwise(sum_cuts):
        sum_depth(out.reshape(-1), parts, batch, m, n, chunks, beta, lo, hi)


@given(dtype=st.sampled_from([np.float32, np.float64]), batch=st.integers(1, 3), data=st.data(),
       ta=st.booleans(), tb=st.booleans(), alpha=st.sampled_from([1.0, -0.5]), beta=st.sampled_from([0.0, 0.25]))
def test__a_depth_split__equals_the_float64_product_with_the_same_bits_whatever_the_tasks(dtype, batch, data, ta, tb,
                                                                                           alpha, beta):
    nr = NR32 if dtype == np.float32 else NR64
    m, n = data.draw(edges(nr)), data.draw(edges(nr))
    k = data.draw(st.sampled_from([KC_MAX + 1, 2 * KC_MAX + 5, 5 * KC_MAX + 3]))
    chunks = data.draw(st.integers(1, depth_slices(k)))
    rng = np.random.default_rng(m * 10007 + n * 101 + k)
    a, b = operands(rng, dtype, batch, m, n, k, ta, tb)
    start = rng.uniform(-1, 1, (batch, m, n)).astype(dtype) if beta else np.full((batch, m, n), np.nan, dtype)
    want = reference(a, b, ta, tb, alpha, beta, start)
    whole = start.copy()
    run_depth(whole, a, b, batch, m, n, k, ta, tb, alpha, beta, chunks, [0, batch * chunks], [0, batch * m])
    tol = 2e-6 * k if dtype == np.float32 else 1e-13 * k
    np.testing.assert_allclose(whole, want, rtol=tol, atol=tol)  # beta 0: the NaNs were never read
    cut = start.copy()
    inner = sorted(data.draw(st.lists(st.integers(0, batch * chunks), max_size=3)))
    rows = sorted(data.draw(st.lists(st.integers(0, batch * m), max_size=3)))
    cuts, sum_cuts = [0, *inner, batch * chunks], [0, *rows, batch * m]
    run_depth(cut, a, b, batch, m, n, k, ta, tb, alpha, beta, chunks, cuts, sum_cuts)
    np.testing.assert_array_equal(cut, whole)


def test__a_depth_split_of_one_chunk__gives_the_bits_of_gemm():
    """A chunk sums its slices as gemm sums a product's: one gemm_block call per slice, in order."""
    rng = np.random.default_rng(5)
    m, n, k = 40, 70, 3 * KC_MAX + 11
    a, b = operands(rng, np.float32, 1, m, n, k, True, False)
    by_gemm, by_depth = np.zeros((1, m, n), np.float32), np.zeros((1, m, n), np.float32)
    run_gemm(by_gemm, a, b, 1, m, n, k, True, False, 0.5, 0.0, [0, panels(1, m)])
    run_depth(by_depth, a, b, 1, m, n, k, True, False, 0.5, 0.0, 1, [0, 1], [0, m])
    np.testing.assert_array_equal(by_depth, by_gemm)


def test__a_product_deeper_than_four_times_its_longer_side__is_cut_across_its_depth():
    plan = own_split(4, 1, 288, 64, 3872)  # the Keras CNN's filter gradient: 3872 / (4 * 288), 4 chunks
    assert plan == DepthSplit(4, 4, 288, plan.sum_per_task, 4 * 288 * 64)
    assert plan.sum_per_task * 64 * 4 >= gemm_choice.PACKED_PER_TASK > (plan.sum_per_task - 1) * 64 * 4
    assert own_split(4, 2, 576, 128, 6272)[:2] == (4, 8), "2.7 deep: a multiple of four chunks, for each product"
    assert own_split(8, 1, 64, 64, 8192).chunks == DEPTH_CHUNKS_MAX, "at most 16 (the partial sums' space)"
    assert own_split(4, 1, 288, 64, 4 * 288).units == panels(1, 288), "4x exactly: cut by rows"
    assert isinstance(own_split(4, 1, 64, 64, 300), OwnSplit), "one slice deep: nothing to cut"
    calls = own_calls(plan, ["o", "a", "b", 1, 288, 64, 3872, "ta", "tb", "abs", "bbs", "al", "be"], "s", str)
    assert calls == [("gemm_depth", ["s", "a", "b", 1, 288, 64, 3872, "ta", "tb", "abs", "bbs", "al", "4"], (4, 1)),
                     ("sum_depth", ["o", "s", 1, 288, 64, "4", "be"], (288, plan.sum_per_task))]


def filter_gradient(patches, dy):
    return tf.matmul(patches, dy, transpose_a=True)


def on_own_gemm(fn, *args: np.ndarray) -> tuple[np.ndarray, Any]:
    """``fn(*args)`` compiled with every product on the own gemm: its result and its engine's source."""
    with config.context(MATMUL="popjit"):
        step = tf.function(fn, jit_compile=True)
        return step(*args).numpy(), step.get_concrete_function(*args).executable("/device:CPU:0").engine_source


def test__a_deep_product_in_a_program__sums_its_chunks_in_the_engines_scratch():
    rng = np.random.default_rng(6)
    k, m, n = 3000, 70, 64  # 3000 / (4 * 70): 11 deep, 12 chunks; 8 slices of 375: 8 chunks
    patches, dy = rng.uniform(-1, 1, (k, m)).astype(np.float32), rng.uniform(-1, 1, (k, n)).astype(np.float32)
    got, source = on_own_gemm(filter_gradient, patches, dy)
    assert {"gemm_depth", "sum_depth"} <= {c.name for c in source.callees}
    assert [(b.shape, b.dtype) for b in source.scratch] == [((8 * m * n,), tf.float32)]
    want = np.zeros((1, m, n), np.float32)
    run_depth(want, patches[None], dy[None], 1, m, n, k, True, False, 1.0, 0.0, 8, [0, 8], [0, m])
    np.testing.assert_array_equal(got, want[0])
    np.testing.assert_allclose(got, patches.T.astype(np.float64) @ dy, rtol=1e-4, atol=1e-4)


def test__a_split_product_in_a_program__packs_into_the_engines_scratch_with_the_bits_of_one_task():
    rng = np.random.default_rng(4)
    m, n, k = 64, 2048, 256  # 32 column panels, a task at least 4: several tasks, all reading A
    x, w = rng.uniform(-1, 1, (m, k)).astype(np.float32), rng.uniform(-1, 1, (k, n)).astype(np.float32)
    got, source = on_own_gemm(product, x, w)
    assert {"pack_a_panels", "gemm_columns_packed_a"} <= {c.name for c in source.callees}
    assert [(b.shape, b.dtype) for b in source.scratch] == [((panels(1, m) * MR * k,), tf.float32)]
    assert source.arguments[-1] is source.scratch[-1], "the engine's own buffers follow the program's"
    want = np.zeros((1, m, n), np.float32)
    run_gemm(want, x[None], w[None], 1, m, n, k, False, False, 1.0, 0.0, [0, panels(1, m)])
    np.testing.assert_array_equal(got, want[0])
