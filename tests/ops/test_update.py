"""``dynamic_update_slice``: a block written at a run-time position (starts clamped, as XLA does).

Property test on every path against a NumPy reference, the structural check that a loop's
accumulator is updated in place (no copy of the whole buffer per iteration), and its gradient.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import popjit.tensorflow as tf
from popjit.frontend.tracing import apply_op
from popjit.ir.loop import Copy, Repeat
from tests.ops.strategies import DTYPES, arrays, check_paths, finite_values, run_all


def dynamic_update_slice(operand: Any, update: Any, begin: Any) -> tf.Tensor:
    return apply_op("dynamic_update_slice", [tf.convert_to_tensor(x) for x in (operand, update, begin)])


def reference(operand: np.ndarray, update: np.ndarray, begin: np.ndarray) -> np.ndarray:
    out = operand.copy()
    starts = [min(max(int(b), 0), d - n) for b, d, n in zip(begin, operand.shape, update.shape)]
    out[tuple(slice(s, s + n) for s, n in zip(starts, update.shape))] = update
    return out


@st.composite
def updates(draw: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    block = tuple(draw(st.integers(1, d)) for d in shape)
    dtype = draw(st.sampled_from(list(DTYPES)))
    values = lambda dt: finite_values(dt, 100)  # noqa: E731
    begin = np.int32([draw(st.integers(-3, d + 2)) for d in shape])
    return draw(arrays(dtype, shape, values)), draw(arrays(dtype, block, values)), begin


@given(updates())
def test__dynamic_update_slice__matches_numpy_with_clamped_starts(case: tuple) -> None:
    operand, update, begin = case
    check_paths(run_all(dynamic_update_slice, operand, update, begin), reference(operand, update, begin),
                exact=True, what="dynamic_update_slice")


def row_writer(x: tf.Tensor, read_old_buffer: bool) -> tf.Tensor:
    """Write row ``i`` of a [6, 3] accumulator each iteration; optionally also read the old buffer."""
    buf, total = tf.zeros([6, 3]), tf.zeros([3])
    for i in tf.range(6):
        new = dynamic_update_slice(buf, tf.expand_dims(x * tf.cast(i, tf.float32), 0), tf.stack([i, 0]))
        if read_old_buffer:
            total = total + tf.reduce_sum(buf, 0)
        buf = new
    return tf.reduce_sum(buf * buf, 0) + total


def buffer_copies_per_iteration(fn: Any, x: np.ndarray) -> int:
    program = fn.get_concrete_function(x).executable("cpu").program
    (loop,) = [s for s in program.walk() if isinstance(s, Repeat)]
    return sum(1 for s in loop.body if isinstance(s, Copy) and s.src.size == 18)


@pytest.mark.parametrize("read_old_buffer", [False, True])
def test__dynamic_update_slice__loop_accumulator_is_written_in_place(read_old_buffer: bool) -> None:
    x = np.float32([1, 2, 3])
    fn = tf.function(functools.partial(row_writer, read_old_buffer=read_old_buffer), jit_compile=True)
    rows = np.arange(6, dtype=np.float32)[:, None] * x
    old_sums = sum(rows[:i].sum(0) for i in range(6)) if read_old_buffer else 0
    np.testing.assert_array_equal(fn(x).numpy(), (rows * rows).sum(0) + old_sums)
    # why: the old buffer must survive when something else reads it, so then (only) it is copied
    assert buffer_copies_per_iteration(fn, x) == (2 if read_old_buffer else 0)


def test__dynamic_update_slice__gradient_splits_the_cotangent() -> None:
    operand = tf.constant(np.arange(12, dtype=np.float32).reshape(3, 4))
    update = tf.constant(np.ones((2, 2), np.float32))
    weights = tf.constant(np.arange(12, dtype=np.float32).reshape(3, 4) + 1)

    @tf.function(jit_compile=True)
    def grads(o, u):
        with tf.GradientTape() as tape:
            tape.watch([o, u])
            y = tf.reduce_sum(dynamic_update_slice(o, u, tf.constant([1, 1])) * weights)
        return tape.gradient(y, [o, u])

    g_operand, g_update = grads(operand, update)
    expected = weights.numpy().copy()
    expected[1:3, 1:3] = 0
    np.testing.assert_array_equal(g_operand.numpy(), expected)
    np.testing.assert_array_equal(g_update.numpy(), weights.numpy()[1:3, 1:3])
