"""Gradients at the points where TensorFlow picks a convention: kinks, ties, zeros, jumps.

Each case pins popjit's gradient (eager, float64) to TensorFlow's value, written out so the test
runs without TensorFlow, and, when TensorFlow is installed, also checks it against TensorFlow itself.
The conventions chosen (from TensorFlow's registered gradients):

- ties of maximum/minimum send the whole cotangent to ``x`` (``x >= y`` / ``x <= y``); reduce_max/min
  split it equally between the tied elements;
- relu, relu6 and abs have gradient 0 at their kinks, elu 1 at 0; sign has gradient 0;
- floor, ceil, round, floordiv, truncatediv give no gradient (None), nor do comparisons, argmax,
  one_hot indices, casts through integers, ``where``'s condition;
- pow: ``dx = y x^(y-1)`` (NaN at x = y = 0, -inf at x = 0, y = -1), ``dy = z log x`` for x > 0, else 0;
- reduce_prod: exact with zeros (one zero: the product of the others there, 0 elsewhere; two: 0);
- floormod: ``dx = 1``, ``dy = -floor(x / y)``.

popjit's own conventions where TensorFlow's CPU kernels raise instead: out-of-range gather indices and
dynamic-slice starts clamp (as XLA on the IPU), so their gradients go to the clamped position;
``unsorted_segment_sum`` drops ids outside ``[0, num_segments)``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import popjit.tensorflow as ptf
from popjit.frontend.tracing import apply_op

INF, NAN = np.inf, np.nan


def _gradients(tf: Any, fn: Callable[..., Any], args: tuple) -> list[Any]:
    """Gradients of ``sum(fn(*args))`` w.r.t. the float arguments, eagerly, with ``tf`` (popjit or TF)."""
    xs = [tf.constant(np.asarray(a)) for a in args]
    floats = [x for x in xs if x.dtype.is_floating]
    with tf.GradientTape() as tape:
        tape.watch(floats)
        y = fn(tf, *xs)
    return [None if g is None else np.asarray(g) for g in tape.gradient(y, floats)]


def f64(*values: Any) -> np.ndarray:
    return np.asarray(values, np.float64)


def i32(*values: Any) -> np.ndarray:
    return np.asarray(values, np.int32)


_X23 = np.arange(6.0).reshape(2, 3) - 2.0
# name -> (function of (tf, *tensors), arguments, expected gradients of the float arguments)
CASES: dict[str, tuple[Callable[..., Any], tuple, list[Any]]] = {
    "maximum_ties_go_to_x": (lambda tf, x, y: tf.maximum(x, y), (f64(1, 2, 3), f64(2, 2, 2)),
                             [f64(0, 1, 1), f64(1, 0, 0)]),
    "minimum_ties_go_to_x": (lambda tf, x, y: tf.minimum(x, y), (f64(1, 2, 3), f64(2, 2, 2)),
                             [f64(1, 1, 0), f64(0, 0, 1)]),
    "clip_by_value_at_bounds": (lambda tf, x: tf.clip_by_value(x, 0.0, 1.0), (f64(-1, 0, 0.5, 1, 2),),
                                [f64(0, 1, 1, 1, 0)]),
    "relu_kink": (lambda tf, x: tf.nn.relu(x), (f64(-1, 0, 2),), [f64(0, 0, 1)]),
    "relu6_kinks": (lambda tf, x: tf.nn.relu6(x), (f64(-1, 0, 3, 6, 7),), [f64(0, 0, 1, 0, 0)]),
    "elu_at_zero": (lambda tf, x: tf.nn.elu(x), (f64(-1, 0, 1),), [f64(np.exp(-1), 1, 1)]),
    "abs_at_zero": (lambda tf, x: tf.abs(x), (f64(-1, 0, 1),), [f64(-1, 0, 1)]),
    "sign_is_flat": (lambda tf, x: tf.sign(x), (f64(-1, 0, 1),), [f64(0, 0, 0)]),
    "floor_none": (lambda tf, x: tf.floor(x), (f64(1.5, -0.5),), [None]),
    "ceil_none": (lambda tf, x: tf.math.ceil(x), (f64(1.5, -0.5),), [None]),
    "round_none": (lambda tf, x: tf.round(x), (f64(1.5, -0.4),), [None]),
    "floordiv_none": (lambda tf, x, y: tf.math.floordiv(x, y), (f64(3, -3), f64(2, 2)), [None, None]),
    "truncatediv_none": (lambda tf, x, y: tf.truncatediv(x, y), (f64(3, -3), f64(2, 2)), [None, None]),
    "floormod": (lambda tf, x, y: tf.math.floormod(x, y), (f64(3.5, -3.5, 7), f64(2, 2, -3)),
                 [f64(1, 1, 1), f64(-1, 2, 3)]),
    "pow_at_zero_base": (lambda tf, x, y: tf.pow(x, y), (f64(0, 0, 0, 0, 2, -2), f64(2, 0, -1, 0.5, 3, 2)),
                         [f64(0, NAN, -INF, INF, 12, -4), f64(0, 0, NAN, 0, 8 * np.log(2), 0)]),
    "sqrt_at_zero": (lambda tf, x: tf.sqrt(x), (f64(0, 4),), [f64(INF, 0.25)]),
    "reciprocal_at_zero": (lambda tf, x: tf.math.reciprocal(x), (f64(0, 2),), [f64(-INF, -0.25)]),
    "log_at_zero": (lambda tf, x: tf.math.log(x), (f64(0, 2),), [f64(INF, 0.5)]),
    "div_by_zero": (lambda tf, x, y: tf.divide(x, y), (f64(1, 0), f64(0, 0)), [f64(INF, INF), f64(-INF, NAN)]),
    "reduce_max_ties_split": (lambda tf, x: tf.reduce_max(x, axis=1), (np.array([[1.0, 3, 3], [2, 2, 2]]),),
                              [np.array([[0, 0.5, 0.5], [1 / 3, 1 / 3, 1 / 3]])]),
    "reduce_min_ties_split": (lambda tf, x: tf.reduce_min(x), (f64(1, 1, 3),), [f64(0.5, 0.5, 0)]),
    "reduce_prod_zeros": (lambda tf, x: tf.reduce_prod(x, axis=1),
                          (np.array([[2.0, 3, 4], [0, 3, 4], [0, 0, 4]]),),
                          [np.array([[12.0, 8, 6], [12, 0, 0], [0, 0, 0]])]),
    "softplus_saturates": (lambda tf, x: tf.nn.softplus(x), (f64(-5, 0, 40),), [f64(1 / (1 + np.exp(5)), 0.5, 1)]),
    "where_condition_none": (lambda tf, c, x, y: tf.where(c > 0, x, y),
                             (f64(1, -1), f64(1, 2), f64(3, 4)), [None, f64(1, 0), f64(0, 1)]),
    "cast_through_int_none": (lambda tf, x: tf.cast(tf.cast(x, tf.int32), tf.float64), (f64(1.5),), [None]),
    "argmax_none": (lambda tf, x: tf.cast(tf.argmax(x), tf.float64), (f64(1, 3, 2),), [None]),
    "cumsum_exclusive_reverse": (lambda tf, x: tf.cumsum(x * x, exclusive=True, reverse=True), (f64(1, 2, 3),),
                                 [f64(0, 4, 12)]),
    "gather_repeated_indices": (lambda tf, p: tf.gather(p, [2, 0, 2], axis=1), (_X23,),
                                [np.array([[1.0, 0, 2], [1, 0, 2]])]),
    "gather_batch_dims": (lambda tf, p, i: tf.gather(p, i, axis=1, batch_dims=1), (_X23, i32([0, 0], [2, 1])),
                          [np.array([[2.0, 0, 0], [0, 1, 1]])]),
    "segment_sum_drops_negative_ids": (lambda tf, d, s: tf.math.unsorted_segment_sum(d * d, s, 2),
                                       (f64(1, 2, 3), i32(1, -1, 1)), [f64(2, 0, 6)]),
    "one_hot_times_x": (lambda tf, i, x: tf.one_hot(i, 3, dtype=tf.float64) * x, (i32(0, 2), f64(1, 2, 3)),
                        [f64(1, 0, 1)]),
    "pad_reflect": (lambda tf, x: tf.pad(x, [[1, 1], [2, 0]], mode="REFLECT"), (_X23,),
                    [np.array([[2.0, 4, 4], [2, 4, 4]])]),
    "pad_symmetric": (lambda tf, x: tf.pad(x, [[0, 2], [1, 3]], mode="SYMMETRIC"), (_X23,),
                      [np.array([[6.0, 4, 4], [6, 4, 4]])]),
    "reverse_strided": (lambda tf, x: x[::-2] * x[1::2], (f64(1, 2, 3, 4),), [f64(0, 8, 0, 4)]),
    "tile": (lambda tf, x: tf.tile(x, [2, 3]), (_X23,), [np.full((2, 3), 6.0)]),
    "split_unused_piece": (lambda tf, x: tf.split(x, [1, 2], axis=1)[1], (_X23,), [np.array([[0.0, 1, 1]] * 2)]),
}


def _assert_same(got: list[Any], want: list[Any], what: str) -> None:
    assert len(got) == len(want), what
    for k, (g, w) in enumerate(zip(got, want)):
        if w is None or g is None:
            assert g is None and w is None, f"{what}, argument {k}: {g} != {w}"
            continue
        np.testing.assert_allclose(g, np.asarray(w, np.float64), rtol=1e-12, atol=1e-300,
                                   err_msg=f"{what}, argument {k}")


@pytest.mark.parametrize("name", sorted(CASES))
def test__convention__popjit_gives_tensorflows_gradient(name: str) -> None:
    fn, args, expected = CASES[name]
    _assert_same(_gradients(ptf, fn, args), expected, name)


@pytest.mark.parametrize("name", sorted(CASES))
def test__convention__is_tensorflows_own(name: str) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    real = pytest.importorskip("tensorflow")
    fn, args, expected = CASES[name]
    _assert_same(_gradients(real, fn, args), expected, f"TensorFlow {real.__version__}: {name}")


# ----------------------------------------------------------------------------------------------
# popjit's own conventions (TensorFlow's CPU kernels raise for these inputs)


def test__gather__out_of_range_indices_send_gradients_to_the_clamped_position() -> None:
    grads = _gradients(ptf, lambda tf, p: tf.gather(p, [-3, 1, 9]), (f64(10, 20, 30),))
    np.testing.assert_array_equal(grads[0], [1.0, 1.0, 1.0])


def test__unsorted_segment_sum__drops_ids_past_the_end_and_their_gradient() -> None:
    data, ids = f64(1, 2, 3, 4), i32(0, 3, 1, 2)
    np.testing.assert_array_equal(ptf.math.unsorted_segment_sum(data, ids, 2).numpy(), [1.0, 3.0])
    grads = _gradients(ptf, lambda tf, d, s: tf.math.unsorted_segment_sum(d, s, 2) * f64(5, 7), (data, ids))
    np.testing.assert_array_equal(grads[0], [5.0, 0.0, 7.0, 0.0])


@pytest.mark.parametrize("begin", [-2, 1, 3, 9])
def test__dynamic_slice__gradient_lands_at_the_clamped_start(begin: int) -> None:
    def fn(tf: Any, x: Any, b: Any) -> Any:
        return apply_op("dynamic_slice", [x, b], size=(2,)) * f64(1, 2)

    start = int(np.clip(begin, 0, 3))
    expected = np.zeros(5)
    expected[start:start + 2] = [1.0, 2.0]
    grads = _gradients(ptf, fn, (f64(0, 1, 2, 3, 4), i32(begin)))
    np.testing.assert_array_equal(grads[0], expected)


def test__dynamic_update_slice__out_of_range_begin_clamps_in_the_gradient() -> None:
    def fn(tf: Any, x: Any, u: Any, b: Any) -> Any:
        return apply_op("dynamic_update_slice", [x, u, b]) * f64(1, 2, 3, 4)

    grads = _gradients(ptf, fn, (f64(0, 0, 0, 0), f64(5, 6), i32(7)))
    np.testing.assert_array_equal(grads[0], [1.0, 2.0, 0.0, 0.0])
    np.testing.assert_array_equal(grads[1], [3.0, 4.0])
