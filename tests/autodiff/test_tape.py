"""``tf.GradientTape`` semantics, as TensorFlow defines them.

Persistent and one-shot tapes, ``watch``, ``watch_accessed_variables``, unconnected and integer
sources, ``stop_gradient``, ``tf.custom_gradient`` (input and variable gradients), nested tapes
(higher derivatives), variables read several times and assigned while recording. Most run both
eagerly and inside ``tf.function(jit_compile=True)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import popjit.tensorflow as tf

MODES = ["eager", "compiled"]


def run(mode: str, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` eagerly or compiled; results as NumPy (None stays None)."""
    out = fn(*args) if mode == "eager" else tf.function(fn, jit_compile=True)(*args)
    return tf.nest.map_structure(lambda t: None if t is None else np.asarray(t), out)


def x3() -> Any:
    return tf.constant(np.array([1.0, -2.0, 3.0], np.float32))


@pytest.mark.parametrize("mode", MODES)
def test__persistent_tape__gives_several_gradients(mode: str) -> None:
    def fn(x: Any) -> Any:
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(x)
            y = x * x
            z = y * x
        return tape.gradient(y, x), tape.gradient(z, x), tape.gradient(z, y)

    dy, dz, dzy = run(mode, fn, x3())
    x = x3().numpy()
    np.testing.assert_allclose(dy, 2 * x)
    np.testing.assert_allclose(dz, 3 * x * x)
    np.testing.assert_allclose(dzy, x)


def test__one_shot_tape__raises_on_second_use() -> None:
    x = x3()
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = x * x
    tape.gradient(y, x)
    with pytest.raises(RuntimeError, match="non-persistent"):
        tape.gradient(y, x)


@pytest.mark.parametrize("mode", MODES)
def test__watch__makes_a_constant_a_source(mode: str) -> None:
    def fn(x: Any) -> Any:
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = x * x
            z = y * 2.0
        return tape.gradient(z, [x, y])

    gx, gy = run(mode, fn, x3())
    np.testing.assert_allclose(gx, 4 * x3().numpy())
    np.testing.assert_allclose(gy, [2.0, 2.0, 2.0])


@pytest.mark.parametrize("mode", MODES)
def test__unwatched_constant__gets_no_gradient(mode: str) -> None:
    """TensorFlow records nothing about a tensor nobody watched: its gradient, and that of tensors
    computed from it, is None."""

    def fn(x: Any) -> Any:
        with tf.GradientTape() as tape:
            y = x * x
            z = y * 2.0
        return tape.gradient(z, [x, y])

    assert run(mode, fn, x3()) == [None, None]


@pytest.mark.parametrize("mode", MODES)
def test__watch_accessed_variables_false__only_watched_variables_get_gradients(mode: str) -> None:
    v, w = tf.Variable(2.0), tf.Variable(3.0)

    def fn() -> Any:
        with tf.GradientTape(watch_accessed_variables=False) as tape:
            tape.watch(w)
            y = v * w
        return tape.gradient(y, [v, w])

    gv, gw = run(mode, fn)
    assert gv is None
    np.testing.assert_allclose(gw, 2.0)


def test__watched_variables__lists_read_variables_in_order() -> None:
    v, w, u = tf.Variable(2.0), tf.Variable(3.0), tf.Variable(4.0)
    with tf.GradientTape() as tape:
        _ = w * v
    assert [x is y for x, y in zip(tape.watched_variables(), (w, v))] == [True, True]
    assert all(x is not u for x in tape.watched_variables())


@pytest.mark.parametrize("mode", MODES)
def test__unconnected_sources__give_none_or_zeros(mode: str) -> None:
    def fn(x: Any, other: Any) -> Any:
        with tf.GradientTape(persistent=True) as tape:
            tape.watch([x, other])
            y = tf.reduce_sum(x * 2.0)
        none = tape.gradient(y, [x, other])
        zero = tape.gradient(y, [x, other], unconnected_gradients=tf.UnconnectedGradients.ZERO)
        return none, zero

    other = tf.constant(np.ones((2, 2), np.float32))
    (gx, gnone), (gx2, gzero) = run(mode, fn, x3(), other)
    np.testing.assert_allclose(gx, [2.0, 2.0, 2.0])
    np.testing.assert_allclose(gx2, gx)
    assert gnone is None
    assert gzero.shape == (2, 2) and gzero.dtype == np.float32 and not gzero.any()


@pytest.mark.parametrize("mode", MODES)
def test__integer_sources__get_no_gradient(mode: str) -> None:
    def fn(i: Any, x: Any) -> Any:
        with tf.GradientTape() as tape:
            tape.watch([i, x])
            y = tf.cast(i, tf.float32) * x
        return tape.gradient(y, [i, x])

    gi, gx = run(mode, fn, tf.constant(np.array([1, 2, 3], np.int32)), x3())
    assert gi is None
    np.testing.assert_allclose(gx, [1.0, 2.0, 3.0])


@pytest.mark.parametrize("mode", MODES)
def test__stop_gradient__blocks(mode: str) -> None:
    def fn(x: Any) -> Any:
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = x * tf.stop_gradient(x) + tf.stop_gradient(x * 5.0)
        return tape.gradient(y, x)

    np.testing.assert_allclose(run(mode, fn, x3()), x3().numpy())


@tf.custom_gradient
def _clipped_identity(x: Any) -> Any:
    def grad(dy: Any) -> Any:
        return tf.clip_by_value(dy, -0.5, 0.5)

    return tf.identity(x), grad


@pytest.mark.parametrize("mode", MODES)
def test__custom_gradient__replaces_the_input_gradient(mode: str) -> None:
    def fn(x: Any) -> Any:
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = _clipped_identity(x) * 3.0
        return tape.gradient(y, x)

    np.testing.assert_allclose(run(mode, fn, x3()), [0.5, 0.5, 0.5])


@pytest.mark.parametrize("mode", MODES)
def test__custom_gradient__gives_variable_gradients(mode: str) -> None:
    v = tf.Variable(np.array([2.0, 4.0], np.float32))

    @tf.custom_gradient
    def scaled(x: Any) -> Any:
        y = x * v

        def grad(dy: Any, variables: Any = None) -> Any:
            assert variables is not None and len(variables) == 1
            return dy * 10.0, [dy * 100.0]

        return y, grad

    def fn(x: Any) -> Any:
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = scaled(x)
        return tape.gradient(y, [x, v])

    gx, gv = run(mode, fn, tf.constant(np.array([1.0, 1.0], np.float32)))
    np.testing.assert_allclose(gx, [10.0, 10.0])
    np.testing.assert_allclose(gv, [100.0, 100.0])


@pytest.mark.parametrize("mode", MODES)
def test__nested_tapes__give_the_second_derivative(mode: str) -> None:
    """d²(x³)/dx² = 6x (the inner gradient is recorded by the outer tape)."""

    def fn(x: Any) -> Any:
        with tf.GradientTape() as outer:
            outer.watch(x)
            with tf.GradientTape() as inner:
                inner.watch(x)
                y = x * x * x
            dy = inner.gradient(y, x)
        return dy, outer.gradient(dy, x)

    first, second = run(mode, fn, x3())
    x = x3().numpy()
    np.testing.assert_allclose(first, 3 * x * x)
    np.testing.assert_allclose(second, 6 * x)


def test__nested_tapes__third_derivative_of_tanh() -> None:
    """Through tanh's rule (which uses its output): d³ tanh = -2 (1 - t²)(1 - 3t²)."""
    x = tf.constant(np.array([0.3, -1.2]))
    with tf.GradientTape() as t3:
        t3.watch(x)
        with tf.GradientTape() as t2:
            t2.watch(x)
            with tf.GradientTape() as t1:
                t1.watch(x)
                y = tf.tanh(x)
            d1 = t1.gradient(y, x)
        d2 = t2.gradient(d1, x)
    d3 = t3.gradient(d2, x).numpy()
    t = np.tanh(x.numpy())
    np.testing.assert_allclose(d3, -2 * (1 - t**2) * (1 - 3 * t**2), rtol=1e-12)


@pytest.mark.parametrize("mode", MODES)
def test__variable_read_several_times__gradients_add_up(mode: str) -> None:
    v = tf.Variable(np.array([2.0, -1.0], np.float32))

    def fn() -> Any:
        with tf.GradientTape() as tape:
            y = tf.reduce_sum(v * v + v) + tf.reduce_sum(v.read_value()) * 3.0
        return tape.gradient(y, v)

    np.testing.assert_allclose(run(mode, fn), 2 * v.numpy() + 4.0)


def _assign_inside_tape(v: Any, x: Any) -> Any:
    """As TensorFlow: each read is its own source; an assignment does not carry gradients from the
    values it was computed from."""
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        v.assign(v * 2.0)  # v: 2 -> 4; this read feeds only the assignment
        y = v * 3.0
        v.assign_add(x)  # v: 4 -> 9
        w = v * v
    return tape.gradient(y, v), tape.gradient(w, v), tape.gradient(w, x)


def test__variable_assigned_inside_the_tape__eager() -> None:
    gy, gw, gx = _assign_inside_tape(tf.Variable(2.0), tf.constant(5.0))
    assert float(gy) == 3.0 and float(gw) == 18.0 and gx is None


def test__variable_assigned_inside_the_tape__compiled() -> None:
    v = tf.Variable(2.0)
    gy, gw, gx = run("compiled", lambda x: _assign_inside_tape(v, x), tf.constant(5.0))
    assert float(gy) == 3.0 and float(gw) == 18.0 and gx is None


@pytest.mark.parametrize("mode", MODES)
def test__gradient__of_several_targets_and_nested_sources(mode: str) -> None:
    def fn(x: Any, y: Any) -> Any:
        with tf.GradientTape() as tape:
            tape.watch([x, y])
            a, b = x * y, x + y
        return tape.gradient([a, b], {"x": x, "pair": (y, x)}, output_gradients=[tf.ones_like(a) * 2.0, None])

    x, y = x3(), tf.constant(np.array([4.0, 5.0, 6.0], np.float32))
    grads = run(mode, fn, x, y)
    np.testing.assert_allclose(grads["x"], 2 * y.numpy() + 1)
    np.testing.assert_allclose(grads["pair"][0], 2 * x.numpy() + 1)
    np.testing.assert_allclose(grads["pair"][1], grads["x"])


def test__stop_recording__ops_inside_are_not_differentiated() -> None:
    x = x3()
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = x * 2.0
        with tape.stop_recording():
            z = y * y
        w = y + tf.stop_gradient(z)
    np.testing.assert_allclose(tape.gradient(w, x).numpy(), [2.0, 2.0, 2.0])


def test__op_without_a_rule__raises_naming_it() -> None:
    """An op reached by a cotangent with no rule is an UnimplementedError that names it."""
    from popjit.autodiff.backprop import Entry, vjp_rule
    from popjit.errors import UnimplementedError

    with pytest.raises(UnimplementedError, match="'infeed_dequeue'"):
        vjp_rule(Entry("infeed_dequeue", [], [], {}))
