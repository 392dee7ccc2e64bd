"""An element-wise kernel that reads a product's result element by element (a bias-add and activation after a
dense layer or a convolution) runs chained to the product (:class:`popjit.codegen.engine.Chained`): each task
runs the product on its rows (or blocks of columns), then the kernel on what they wrote while it is in its
core's cache. The kernel computes each element as it does alone, so the results have the bits of the product
followed by the kernel's operations in NumPy's float32."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import popjit.tensorflow as tf
from popjit import config
from popjit.kernels.blas import HAVE_CBLAS
from popjit.kernels.gemm_choice import panel_width, splits_depth
from popjit.loop.passes import column_blocks, row_consumer_scale
from popjit.pipeline import cache
from popjit.pipeline.compiler import lower_graph, optimize_graph

#: Consumers of the product ``p``: popjit's, and NumPy's float32 operations giving the same bits.
CONSUMERS: dict[str, tuple[Callable, Callable]] = {
    "bias_relu": (lambda p, b, r: tf.nn.relu(p + b), lambda p, b, r: np.maximum(p + b, np.float32(0))),
    "relu": (lambda p, b, r: tf.nn.relu(p), lambda p, b, r: np.maximum(p, np.float32(0))),
    "residual": (lambda p, b, r: (p - r) * b, lambda p, b, r: (p - r) * b),
}


def run(consumer: str, x: np.ndarray, w: np.ndarray, b: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, str]:
    """The chained program's result and its engine's text."""
    ours = CONSUMERS[consumer][0]
    fn = tf.function(lambda x, w, b, r: ours(tf.matmul(x, w), b, r), jit_compile=True)
    return fn(x, w, b, r).numpy(), fn.get_concrete_function(x, w, b, r).executable("/device:CPU:0").as_text("engine")


def product(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The product alone, compiled with the same settings (so with the same plan)."""
    return tf.function(lambda x, w: tf.matmul(x, w), jit_compile=True)(x, w).numpy()


def operands(batch: int | None, m: int, k: int, n: int, seed: int) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    rows = (m,) if batch is None else (batch, m)
    x = rng.standard_normal((*rows, k)).astype(np.float32)
    w = rng.standard_normal((k, n)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    r = rng.standard_normal((*rows, n)).astype(np.float32)
    return x, w, b, r


def chained_on_own_gemm(batch: int | None, m: int, k: int, n: int, consumer: str) -> bool:
    """Whether the own gemm's plan (kernels.gemm_choice.own_split) lets the kernel run chained: a kernel of more
    than one element after a product cut by rows (at least as tall as wide, or cut across its depth), or, cut
    by columns, after one matrix whose columns are whole panels, looping over its rows and columns (not one
    flat loop, as a relu alone is)."""
    if m * n * (batch or 1) == 1:
        return False  # why: a kernel of one element has no loop to take ranges of
    if m >= n or splits_depth(m, n, k):
        return True
    return batch is None and m > 1 and n % panel_width(4) == 0 and consumer != "relu"


@settings(max_examples=30, deadline=None)
@given(batch=st.sampled_from([None, None, 2, 3]), m=st.integers(1, 150), k=st.integers(1, 70),
       n=st.sampled_from([1, 5, 16, 33, 64, 90, 128, 150, 192]), consumer=st.sampled_from(sorted(CONSUMERS)),
       seed=st.integers(0, 2**16))
def test__a_kernel_reading_a_products_result_is_chained_to_it_and_keeps_its_bits(
        batch: int | None, m: int, k: int, n: int, consumer: str, seed: int) -> None:
    x, w, b, r = operands(batch, m, k, n, seed)
    cache.clear()  # why: the executable cache does not key on the settings
    with config.context(MATMUL="popjit", PARALLEL_MIN_ELEMENTS=1):
        got, engine = run(consumer, x, w, b, r)
        alone = product(x, w)
    np.testing.assert_array_equal(got, CONSUMERS[consumer][1](alone, b, r))
    assert ("# chained" in engine) == chained_on_own_gemm(batch, m, k, n, consumer), engine


PLANS = [("popjit", 64, 4096, 64, "sum_depth"),  # a deep product's sums over its depth, row by row
         ("blas", 2048, 9, 32, "matmul_split"), ("blas", 2053, 9, 32, "matmul_split"),  # the system BLAS's row blocks
         ("blas", 32, 784, 256, "matmul_split"),  # its blocks of columns (an MLP's first layer, batch 32)
         ("popjit", 256, 784, 1024, "gemm_columns_packed_a")]  # the own gemm's panels of columns (W2's first layer)


@pytest.mark.parametrize(("setting", "m", "k", "n", "callee"), PLANS, ids=[f"{p[0]}-{p[1]}x{p[2]}" for p in PLANS])
def test__the_other_plans_are_chained(setting: str, m: int, k: int, n: int, callee: str) -> None:
    if setting == "blas" and not HAVE_CBLAS:
        pytest.skip("the system BLAS's split products need a CBLAS")
    x, w, b, r = operands(None, m, k, n, 1)
    cache.clear()
    with config.context(MATMUL=setting):
        got, engine = run("bias_relu", x, w, b, r)
        alone = product(x, w)
    assert callee in engine and "# chained" in engine
    np.testing.assert_array_equal(got, np.maximum(alone + b, np.float32(0)))


def consumer_scale(fn: Callable, *args: np.ndarray) -> int | None:
    """:func:`row_consumer_scale` of the program's product and the kernel after it."""
    program = lower_graph(optimize_graph(tf.function(fn, jit_compile=True).get_concrete_function(*args).graph))
    body = program.body
    (at,) = [i for i, s in enumerate(body) if type(s).__name__ == "MatMul"]
    return row_consumer_scale(body[at], body[at + 1]) if at + 1 < len(body) else None


def test__which_kernels_read_a_products_rows() -> None:
    x, w, b, _ = operands(None, 48, 16, 24, 2)
    assert consumer_scale(lambda x, w, b: tf.nn.relu(tf.matmul(x, w) + b), x, w, b) == 1  # [48, 24] loops
    assert consumer_scale(lambda x, w: tf.nn.relu(tf.matmul(x, w)), x, w) == 24  # one loop over every element
    # reading other rows (a transpose), or reducing over them, is not reading a row as it is done
    assert consumer_scale(lambda x, w: tf.transpose(tf.nn.relu(tf.matmul(x, w))), x, w) is None
    assert consumer_scale(lambda x, w: tf.reduce_sum(tf.matmul(x, w), axis=0), x, w) is None


def test__a_kernel_after_a_product_cut_by_columns_loops_over_its_blocks_first() -> None:
    """Reordered for a product cut by columns, a bias-add's loops run over blocks of columns, then rows, then
    the columns of a block, reading and writing the elements they did."""
    x, w, b, _ = operands(None, 48, 16, 128, 4)
    program = lower_graph(optimize_graph(tf.function(lambda x, w, b: tf.nn.relu(tf.matmul(x, w) + b),
                                                     jit_compile=True).get_concrete_function(x, w, b).graph))
    product_, kernel = program.body[-2:]
    blocked = column_blocks(product_, kernel, 64)
    assert blocked is not None and blocked.domain == (2, 48, 64)
    elements = {}
    for block in range(2):
        for row in range(48):
            for column in range(64):
                point = {"i0": block, "i1": row, "i2": column}
                elements[index_at(blocked.stores[0].index, point)] = (row, block * 64 + column)
    assert elements == {row * 128 + column: (row, column) for row in range(48) for column in range(128)}
    assert column_blocks(product_, kernel, 48) is None  # 128 columns are not whole blocks of 48


def index_at(index, point: dict[str, int]) -> int:
    """The value of a loop-IR index at a point of its loop variables."""
    return index.const + sum(coefficient * point[atom.name] for atom, coefficient in index.terms)


def test__the_keras_cnns_bias_add_and_relu_are_chained_to_its_convolution_by_default() -> None:
    """The Keras CNN's second convolution (32 x 13 x 13 x 32, 3 x 3 filters to 64 channels), its bias and relu."""
    rng = np.random.default_rng(6)
    x = rng.standard_normal((32, 13, 13, 32)).astype(np.float32)
    w = rng.standard_normal((3, 3, 32, 64)).astype(np.float32)
    b = rng.standard_normal(64).astype(np.float32)
    fn = tf.function(lambda x: tf.nn.relu(tf.nn.conv2d(x, w, 1, "VALID") + b), jit_compile=True)
    cache.clear()
    got = fn(x).numpy()
    assert "# chained" in fn.get_concrete_function(x).executable("/device:CPU:0").as_text("engine")
    windows = np.lib.stride_tricks.sliding_window_view(x.astype(np.float64), (3, 3), axis=(1, 2))  # [32,11,11,32,3,3]
    want = np.maximum(np.einsum("nhwcij,ijco->nhwo", windows, w) + b, 0)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
