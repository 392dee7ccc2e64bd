"""Implicit products (popjit/codegen/implicit.py): a convolution's patches computed while the own gemm packs
them, never stored. Against the same program with the patches stored (``POPJIT_IMPLICIT_GEMM=0``, the own
gemm: bit for bit) and a direct NumPy convolution, over shapes, strides, dilations, paddings, groups, 1-D
and 2-D, float32 and float64; gradients against finite differences; the engine has no im2col kernel when
it is on and the same virtual-IPU schedule either way; a kernel whose input changes before a product reads
it is stored as before."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import popjit.tensorflow as tf
from popjit import config
from popjit.codegen.engine import render_engine
from popjit.codegen.implicit import DEEP_MIN_BYTES, split_domain
from popjit.ir.loop import IVar, flat_index, ivar, row_major_strides
from popjit.kernels import gemm_choice
from popjit.kernels.gemm_choice import own_gemm_wins, splits_depth
from popjit.pipeline import lower_graph, optimize_graph
from tests.ops.test_conv import GRADIENT_CASES, conv_by_loops, finite_difference


def conv_and_gradients(x: np.ndarray, w: np.ndarray, strides: int, padding: str, dilations: int) -> list[np.ndarray]:
    """``y = conv(x, w)`` and the gradients of ``sum(y * y)``, compiled (jit) on the host."""

    @tf.function(jit_compile=True)
    def f(a, b):
        with tf.GradientTape() as tape:
            tape.watch([a, b])
            y = tf.nn.convolution(a, b, strides, padding, dilations=dilations)
            loss = tf.reduce_sum(y * y)
        return [y, *tape.gradient(loss, [a, b])]

    return [np.asarray(t) for t in f(x, w)]


@st.composite
def convolutions(draw: Any) -> dict[str, Any]:
    spatial_dims = draw(st.integers(1, 2))
    groups = draw(st.sampled_from([1, 1, 2]))
    cin = groups * draw(st.integers(1, 3))
    stride, dilation = draw(st.sampled_from([(1, 1), (2, 1), (1, 2)]))
    window = [draw(st.integers(1, 3)) for _ in range(spatial_dims)]
    spatial = [draw(st.integers((k - 1) * dilation + 1, 7)) for k in window]
    cout = groups * draw(st.integers(1, 3))
    return dict(x=(draw(st.integers(1, 3)), *spatial, cin), w=(*window, cin // groups, cout),
                strides=stride, dilations=dilation, padding=draw(st.sampled_from(["SAME", "VALID"])),
                dtype=draw(st.sampled_from([np.float32, np.float64])))


# why 8: each example compiles its implicit products with Numba (about 2 s each, once per expression); 15 took
# 155 s of one CI worker on a 2-core Zen 3, the longest test of the suite
@settings(max_examples=8, deadline=None)
@given(convolutions())
def test__implicit_products__equal_stored_patches_bit_for_bit_and_numpy(case):
    rng = np.random.default_rng(sum(case["x"]) + sum(case["w"]))
    x = rng.normal(size=case["x"]).astype(case["dtype"])
    w = rng.normal(size=case["w"]).astype(case["dtype"])
    args = (case["strides"], case["padding"], case["dilations"])
    results = {}
    for implicit in (True, False):
        with config.context(IMPLICIT_GEMM=implicit, MATMUL="popjit"):
            results[implicit] = conv_and_gradients(x, w, *args)
    for got, stored in zip(results[True], results[False]):
        np.testing.assert_array_equal(got, stored)
    if len(case["x"]) == 4 and case["w"][-2] == case["x"][-1]:  # 2-D, no groups: the direct convolution
        tol = 1e-4 if case["dtype"] == np.float32 else 1e-10
        expected = conv_by_loops(x, w, (case["strides"],) * 2, case["padding"], (case["dilations"],) * 2)
        np.testing.assert_allclose(results[True][0], expected, rtol=tol, atol=tol)


@pytest.mark.parametrize("name", sorted(GRADIENT_CASES))
def test__gradients_with_implicit_products__match_finite_differences(name):
    rng = np.random.default_rng(3)
    x = rng.normal(size=(1, 5, 5, 2))
    w = rng.normal(size=(3, 3, 2, 2))
    op = GRADIENT_CASES[name]
    probe = rng.normal(size=np.asarray(op(x, w)).shape)

    @tf.function(jit_compile=True)
    def grads(a, b):
        with tf.GradientTape() as tape:
            tape.watch([a, b])
            y = tf.reduce_sum(op(a, b) * probe)
        return tape.gradient(y, [a, b])

    def loss(a, b):
        return float(np.sum(np.asarray(op(a, b)) * probe))

    with config.context(IMPLICIT_GEMM=True, MATMUL="popjit"):
        gx, gw = (np.asarray(g) for g in grads(x, w))
    np.testing.assert_allclose(gx, finite_difference(lambda a: loss(a, w), x), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(gw, finite_difference(lambda b: loss(x, b), w), rtol=1e-6, atol=1e-6)


def _executable(fn: Any, *args: np.ndarray) -> Any:
    with tf.device("/device:IPU:0"):
        return tf.function(fn, jit_compile=True).get_concrete_function(*args).executable("/device:IPU:0")


def _conv_step(x, w):
    with tf.GradientTape() as tape:
        tape.watch([x, w])
        loss = tf.reduce_sum(tf.nn.relu(tf.nn.conv2d(x, w, 1, "VALID")) ** 2)
    return tape.gradient(loss, [x, w])


def test__the_engine_stores_no_patches_when_on_and_the_schedule_is_the_same():
    x = np.ones((4, 9, 9, 8), np.float32)
    w = np.ones((3, 3, 8, 16), np.float32)
    texts = {}
    for implicit in (True, False):
        with config.context(IMPLICIT_GEMM=implicit):
            exe = _executable(_conv_step, x, w)
            texts[implicit] = (exe.as_text("engine"), exe.as_text("schedule"), exe.engine_source)
    (engine_on, schedule_on, on), (engine_off, schedule_off, off) = texts[True], texts[False]
    assert schedule_on == schedule_off
    assert "_patches" in engine_off and "_patches" not in engine_on
    (patches,) = [b for b in on.arguments if b.shape == (4, 7, 7, 3, 3, 8)]
    assert on.unmaterialised == {patches.uid} and not off.unmaterialised
    assert sum(c.name.startswith("g_") for c in on.callees) == 2  # the forward product and the filter's gradient
    assert not any(c.name.startswith("g_") for c in off.callees)


def test__a_product_reading_patches_after_their_input_changed__reads_stored_patches():
    """The filter's gradient runs after the input's update in the step (the loop IR's order), so it needs
    the patches of the old input: they are stored, and read by both products (all of a kernel's readers
    compute it, or none)."""

    def steps(x, w):
        def body(i, x, w):
            gx, gw = _conv_step(x, w)
            return i + 1, x - 1e-3 * gx, w - 1e-3 * gw
        return tf.while_loop(lambda i, x, w: i < 3, body, [0, x, w])[1:]

    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 6, 6, 4)).astype(np.float32)
    w = rng.normal(size=(3, 3, 4, 5)).astype(np.float32)
    results = {}
    for implicit in (True, False):
        with config.context(IMPLICIT_GEMM=implicit, MATMUL="popjit"):
            exe = _executable(steps, x, w)
            results[implicit] = [np.asarray(t) for t in tf.function(steps, jit_compile=True)(x, w)]
            if implicit:
                assert not any(c.name.startswith("g_") for c in exe.engine_source.callees)
                assert not exe.engine_source.unmaterialised
    for got, stored in zip(results[True], results[False]):
        np.testing.assert_array_equal(got, stored)


@pytest.mark.parametrize("threads", [1, 2])
def test__blocks_cut_inside_an_axis_of_the_patches__give_the_stored_patches_bits(threads):
    """52 channels, 3x3: depth 468 is two slices of 234 (4.5 pixels of channels), and the filter's gradient,
    468 rows of ``A``, is computed 96 rows at a time: blocks start and end inside the channel axis."""
    rng = np.random.default_rng(7)
    x = rng.normal(size=(2, 7, 6, 52)).astype(np.float32)
    w = rng.normal(size=(3, 3, 52, 20)).astype(np.float32)
    results = {}
    for implicit in (True, False):
        with config.context(IMPLICIT_GEMM=implicit, MATMUL="popjit", NUM_THREADS=threads):
            results[implicit] = conv_and_gradients(x, w, 1, "SAME", 1)
    for got, stored in zip(results[True], results[False]):
        np.testing.assert_array_equal(got, stored)
    expected = conv_by_loops(x.astype(np.float64), w.astype(np.float64), (1, 1), "SAME", (1, 1))
    np.testing.assert_allclose(results[True][0], expected, rtol=1e-4, atol=1e-3)


def _computed_products(fn: Any, *args: np.ndarray) -> int:
    return sum(c.name.startswith("g_") for c in _executable(fn, *args).engine_source.callees)


def _conv(x, w):
    return tf.nn.relu(tf.nn.conv2d(x, w, 1, "VALID"))


@pytest.mark.parametrize("matmul, computed", [("popjit", True), ("blas", False)])
def test__by_default_patches_are_computed_where_the_own_gemm_runs_every_product_reading_them(matmul, computed):
    x = np.ones((4, 9, 9, 8), np.float32)
    w = np.ones((3, 3, 8, 16), np.float32)
    assert config.get("IMPLICIT_GEMM") == "rules"
    with config.context(MATMUL=matmul):
        assert _computed_products(_conv_step, x, w) == (2 if computed else 0)
        assert _computed_products(_conv, x, w) == (1 if computed else 0)


def test__under_the_matmul_rules_patches_are_computed_only_if_the_rules_give_all_their_readers_the_own_gemm():
    """The Keras CNN's second convolution: its forward product passes the rules (on an AVX-512 host); its
    filter's gradient, 288 x 64 and 3872 deep, does too, cut across its depth, but its patches (4.5 MB) are
    smaller than a deep product's computed operand must be; so inference computes the patches and training,
    whose filter gradient reads them too, stores them. On other hosts neither passes."""
    x = np.ones((32, 13, 13, 32), np.float32)
    w = np.ones((3, 3, 32, 64), np.float32)
    forward = own_gemm_wins(1, 32 * 11 * 11, 64, 288)
    assert splits_depth(288, 64, 32 * 11 * 11) and DEEP_MIN_BYTES > 32 * 11 * 11 * 288 * 4
    with config.context(MATMUL="rules"):
        assert _computed_products(_conv, x, w) == int(forward)
        assert _computed_products(_conv_step, x, w) == 0


def _engine_callees(fn: Any, *args: np.ndarray) -> list[str]:
    """The callees of ``fn``'s engine, rendered, not compiled."""
    graph = optimize_graph(tf.function(fn).get_concrete_function(*args).graph)
    return [c.name for c in render_engine(lower_graph(graph)).callees]


@pytest.mark.parametrize("size, computed", [(56, True), (24, False)])
def test__under_the_rules_large_patches_read_by_a_deep_filter_gradient_are_computed(size, computed, monkeypatch):
    """A ResNet stage's training step, [8, 56, 56, 64] by 3x3x64 -> 64: its patches (58 MB) are read by the
    forward product and by the filter's gradient, 576 x 64 and 25088 deep, cut across its depth; at 24 x 24
    (10 MB) they stay stored."""
    monkeypatch.setattr(gemm_choice, "panel_vectors", lambda: 4)  # an AVX-512 host's rules
    x = np.ones((8, size, size, 64), np.float32)
    w = np.ones((3, 3, 64, 64), np.float32)
    assert splits_depth(576, 64, 8 * size * size)
    assert (8 * size * size * 576 * 4 >= DEEP_MIN_BYTES) is computed
    with config.context(MATMUL="rules"):
        callees = _engine_callees(_conv_step, x, w)
    computed_products = [name for name in callees if name.startswith("g_")]
    # the input gradient's patches (of dy) are computed either way: their only product is not deep
    assert len(computed_products) == (3 if computed else 1)
    assert "sum_depth" in callees and ("gemm_depth" in callees) is not computed


@pytest.mark.parametrize("x_shape, w_shape", [((2, 20, 20, 16), (3, 3, 16, 16)), ((1, 40, 40, 8), (3, 3, 8, 70))])
def test__a_deep_filter_gradient_of_computed_patches__has_the_bits_of_the_stored_ones(x_shape, w_shape):
    """Computed, the filter's gradient (144 x 16 and 800 deep; 72 x 70 and 1600 deep) is cut across its depth
    as the stored one is: the same sums, so the same bits."""
    rng = np.random.default_rng(8)
    x = rng.uniform(-1, 1, x_shape).astype(np.float32)
    w = rng.uniform(-1, 1, w_shape).astype(np.float32)
    results, callees = {}, {}
    for implicit in (True, False):
        with config.context(IMPLICIT_GEMM=implicit, MATMUL="popjit"):
            results[implicit] = conv_and_gradients(x, w, 1, "SAME", 1)
            callees[implicit] = {c.name for c in _executable(_conv_step, x, w).engine_source.callees}
    assert "gemm_depth" in callees[False] and "gemm_depth" not in callees[True] and "sum_depth" in callees[True]
    for got, stored in zip(results[True], results[False]):
        np.testing.assert_array_equal(got, stored)
    y = conv_by_loops(x.astype(np.float64), w.astype(np.float64), (1, 1), "SAME", (1, 1))
    windows = np.lib.stride_tricks.sliding_window_view(np.pad(x.astype(np.float64), ((0, 0), (1, 1), (1, 1), (0, 0))),
                                                       w_shape[:2], axis=(1, 2))
    dw = 2 * np.tensordot(windows, y, axes=([0, 1, 2], [0, 1, 2])).transpose(1, 2, 0, 3)
    np.testing.assert_allclose(results[True][2], dw, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("value, setting", [("rules", "rules"), ("", "rules"), ("1", True), ("on", True),
                                            ("0", False), ("off", False)])
def test__popjit_implicit_gemm_values(value, setting, monkeypatch):
    monkeypatch.setenv("POPJIT_IMPLICIT_GEMM", value)
    assert config.get("IMPLICIT_GEMM") == setting


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 6), min_size=0, max_size=4), st.integers(1, 40), st.data())
def test__split_domain__keeps_every_point_where_it_was(domain, inner, data):
    domain = tuple(domain)
    split = split_domain(domain, inner)
    size = int(np.prod(domain, dtype=np.int64))
    if split is None:
        return
    new, outer, renamed = split
    assert int(np.prod(new, dtype=np.int64)) == size and int(np.prod(new[outer:], dtype=np.int64)) == inner
    old_flat = flat_index([ivar(f"i{j}") for j in range(len(domain))], row_major_strides(domain))
    new_flat = old_flat.substitute(renamed) if renamed else old_flat
    point = [data.draw(st.integers(0, d - 1)) for d in new]
    values = {IVar(f"i{j}"): v for j, v in enumerate(point)}
    expected = sum(v * s for v, s in zip(point, row_major_strides(new)))
    assert sum(c * values[a] for a, c in new_flat.terms) + new_flat.const == expected


def test__split_domain__finds_the_axes_of_a_convolutions_patches():
    assert split_domain((32, 11, 11, 3, 96), 288) == ((32, 11, 11, 3, 96), 3, {})
    new, outer, _ = split_domain((2, 450, 2), 18)
    assert (new, outer) == ((2, 50, 9, 2), 2)
    assert split_domain((2, 5, 3), 4) is None
