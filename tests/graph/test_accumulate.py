"""``accumulate_blocks``: a loop summing the gradients of one-index gathers or dynamic slices adds
each block in place (``dynamic_update_slice_add``) instead of a whole tensor per iteration; values
unchanged (graph interpreter before and after the pass, compiled engine, NumPy)."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import popjit.tensorflow as tf
from popjit.frontend.gather_ops import dynamic_update_slice
from popjit.graph.interpret import interpret
from popjit.graph.passes import accumulate_blocks, const_fold, cse
from popjit.ir.graph import Graph


def grad_of_time_loop(x: np.ndarray, weights: np.ndarray, axis: int, by_gather: bool) -> Any:
    """d/dx of ``sum_i sum(take(x, i, axis) * weights[i])`` over ``i < len(weights)``, as a
    differentiated ``tf.range`` loop (indices past the axis clamp, as on the IPU)."""

    def f(x, w):
        with tf.GradientTape() as tape:
            tape.watch(x)
            total = tf.constant(0.0)
            for i in tf.range(w.shape[0]):
                if by_gather:
                    step = tf.gather(x, i, axis=axis)
                else:
                    begin = tf.stack([i if k == axis else tf.constant(0) for k in range(x.shape.rank)])
                    size = [1 if k == axis else d for k, d in enumerate(x.shape.as_list())]
                    step = tf.squeeze(tf.slice(x, begin, size), axis)
                total += tf.reduce_sum(step * w[i])
        return tape.gradient(total, x)

    return f


def numpy_grad(x: np.ndarray, weights: np.ndarray, axis: int) -> np.ndarray:
    grad = np.zeros_like(x, dtype=np.float64)
    for i, w in enumerate(weights):
        j = min(i, x.shape[axis] - 1)
        index = [slice(None)] * x.ndim
        index[axis] = j
        grad[tuple(index)] += w
    return grad


def optimized(graph: Graph) -> Graph:
    return accumulate_blocks(cse(const_fold(graph.copy())))


def backward_loop_adds(graph: Graph, shape: tuple[int, ...]) -> list[str]:
    """The ops inside loops that produce a value of the full ``shape``."""
    ops = []
    for node in graph.walk():
        if node.op == "while":
            ops += [n.op for n in node.regions[1].walk() if any(v.shape == shape for v in n.outputs)]
    return ops


@given(hnp.array_shapes(min_dims=2, max_dims=3, min_side=1, max_side=5), st.data())
def test__summed_block_gradients__are_added_in_place_with_the_same_values(shape: tuple[int, ...],
                                                                          data: st.DataObject) -> None:
    axis = data.draw(st.integers(0, len(shape) - 1))
    by_gather = data.draw(st.booleans())
    steps = data.draw(st.integers(1, shape[axis] + 2))  # past the end: clamped indices
    x = data.draw(hnp.arrays(np.float32, shape, elements=st.floats(-2, 2, width=32)))
    w = data.draw(hnp.arrays(np.float32, (steps,), elements=st.floats(-2, 2, width=32)))
    fn = grad_of_time_loop(x, w, axis, by_gather)
    graph = tf.function(fn).get_concrete_function(x, w).graph
    before, _ = interpret(graph, [x, w])
    rewritten = optimized(graph)
    after, _ = interpret(rewritten, [x, w])
    np.testing.assert_array_equal(after[0], before[0])
    np.testing.assert_allclose(after[0], numpy_grad(x, w, axis), rtol=1e-5, atol=1e-5)
    assert "dynamic_update_slice_add" in [n.op for n in rewritten.walk()]
    assert "add" not in backward_loop_adds(rewritten, shape), "a whole-tensor add is left inside a loop"
    compiled = tf.function(fn, jit_compile=True)(x, w).numpy()
    np.testing.assert_allclose(compiled, numpy_grad(x, w, axis), rtol=1e-5, atol=1e-5)


def test__an_add_of_a_block_into_a_nonzero_tensor_is_left_alone() -> None:
    def f(x, u, i):
        return x + dynamic_update_slice(tf.ones_like(x), u, i)

    x, u, i = np.zeros((4, 3), np.float32), np.ones((1, 3), np.float32), np.array([2, 0], np.int32)
    graph = optimized(tf.function(f).get_concrete_function(x, u, i).graph)
    assert "dynamic_update_slice_add" not in [n.op for n in graph.walk()]
    (out,), _ = interpret(graph, [x, u, i])
    np.testing.assert_array_equal(out, np.ones((4, 3)))
