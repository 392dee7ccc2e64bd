"""Every gradient rule against central finite differences, and the rules' coverage of the registry.

Gradients come from ``tf.GradientTape`` run eagerly in float64 (each op's NumPy reference), the
finite differences from the same eager forward pass; both are vector-Jacobian products with fixed
pseudo-random output cotangents. Hypothesis draws the shapes (size-1 axes and broadcasting
included), the static parameters and the values (kept away from kinks and jumps; those points are
pinned by ``test_conventions``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import popjit.tensorflow as tf
from popjit.autodiff.backprop import vjp_rule
from popjit.frontend.gradient_tape import GRAD_OPS
from popjit.ops import all_ops, registry
from tests.autodiff.rules import (
    NOT_DIFFERENTIABLE,
    OWNED_ELSEWHERE,
    ROWS,
    Row,
    cotangents_for,
    differentiable_ops,
    numeric_gradients,
    ops_with_rows,
    outputs_of,
    tape_gradients,
    tensors,
)


def _check_row(row: Row, data: Any) -> None:
    case = data.draw(row.cases, label="case")
    cts = cotangents_for(outputs_of(case.fn(*tensors(case.args))))
    grads = tape_gradients(case, case.args, cts)
    numeric = numeric_gradients(case, case.args, cts, row.h)
    scale = max([1.0] + [float(np.max(np.abs(n), initial=0.0)) for n in numeric])
    for i, got, expected in zip(case.wrt, grads, numeric):
        if i in row.none:
            assert got is None, f"{row.name}: TensorFlow gives no gradient for argument {i}, got {got}"
            if not row.cut:
                np.testing.assert_allclose(expected, 0.0, atol=1e-9, err_msg=f"{row.name}: locally constant")
            continue
        assert got is not None, f"{row.name}: no gradient for argument {i}"
        assert got.shape == case.args[i].shape and got.dtype == np.float64, (got.shape, got.dtype)
        np.testing.assert_allclose(got, expected, rtol=max(row.tol, 1e-6), atol=max(row.tol, 1e-6) * scale,
                                   err_msg=f"{row.name}, argument {i}")


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
@given(data=st.data())
def test__rule__matches_central_differences(row: Row, data: Any) -> None:
    _check_row(row, data)


# ----------------------------------------------------------------------------------------------
# Coverage


def test__coverage__every_differentiable_op_has_a_rule_and_a_row() -> None:
    ops = differentiable_ops()
    no_rule = sorted(n for n in ops if registry.get(n).vjp is None)
    no_row = sorted(ops - ops_with_rows())
    assert not no_rule, f"differentiable ops without a vjp rule: {no_rule}"
    assert not no_row, f"differentiable ops without a row in tests/autodiff/rules.py: {no_row}"


def test__coverage__the_lists_name_registered_ops_once() -> None:
    names = set(all_ops())
    assert names >= NOT_DIFFERENTIABLE, NOT_DIFFERENTIABLE - names
    assert names >= OWNED_ELSEWHERE, OWNED_ELSEWHERE - names
    assert ops_with_rows() <= names, ops_with_rows() - names
    assert not (NOT_DIFFERENTIABLE & ops_with_rows()), "an op is both tested and listed as not differentiable"


def _int(values: Any) -> Any:
    return tf.constant(np.asarray(values, np.int32))


# One recorded application of each non-differentiable op (x, y: float tensors).
APPLICATIONS = {
    "equal": lambda x, y: tf.equal(x, y),
    "not_equal": lambda x, y: tf.not_equal(x, y),
    "less": lambda x, y: tf.less(x, y),
    "less_equal": lambda x, y: tf.less_equal(x, y),
    "greater": lambda x, y: tf.greater(x, y),
    "greater_equal": lambda x, y: tf.greater_equal(x, y),
    "logical_and": lambda x, y: tf.logical_and(x > 0, y > 0),
    "logical_or": lambda x, y: tf.logical_or(x > 0, y > 0),
    "logical_not": lambda x, y: tf.logical_not(x > 0),
    "bitwise_and": lambda x, y: tf.bitwise.bitwise_and(_int([1, 2]), _int([3, 3])),
    "bitwise_or": lambda x, y: tf.bitwise.bitwise_or(_int([1, 2]), _int([3, 3])),
    "bitwise_xor": lambda x, y: tf.bitwise.bitwise_xor(_int([1, 2]), _int([3, 3])),
    "invert": lambda x, y: tf.bitwise.invert(_int([1, 2])),
    "is_nan": lambda x, y: tf.math.is_nan(x),
    "is_finite": lambda x, y: tf.math.is_finite(x),
    "argmax": lambda x, y: tf.argmax(x),
    "argmin": lambda x, y: tf.argmin(x),
    "reduce_any": lambda x, y: tf.reduce_any(x > 0),
    "reduce_all": lambda x, y: tf.reduce_all(x > 0),
    "one_hot": lambda x, y: tf.one_hot(_int([0, 2]), 3),
    "iota": lambda x, y: tf.range(3),
    "eye": lambda x, y: tf.eye(2),
    "random_uniform": lambda x, y: tf.random.stateless_uniform([2], seed=[1, 2]),
    "random_normal": lambda x, y: tf.random.stateless_normal([2], seed=[1, 2]),
}


@pytest.mark.parametrize("name", sorted(NOT_DIFFERENTIABLE))
def test__not_differentiable__rule_returns_none_for_every_input(name: str) -> None:
    """TensorFlow registers these as NotDifferentiable: a cotangent reaching them stops (no error)."""
    rule = registry.get(name).vjp
    assert rule is not None, f"{name} needs a rule returning None (else a cotangent reaching it raises)"
    if name not in APPLICATIONS:  # constant, philox: no public application records them on a tape
        assert rule(GRAD_OPS, [tf.constant(1.0)], [tf.constant(1.0)], [tf.constant(1.0)]) == [None]
        return
    x, y = tf.constant(np.array([0.5, -1.0])), tf.constant(np.array([0.5, 2.0]))
    with tf.GradientTape() as tape:
        tape.watch([x, y])
        APPLICATIONS[name](x, y)
    entries = [e for e in tape._entries if e.op == name]
    assert entries, f"{name} was not recorded"
    for e in entries:
        cts = [tf.ones_like(o) for o in e.outputs]
        assert vjp_rule(e)(GRAD_OPS, e.inputs, e.outputs, cts, **e.attrs) == [None] * len(e.inputs)


def test__not_differentiable__bool_paths_cut_the_gradient() -> None:
    """``where(x > 0, x, 0)``: the comparison gives nothing, the selected branch gives 1."""
    x = tf.constant(np.array([0.5, -1.0, 2.0]))
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.where(x > 0, x, tf.zeros_like(x)) + tf.cast(tf.argmax(x), tf.float64)
    np.testing.assert_array_equal(tape.gradient(y, x).numpy(), [1.0, 0.0, 1.0])
