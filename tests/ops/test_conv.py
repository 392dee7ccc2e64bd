"""Sliding windows and what is built on them: ``extract_patches`` and its transpose against loop-by-loop
NumPy references (property tests over shapes, strides, dilations, paddings), the two ops' adjointness
(``<patches(x), y> == <x, transpose(y)>``), and ``tf.nn`` convolutions and poolings against a direct
NumPy convolution, with gradients against finite differences. Each is run eagerly and compiled."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import popjit.tensorflow as tf
from popjit.errors import InvalidArgumentError
from popjit.frontend import conv_ops
from tests.helpers import run_compiled


@st.composite
def windows(draw: Any, spatial_dims: int = 2) -> dict[str, Any]:
    """An input shape with a window, strides, dilations and paddings that give at least one output."""
    window = tuple(draw(st.integers(1, 3)) for _ in range(spatial_dims))
    strides = tuple(draw(st.integers(1, 3)) for _ in range(spatial_dims))
    dilations = tuple(draw(st.integers(1, 2)) for _ in range(spatial_dims))
    pads = tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in range(spatial_dims))
    spans = [(k - 1) * r + 1 for k, r in zip(window, dilations)]
    spatial = tuple(max(draw(st.integers(1, 6)), span - lo - hi) for span, (lo, hi) in zip(spans, pads))
    shape = (draw(st.integers(1, 2)), *spatial, draw(st.integers(1, 3)))
    return dict(shape=shape, window=window, strides=strides, dilations=dilations, pads=pads)


def patches_by_loops(x: np.ndarray, window, strides, dilations, pads, fill=0.0) -> np.ndarray:
    """The definition, one element at a time."""
    n, spatial, c = x.shape[0], x.shape[1:-1], x.shape[-1]
    out = [(d + lo + hi - ((k - 1) * r + 1)) // s + 1 for d, k, s, r, (lo, hi) in
           zip(spatial, window, strides, dilations, pads)]
    result = np.full((n, *out, *window, c), fill, x.dtype)
    for o in itertools.product(*(range(v) for v in out)):
        for k in itertools.product(*(range(v) for v in window)):
            pos = [oi * s + ki * r - lo for oi, ki, s, r, (lo, _) in zip(o, k, strides, dilations, pads)]
            if all(0 <= p < d for p, d in zip(pos, spatial)):
                result[(slice(None), *o, *k, slice(None))] = x[(slice(None), *pos, slice(None))]
    return result


@settings(max_examples=40, deadline=None)
@given(windows(2), st.booleans())
def test__extract_patches__matches_the_definition_eagerly_and_compiled(case, compiled):
    x = np.random.default_rng(0).normal(size=case["shape"]).astype(np.float32)
    args = (case["window"], case["strides"], case["dilations"], case["pads"])
    expected = patches_by_loops(x, *args, fill=-7.0)
    fn = lambda t: conv_ops.extract_patches_nd(t, *args, fill=-7.0)  # noqa: E731
    got = run_compiled(fn, x) if compiled else fn(x).numpy()
    np.testing.assert_array_equal(got, expected)


@settings(max_examples=40, deadline=None)
@given(windows(2), st.booleans())
def test__patches_transpose__is_the_adjoint_of_extract_patches(case, compiled):
    rng = np.random.default_rng(1)
    x = rng.normal(size=case["shape"]).astype(np.float64)
    args = (case["window"], case["strides"], case["dilations"], case["pads"])
    patches = patches_by_loops(x, *args)
    y = rng.normal(size=patches.shape).astype(np.float32)
    spatial = case["shape"][1:-1]
    fn = lambda t: conv_ops.patches_transpose(t, spatial, *args)  # noqa: E731
    back = run_compiled(fn, y) if compiled else fn(y).numpy()
    assert back.shape == x.shape
    assert float(np.sum(back * x)) == pytest.approx(float(np.sum(patches * y)), rel=1e-4, abs=1e-4)


@settings(max_examples=25, deadline=None)
@given(windows(1))
def test__one_dimensional_windows__match_the_definition(case):
    x = np.random.default_rng(2).normal(size=case["shape"]).astype(np.float32)
    args = (case["window"], case["strides"], case["dilations"], case["pads"])
    got = run_compiled(lambda t: conv_ops.extract_patches_nd(t, *args), x)
    np.testing.assert_array_equal(got, patches_by_loops(x, *args))


# -- convolutions and pooling ------------------------------------------------------------------------
def conv_by_loops(x: np.ndarray, w: np.ndarray, strides, padding: str, dilations) -> np.ndarray:
    """A direct 2-D convolution (NHWC, HWIO) in float64, with TensorFlow's SAME padding rule."""
    n, h, wd, _ = x.shape
    kh, kw, _, co = w.shape
    pads = [conv_ops.same_pads(d, k, s, r) if padding == "SAME" else (0, 0)
            for d, k, s, r in zip((h, wd), (kh, kw), strides, dilations)]
    xp = np.pad(x.astype(np.float64), ((0, 0), pads[0], pads[1], (0, 0)))
    oh = (h + sum(pads[0]) - (kh - 1) * dilations[0] - 1) // strides[0] + 1
    ow = (wd + sum(pads[1]) - (kw - 1) * dilations[1] - 1) // strides[1] + 1
    out = np.zeros((n, oh, ow, co))
    for i, j in itertools.product(range(oh), range(ow)):
        for a, b in itertools.product(range(kh), range(kw)):
            pixel = xp[:, i * strides[0] + a * dilations[0], j * strides[1] + b * dilations[1], :]
            out[:, i, j, :] += pixel @ w[a, b].astype(np.float64)
    return out


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 3), st.integers(1, 3), st.sampled_from(["SAME", "VALID"]), st.integers(1, 2),
       st.integers(1, 2), st.booleans())
def test__conv2d__matches_a_direct_convolution(kh, kw, padding, stride, dilation, compiled):
    if stride > 1 and dilation > 1:
        dilation = 1  # TensorFlow refuses strides and dilations above 1 together
    rng = np.random.default_rng(kh * 10 + kw)
    x = rng.normal(size=(2, 6, 5, 3)).astype(np.float32)
    w = rng.normal(size=(kh, kw, 3, 4)).astype(np.float32)
    fn = lambda a, b: tf.nn.conv2d(a, b, stride, padding, dilations=dilation)  # noqa: E731
    got = run_compiled(fn, x, w) if compiled else fn(x, w).numpy()
    np.testing.assert_allclose(got, conv_by_loops(x, w, (stride, stride), padding, (dilation, dilation)),
                               rtol=1e-4, atol=1e-4)


def finite_difference(f, at: np.ndarray, eps: float = 1e-3) -> np.ndarray:
    grad = np.zeros_like(at, dtype=np.float64)
    for idx in np.ndindex(at.shape):
        step = np.zeros_like(at)
        step[idx] = eps
        grad[idx] = (f(at + step) - f(at - step)) / (2 * eps)
    return grad


GRADIENT_CASES = {
    "conv2d_same_stride2": lambda x, w: tf.nn.conv2d(x, w, 2, "SAME"),
    "conv2d_dilated": lambda x, w: tf.nn.conv2d(x, w, 1, "VALID", dilations=2),
    "conv2d_transpose": lambda x, w: tf.nn.conv2d_transpose(x, w, [1, 10, 10, 2], 2, "SAME"),
    "depthwise": lambda x, w: tf.nn.depthwise_conv2d(x, w, [1, 1, 1, 1], "SAME"),
    "max_pool": lambda x, w: tf.nn.max_pool2d(x * w[0, 0, 0, 0], 3, 2, "SAME"),
    "avg_pool": lambda x, w: tf.nn.avg_pool2d(x * w[0, 0, 0, 0], 3, 2, "SAME"),
}


@pytest.mark.parametrize("name", sorted(GRADIENT_CASES))
def test__gradients__match_finite_differences(name):
    rng = np.random.default_rng(3)
    x = rng.normal(size=(1, 5, 5, 2)).astype(np.float64)
    w = rng.normal(size=(3, 3, 2, 2)).astype(np.float64)
    op = GRADIENT_CASES[name]
    probe = rng.normal(size=np.asarray(op(x, w)).shape)

    def loss(a, b):
        return float(np.sum(np.asarray(op(a, b)) * probe))

    @tf.function(jit_compile=True)
    def grads(a, b):
        with tf.GradientTape() as tape:
            tape.watch([a, b])
            y = tf.reduce_sum(op(a, b) * probe.astype(np.float32))
        return tape.gradient(y, [a, b])

    gx, gw = (g.numpy() for g in grads(x.astype(np.float32), w.astype(np.float32)))
    np.testing.assert_allclose(gx, finite_difference(lambda a: loss(a, w), x), rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(gw, finite_difference(lambda b: loss(x, b), w), rtol=1e-3, atol=1e-3)


def test__max_pool_gradient__goes_to_the_first_largest_as_in_tensorflow():
    x = np.zeros((1, 2, 2, 1), np.float32)  # a tie in every window
    xs = tf.Variable(x)
    with tf.GradientTape() as tape:
        y = tf.nn.max_pool2d(xs, 2, 2, "VALID")
    grad = tape.gradient(y, xs).numpy()
    np.testing.assert_array_equal(grad.ravel(), [1, 0, 0, 0])


def max_pool_gradient_by_loops(x: np.ndarray, dy: np.ndarray, window: int, stride: int, pads) -> np.ndarray:
    """Each window's ``dy`` to its first largest entry (window order), summed where windows overlap."""
    patches = patches_by_loops(x, (window, window), (stride, stride), (1, 1), pads, fill=-np.inf)
    n, oh, ow, c = dy.shape
    dx = np.zeros(x.shape, np.float64)
    for b, i, j, ch in itertools.product(range(n), range(oh), range(ow), range(c)):
        first = int(np.argmax(patches[b, i, j, :, :, ch]))
        r, q = i * stride + first // window - pads[0][0], j * stride + first % window - pads[1][0]
        dx[b, r, q, ch] += dy[b, i, j, ch]
    return dx


@pytest.mark.parametrize("window, stride, padding", [(2, 2, "VALID"), (3, 2, "SAME"), (3, 1, "VALID")])
def test__max_pool_gradient__compiled__matches_the_definition_and_stores_no_window_patches(window, stride, padding):
    """The argmax of each flattened window reads the input through the window's index map (quotients and
    remainders of the flat window index), so no ``[..., KH, KW, C]`` patches are stored; ties (ReLU zeros)
    go to the first largest, as TensorFlow's do."""
    rng = np.random.default_rng(window * 10 + stride)
    x = np.maximum(rng.normal(size=(2, 7, 8, 3)), 0).astype(np.float32)  # zeros: ties in many windows
    y = tf.nn.max_pool2d(x, window, stride, padding).numpy()
    dy = rng.normal(size=y.shape).astype(np.float32)

    def gradient(x, dy):
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(tf.nn.max_pool2d(x, window, stride, padding) * dy)
        return tape.gradient(loss, x)

    compiled = tf.function(gradient, jit_compile=True)
    pads = [conv_ops.same_pads(d, window, stride, 1) if padding == "SAME" else (0, 0) for d in x.shape[1:3]]
    expected = max_pool_gradient_by_loops(x, dy, window, stride, pads)
    np.testing.assert_allclose(compiled(x, dy).numpy(), expected, rtol=1e-6, atol=1e-6)
    temps = compiled.get_concrete_function(x, dy).executable("cpu").program.temps
    assert not [t.shape for t in temps if len(t.shape) > 4], "no window patches stored"


def test__bad_arguments__raise_tensorflows_errors():
    x = np.zeros((1, 4, 4, 3), np.float32)
    with pytest.raises(InvalidArgumentError, match="input depth must be evenly divisible by filter depth: 3 vs 2"):
        tf.nn.conv2d(x, np.zeros((3, 3, 2, 4), np.float32), 1, "SAME")
    with pytest.raises(InvalidArgumentError, match="Conv2D: input must be 4-dimensional"):
        tf.nn.conv2d(x[0], np.zeros((3, 3, 3, 4), np.float32), 1, "SAME")
    with pytest.raises(InvalidArgumentError, match="strides in the batch and depth dimensions must be 1"):
        tf.nn.conv2d(x, np.zeros((3, 3, 3, 4), np.float32), [2, 1, 1, 1], "SAME")
    with pytest.raises(ValueError, match="padding must be 'SAME', 'VALID'"):
        tf.nn.max_pool2d(x, 2, 2, "FULL")


def test__channels_first__transposes_around_the_channels_last_op():
    rng = np.random.default_rng(4)
    x = rng.normal(size=(2, 3, 6, 5)).astype(np.float32)
    w = rng.normal(size=(3, 3, 3, 4)).astype(np.float32)
    nchw = tf.nn.conv2d(x, w, 1, "SAME", data_format="NCHW").numpy()
    nhwc = tf.nn.conv2d(x.transpose(0, 2, 3, 1), w, 1, "SAME").numpy()
    np.testing.assert_allclose(nchw, nhwc.transpose(0, 3, 1, 2), rtol=1e-6)


def test__extract_image_patches__has_tensorflows_layout():
    x = np.arange(2 * 4 * 4 * 2, dtype=np.float32).reshape(2, 4, 4, 2)
    got = tf.image.extract_patches(x, [1, 2, 2, 1], [1, 2, 2, 1], [1, 1, 1, 1], "VALID").numpy()
    assert got.shape == (2, 2, 2, 8)
    np.testing.assert_array_equal(got[0, 0, 0], np.concatenate([x[0, 0, 0], x[0, 0, 1], x[0, 1, 0], x[0, 1, 1]]))
