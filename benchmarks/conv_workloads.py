"""Convolution workloads: a 3x3 ``Conv2D`` and ReLU, forward (inference) and a training step, the same user
code on each framework.

popjit and stock TensorFlow run ``tf.nn.relu(tf.nn.conv2d(x, w, 1, "SAME"))`` in a compiled
``tf.function`` (popjit's under an ``IPUStrategy``), JAX ``lax.conv_general_dilated`` in ``jax.jit``. The
reference is the float64 sum over the window (NumPy's ``sliding_window_view`` and ``tensordot``). The
training step (``convstep``) returns the gradients of ``0.5 * sum(relu(conv)²)`` with respect to ``x`` and
``w`` (``tf.GradientTape``; ``jax.grad``): its forward product, the filters' gradient (as deep as the
output has positions) and the input's. The rate is GFLOP/s, a multiply-add counted as two.

- C1: a ResNet stage, ``[8, 56, 56, 64]`` by 3x3x64 -> 64.
- C2: the Keras CNN K1's second convolution, ``[32, 13, 13, 32]`` by 3x3x32 -> 64 (SAME, so 13x13 out).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from benchmarks import core

CONV_SIZES: dict[str, dict[str, int]] = {"C1": {"batch": 8, "size": 56, "cin": 64, "cout": 64},
                                         "C2": {"batch": 32, "size": 13, "cin": 32, "cout": 64}}
WINDOW = 3


def conv_label(batch: int = 8, size: int = 56, cin: int = 64, cout: int = 64) -> str:
    """The problem's label in the results table."""
    return f"conv2d {WINDOW}x{WINDOW} [{batch},{size},{size},{cin}]->{cout} f32 +relu"


def _windows(x: np.ndarray) -> np.ndarray:
    """The ``WINDOW x WINDOW`` windows of NHWC ``x`` padded for SAME: ``[batch, height, width, channels, kh, kw]``."""
    pad = WINDOW // 2
    padded = np.pad(x, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    return np.lib.stride_tricks.sliding_window_view(padded, (WINDOW, WINDOW), axis=(1, 2))


def conv_reference(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``relu(conv2d(x, w, stride 1, SAME))`` in float64, NHWC by HWIO."""
    windows = _windows(x.astype(np.float64))
    return np.maximum(np.tensordot(windows, w.astype(np.float64), axes=([3, 4, 5], [2, 0, 1])), 0.0)


def conv_problem(batch: int = 8, size: int = 56, cin: int = 64, cout: int = 64) -> core.Problem:
    """One forward convolution with ReLU."""
    rng = np.random.default_rng(4)
    x = rng.uniform(-1, 1, (batch, size, size, cin)).astype(np.float32)
    w = rng.uniform(-1, 1, (WINDOW, WINDOW, cin, cout)).astype(np.float32)
    expected = conv_reference(x, w)
    flops = 2.0 * batch * size * size * WINDOW * WINDOW * cin * cout
    atol = 1e-5 * float(np.max(np.abs(expected)))
    return core.Problem("conv", conv_label(batch, size, cin, cout), (x, w), 1, expected, flops, "GFLOP/s",
                        rtol=1e-4, atol=atol, sizes={"batch": batch, "size": size, "cin": cin, "cout": cout})


def make_conv(tf: Any) -> Any:
    """The convolution as user code (the same for popjit and TensorFlow)."""

    @tf.function(jit_compile=True)
    def conv(x, w):
        return tf.nn.relu(tf.nn.conv2d(x, w, 1, "SAME"))

    return conv


def _conv_popjit(p: core.Problem) -> tuple[Callable[[], Any], str]:
    tf, strategy = core.popjit_strategy()
    fn = make_conv(tf)
    args = tuple(tf.constant(v) for v in p.inputs)
    return lambda: strategy.run(fn, args=args).numpy(), "IPUStrategy.run"


def _conv_tf(p: core.Problem) -> tuple[Callable[[], Any], str]:
    tf = core.import_peer("tensorflow")
    fn = make_conv(tf)
    args = tuple(tf.constant(v) for v in p.inputs)
    return lambda: fn(*args).numpy(), "tf.function(jit_compile=True)"


def _conv_jax(p: core.Problem) -> tuple[Callable[[], Any], str]:
    jax = core.import_peer("jax")

    def conv(x, w):
        y = jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
        return jax.numpy.maximum(y, 0.0)

    fn = jax.jit(conv)
    args = tuple(jax.device_put(v) for v in p.inputs)
    return lambda: fn(*args).block_until_ready(), "jax.jit"


CONV_IMPLS: dict[str, Callable[[core.Problem], tuple[Callable[[], Any], str]]] = {
    "popjit": _conv_popjit, "tensorflow": _conv_tf, "jax": _conv_jax,
}


# -- (k) a convolution's training step: the gradients of its input and its filters -------------------


def step_label(batch: int = 8, size: int = 56, cin: int = 64, cout: int = 64) -> str:
    """The training step's label in the results table."""
    return f"{conv_label(batch, size, cin, cout)}, gradients of x and w"


def step_reference(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The gradients of ``0.5 * sum(relu(conv2d(x, w))²)`` with respect to ``x`` and ``w`` in float64, flat
    and joined (``dx`` then ``dw``). The loss's gradient at the convolution's output is ``relu(y)``; ``dw`` is
    each window times it, summed over every output position, and ``dx`` the convolution of it with the
    filters turned half round, their input and output channels swapped."""
    dy = conv_reference(x, w)
    windows = _windows(x.astype(np.float64))  # [batch, size, size, cin, kh, kw]
    dw = np.tensordot(windows, dy, axes=([0, 1, 2], [0, 1, 2])).transpose(1, 2, 0, 3)
    turned = w.astype(np.float64)[::-1, ::-1].transpose(0, 1, 3, 2)
    dx = np.tensordot(_windows(dy), turned, axes=([3, 4, 5], [2, 0, 1]))
    return np.concatenate([dx.ravel(), dw.ravel()])


def step_problem(batch: int = 8, size: int = 56, cin: int = 64, cout: int = 64) -> core.Problem:
    """(k) One convolution's training step: forward, then both gradients (three products of the forward's size)."""
    forward = conv_problem(batch, size, cin, cout)
    expected = step_reference(*forward.inputs)
    # float32 sums of up to batch * size² products: allow 1e-4 of the largest gradient (a wrong one is off by O(1))
    atol = 1e-4 * float(np.max(np.abs(expected)))
    return core.Problem("convstep", step_label(batch, size, cin, cout), forward.inputs, 1, expected, 3 * forward.work,
                        "GFLOP/s", rtol=1e-3, atol=atol, sizes=forward.sizes)


def make_step(tf: Any) -> Any:
    """The training step as user code (the same for popjit and TensorFlow)."""

    @tf.function(jit_compile=True)
    def step(x, w):
        with tf.GradientTape() as tape:
            tape.watch([x, w])
            y = tf.nn.relu(tf.nn.conv2d(x, w, 1, "SAME"))
            loss = 0.5 * tf.reduce_sum(y * y)
        return tape.gradient(loss, [x, w])

    return step


def _joined(gradients: Any) -> np.ndarray:
    return np.concatenate([np.asarray(g).ravel() for g in gradients])


def _step_popjit(p: core.Problem) -> tuple[Callable[[], Any], str]:
    tf, strategy = core.popjit_strategy()
    fn = make_step(tf)
    args = tuple(tf.constant(v) for v in p.inputs)
    return lambda: _joined(g.numpy() for g in strategy.run(fn, args=args)), "IPUStrategy.run"


def _step_tf(p: core.Problem) -> tuple[Callable[[], Any], str]:
    tf = core.import_peer("tensorflow")
    fn = make_step(tf)
    args = tuple(tf.constant(v) for v in p.inputs)
    return lambda: _joined(g.numpy() for g in fn(*args)), "tf.function(jit_compile=True)"


def _step_jax(p: core.Problem) -> tuple[Callable[[], Any], str]:
    jax = core.import_peer("jax")

    def loss(x, w):
        y = jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
        return 0.5 * jax.numpy.sum(jax.numpy.maximum(y, 0.0) ** 2)

    fn = jax.jit(jax.grad(loss, argnums=(0, 1)))
    args = tuple(jax.device_put(v) for v in p.inputs)
    return lambda: _joined(jax.block_until_ready(fn(*args))), "jax.jit(jax.grad)"


STEP_IMPLS: dict[str, Callable[[core.Problem], tuple[Callable[[], Any], str]]] = {
    "popjit": _step_popjit, "tensorflow": _step_tf, "jax": _step_jax,
}
