"""``convolve_input_gradients``: a stride-one convolution's input gradient, ``patches_transpose(dy @ wᵀ)``,
becomes a convolution of the padded ``dy`` with the flipped filter. Over window sizes, dilations and
paddings (``SAME``, ``VALID``, explicit), 1-D to 3-D: the graph interpreter gives the same gradients
before and after the pass (run on any number of channels) and NumPy's (float64); strides above one,
padding wider than the window reaches and fewer than 64 input channels keep col2im. Compiled with 64
channels, the engine computes ``dy``'s patches instead of storing them, with NumPy's gradients."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import popjit.tensorflow as tf
from popjit import config
from popjit.frontend import conv_ops
from popjit.graph.interpret import interpret
from popjit.graph.passes import const_fold, convolve_input_gradients, cse
from popjit.ir.graph import Graph
from popjit.ops.conv import _transpose_ref, patches_reference


def input_gradient(strides: int, padding: Any, dilations: int) -> Any:
    """``f(x, w, probe)``: the gradient of ``sum(conv(x, w) * probe)`` with respect to ``x``."""

    def f(x, w, probe):
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(tf.nn.convolution(x, w, strides, padding, dilations=dilations) * probe)
        return tape.gradient(loss, x)

    return f


def numpy_input_gradient(x: np.ndarray, w: np.ndarray, probe: np.ndarray, pads: tuple, dilation: int) -> np.ndarray:
    """col2im of ``probe @ wᵀ`` in NumPy (stride one)."""
    window, spatial = w.shape[:-2], x.shape[1:-1]
    rows = probe.reshape(-1, w.shape[-1]) @ w.reshape(-1, w.shape[-1]).T
    shape = patches_reference(x, window, (1,) * len(window), (dilation,) * len(window), pads).shape
    return _transpose_ref(rows.reshape(shape), spatial, window, (1,) * len(window), (dilation,) * len(window), pads)


def optimized(graph: Graph, min_channels: int = 1) -> Graph:
    return convolve_input_gradients(cse(const_fold(graph.copy())), min_channels)


def ops(graph: Graph) -> list[str]:
    return [node.op for node in graph.walk()]


@st.composite
def stride_one_convolutions(draw: Any) -> dict[str, Any]:
    """A stride-one convolution, its padding explicit and at most what its window reaches."""
    spatial_dims = draw(st.integers(1, 3))
    window = [draw(st.integers(1, 3)) for _ in range(spatial_dims)]
    dilation = draw(st.integers(1, 2))
    reach = [(k - 1) * dilation for k in window]
    pads = tuple((draw(st.integers(0, r)), draw(st.integers(0, r))) for r in reach)
    least = [max(1, r + 1 - lo - hi) for r, (lo, hi) in zip(reach, pads)]
    spatial = [draw(st.integers(low, max(low, 6 if spatial_dims < 3 else 3))) for low in least]
    return dict(x=(draw(st.integers(1, 2)), *spatial, draw(st.integers(1, 3))), window=tuple(window),
                cout=draw(st.integers(1, 3)), pads=pads, dilation=dilation)


@settings(max_examples=25, deadline=None)
@given(stride_one_convolutions())
def test__the_input_gradient_is_a_convolution_with_the_same_values(case):
    rng = np.random.default_rng(sum(case["x"]) + sum(case["window"]))
    x = rng.normal(size=case["x"])
    w = rng.normal(size=(*case["window"], case["x"][-1], case["cout"]))
    padding = [[0, 0], *map(list, case["pads"]), [0, 0]]
    f = input_gradient(1, padding, case["dilation"])
    probe_shape = tf.nn.convolution(x, w, 1, padding, dilations=case["dilation"]).shape.as_list()
    probe = rng.normal(size=probe_shape)
    graph = tf.function(f, jit_compile=True).get_concrete_function(x, w, probe).graph
    after = optimized(graph)
    assert "patches_transpose" in ops(graph) and "patches_transpose" not in ops(after)
    ((before_value,), _), ((after_value,), _) = interpret(graph, [x, w, probe]), interpret(after, [x, w, probe])
    expected = numpy_input_gradient(x, w, probe, case["pads"], case["dilation"])
    np.testing.assert_allclose(after_value, before_value, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(after_value, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("strides, padding, channels, rewritten", [
    (1, "SAME", 64, True),
    (1, "VALID", 64, True),
    (1, "SAME", 63, False),  # its product would be narrower than the own gemm takes: col2im stays
    (2, "SAME", 64, False),  # a transposed convolution would read dy dilated by zeros
    (1, [[0, 0], [3, 0], [0, 0], [0, 0]], 64, False),  # 3 rows of padding where a 3x3 window reaches 2
])
def test__which_input_gradients_become_convolutions(strides, padding, channels, rewritten):
    x, w = np.ones((1, 6, 6, channels), np.float32), np.ones((3, 3, channels, 4), np.float32)
    probe = np.ones(tf.nn.convolution(x, w, strides, padding).shape.as_list(), np.float32)
    graph = tf.function(input_gradient(strides, padding, 1), jit_compile=True).get_concrete_function(x, w, probe).graph
    after = ops(optimized(graph, min_channels=64))
    assert ("patches_transpose" not in after) == rewritten
    # the forward is dead (the loss is linear in it): one product, dy @ wᵀ or the patches of dy @ w flipped
    assert after.count("extract_patches") == int(rewritten)
    assert after.count("matmul") == 1


def test__a_max_pool_gradient_keeps_its_col2im():
    """A max-pool's gradient spreads dy over its windows with patches_transpose too, but no product."""

    def f(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(tf.nn.max_pool2d(x, 3, 1, "SAME"))
        return tape.gradient(loss, x)

    graph = tf.function(f, jit_compile=True).get_concrete_function(np.ones((1, 5, 5, 2), np.float32)).graph
    assert ops(optimized(graph)).count("patches_transpose") == 1


@pytest.mark.parametrize("spatial, padding, dilation", [((7, 6), "SAME", 1), ((9,), "VALID", 2)])
def test__compiled_with_64_channels__the_engine_computes_dys_patches(spatial, padding, dilation):
    rng = np.random.default_rng(len(spatial))
    window = (3,) * len(spatial)
    x = rng.normal(size=(2, *spatial, 64)).astype(np.float32)
    w = rng.normal(size=(*window, 64, 5)).astype(np.float32)
    f = input_gradient(1, padding, dilation)
    probe = rng.normal(size=tf.nn.convolution(x, w, 1, padding, dilations=dilation).shape.as_list()).astype(np.float32)
    pads = tuple(conv_ops.same_pads(d, k, 1, dilation) if padding == "SAME" else (0, 0)
                 for d, k in zip(spatial, window))
    with config.context(MATMUL="popjit", IMPLICIT_GEMM="rules"):
        compiled = tf.function(f, jit_compile=True)
        got = compiled(x, w, probe).numpy()
        with tf.device("/device:IPU:0"):
            source = compiled.get_concrete_function(x, w, probe).executable("/device:IPU:0").engine_source
    unstored = [b.shape for b in source.arguments if b.uid in source.unmaterialised]
    assert unstored == [(2, *spatial, *window, 5)], "dy's patches, one window per input position"
    expected = numpy_input_gradient(*(a.astype(np.float64) for a in (x, w, probe)), pads, dilation)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())
