"""Autograph: Python control flow on tensors becomes graph loops and conditionals.

Most tests trace a function, run its graph with the graph interpreter (no Numba compile, so the
file stays fast) and compare with the same Python function run eagerly (op by op on NumPy).
A few run end to end through the compiler.
"""

from __future__ import annotations

import functools
import inspect
import threading
import time

import numpy as np
import pytest

import popjit.tensorflow as tf
from popjit import config
from popjit.frontend import autograph, nest
from popjit.frontend.autograph import LoopVariableError, UnsupportedControlFlowError, calls
from popjit.graph.interpret import interpret as run_graph
from tests.helpers import assert_close

rng = np.random.default_rng(7)


def _f32(*shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def _graph(fn, *args):
    return tf.function(fn).get_concrete_function(*args).graph


def _run_traced(fn, *args) -> list[np.ndarray]:
    """``fn`` traced by tf.function, its graph run by the graph interpreter."""
    outs, _ = run_graph(_graph(fn, *args), list(args))
    return outs


def _run_eager(fn, *args) -> list[np.ndarray]:
    """``fn`` run as plain Python on eager tensors (each op's NumPy reference); Python numbers it
    returns take TensorFlow's dtypes, as a traced function's outputs do."""
    eager_args = [tf.constant(a) if isinstance(a, (np.ndarray, np.generic)) else a for a in args]
    return [tf.convert_to_tensor(x).numpy() for x in nest.flatten(fn(*eager_args))]


def _assert_matches_eager(fn, *args) -> None:
    traced, eager = _run_traced(fn, *args), _run_eager(fn, *args)
    assert len(traced) == len(eager)
    for t, e in zip(traced, eager):
        assert_close(t, e)


def _ops(graph) -> list:
    return [node.op for node in graph.walk()]


def _nodes(graph, op: str) -> list:
    return [node for node in graph.walk() if node.op == op]


def _line_of(fn, snippet: str) -> int:
    """The line number of the first line of ``fn``'s source that contains ``snippet``."""
    lines, start = inspect.getsourcelines(fn)
    return start + next(k for k, line in enumerate(lines) if snippet in line)


# -- loops with carried values ----------------------------------------------------------------


def accumulate(x, n):
    acc = tf.zeros_like(x)
    total = 0.0
    for i in tf.range(n):
        acc = acc * 0.5 + tf.cast(i, tf.float32) * x
        total += tf.reduce_sum(acc)
    return acc, total


@pytest.mark.parametrize("n", [5, np.int32(5), np.int32(0)], ids=["python-bound", "tensor-bound", "zero-trips"])
def test__for_tf_range__carried_values__match_eager(n):
    _assert_matches_eager(accumulate, _f32(4), n)


def start_limit_delta(x, start, limit):
    acc = x
    for i in tf.range(start, limit, 3):
        acc = acc + tf.cast(i, tf.float32)
    for i in tf.range(limit, start, -2):
        acc = acc * 0.5 - tf.cast(i, tf.float32)
    return acc


@pytest.mark.parametrize("bounds", [(2, 11), (np.int32(2), np.int32(11))], ids=["static", "tensor"])
def test__for_tf_range__start_limit_delta__match_eager(bounds):
    _assert_matches_eager(start_limit_delta, _f32(3), *bounds)


def test__for_tf_range__static_bounds__one_while_with_trip_count():
    def f(x):
        for _ in tf.range(2, 17, 3):
            x = x * 0.5
        return x

    graph = _graph(f, _f32(3))
    (loop,) = _nodes(graph, "while")
    assert loop.attrs["trip_count"] == 5
    assert "iota" not in _ops(graph)


def test__for_tf_range__tensor_bound__while_without_trip_count():
    graph = _graph(accumulate, _f32(4), np.int32(5))
    (loop,) = _nodes(graph, "while")
    assert "trip_count" not in loop.attrs


def test__for_range_builtin__tensor_bound__graph_loop():
    def f(x, n):
        for i in range(n):
            x = x + tf.cast(i, tf.float32)
        return x

    assert len(_nodes(_graph(f, _f32(2), np.int32(4)), "while")) == 1
    _assert_matches_eager(f, _f32(2), np.int32(4))


def test__for_over_range_tensor__uses_its_bounds():
    def f(x):
        r = tf.range(1, 10, 4)
        for i in r:
            x = x * tf.cast(i, tf.float32)
        return x

    graph = _graph(f, _f32(2))
    (loop,) = _nodes(graph, "while")
    assert loop.attrs["trip_count"] == 3
    assert "gather" not in _ops(graph)
    _assert_matches_eager(f, _f32(2))


def test__for_over_tensor__counted_loop_gathering_rows():
    def f(x):
        s = tf.zeros([x.shape[1]])
        for row in x:
            s = s * 0.5 + row
        return s

    x = _f32(5, 3)
    graph = _graph(f, x)
    (loop,) = _nodes(graph, "while")
    assert loop.attrs["trip_count"] == 5
    assert "gather" in _ops(graph)
    _assert_matches_eager(f, x)


def test__for__carried_python_numbers_and_structures__match_eager():
    def f(x, n):
        count = 0
        state = {"h": x, "c": (tf.zeros_like(x), 1.0)}
        for _ in tf.range(n):
            h = tf.tanh(state["h"]) * state["c"][1]
            state = {"h": h, "c": (state["c"][0] + h, state["c"][1] * 0.5)}
            count += 1
        return state["c"][0], count

    _assert_matches_eager(f, _f32(3), np.int32(4))
    out_count = _run_traced(f, _f32(3), np.int32(4))[1]
    assert out_count.dtype == np.int32


class _Model:
    """A non-tensor object used inside a loop: it must pass through untouched."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, x):
        self.calls += 1
        return x * 2.0


def test__for__non_tensor_objects__pass_through_untouched():
    model = _Model()
    weights = [0.5, 0.25]

    def f(x, n):
        m = model
        for _ in tf.range(n):
            x = m(x) * weights[0] + weights[1]
            m = model  # rebinding to the same object is fine
        return x

    _graph(f, _f32(2), np.int32(3))
    assert model.calls == 1  # the body is traced once
    _assert_matches_eager(f, _f32(2), np.int32(3))


def test__for_tf_range__assigned_variable__runs_natively():
    v = tf.Variable(1.0)

    def f(x):
        for _ in tf.range(5):
            v.assign_add(tf.reduce_sum(x))
        return v.read_value()

    (loop,) = _nodes(_graph(f, np.ones(3, np.float32)), "while")
    assert loop.attrs["trip_count"] == 5
    out = tf.function(f, jit_compile=True)(np.ones(3, np.float32))
    assert float(out.numpy()) == 16.0
    assert float(v.numpy()) == 16.0


# -- nesting, while, if -----------------------------------------------------------------------


def test__nested_loops__inner_bound_depends_on_outer__match_eager():
    def f(x, n):
        acc = tf.zeros_like(x)
        for i in tf.range(n):
            for j in tf.range(i):
                acc = acc + tf.cast(i * j, tf.float32) * x
            acc = acc * 0.9
        return acc

    graph = _graph(f, _f32(3), np.int32(4))
    assert len(_nodes(graph, "while")) == 2
    _assert_matches_eager(f, _f32(3), np.int32(4))


def if_in_loop(x, n):
    acc = x
    for i in tf.range(n):
        if tf.reduce_sum(acc) > 2.0:
            acc = acc - 1.0
        elif i % 2 == 0:
            acc = acc * 1.5
        else:
            acc = acc + 0.5
    return acc


def test__if_in_loop__tensor_predicates__match_eager():
    graph = _graph(if_in_loop, _f32(3), np.int32(6))
    assert len(_nodes(graph, "if")) == 2  # if + elif
    for x in (_f32(3), np.full(3, 3.0, np.float32)):
        _assert_matches_eager(if_in_loop, x, np.int32(6))


def loop_in_if(x, n):
    if tf.reduce_sum(x) > 0:
        for _ in tf.range(n):
            x = x * 0.5
        y = x + 1.0
    else:
        y = -x
    return y


@pytest.mark.parametrize("x", [np.ones(3, np.float32), -np.ones(3, np.float32)], ids=["true", "false"])
def test__loop_in_if__match_eager(x):
    graph = _graph(loop_in_if, x, np.int32(3))
    assert len(_nodes(graph, "if")) == 1 and len(_nodes(graph, "while")) == 1
    _assert_matches_eager(loop_in_if, x, np.int32(3))


def collatz_steps(n):
    steps = 0
    while n != 1:
        if n % 2 == 0:
            n = n // 2
        else:
            n = 3 * n + 1
        steps += 1
    return steps


def test__while_tensor_condition__match_eager_and_run_natively():
    n = np.int32(27)
    assert len(_nodes(_graph(collatz_steps, n), "while")) == 1
    _assert_matches_eager(collatz_steps, n)
    assert int(tf.function(collatz_steps, jit_compile=True)(n).numpy()) == 111


def test__python_control_flow__stays_python_and_unrolls():
    def f(x):
        for i in range(3):
            x = x * 2.0 + i
        k = 0
        while k < 2:
            x = x - 1.0
            k += 1
        for w in [0.5, 0.25]:
            x = x * w
        if k == 2 and not k > 5:
            x = x + 1.0
        return x if k else -x

    graph = _graph(f, _f32(3))
    assert not {"while", "if"} & set(_ops(graph))
    _assert_matches_eager(f, _f32(3))


def test__bool_operators_and_conditional_expression__on_tensors():
    def f(x):
        y = x
        if (tf.reduce_sum(x) > 0 and not tf.reduce_max(x) > 5.0) or tf.reduce_min(x) < -5.0:
            y = x * 3.0
        z = y * 2.0 if tf.reduce_mean(y) > 1.0 else y - 1.0
        return z

    for x in (np.ones(3, np.float32), -np.ones(3, np.float32), np.array([9.0, 1, 1], np.float32)):
        _assert_matches_eager(f, x)


# -- break, continue, return --------------------------------------------------------------------


def break_continue(x, n):
    acc = tf.zeros_like(x)
    for i in tf.range(n):
        if tf.cast(i, tf.float32) > 6.0:
            break
        if i % 3 == 0:
            continue
        acc = acc + tf.cast(i, tf.float32) * x
    else:
        acc = acc + 100.0
    return acc


@pytest.mark.parametrize("n", [np.int32(4), np.int32(12)], ids=["no-break", "break"])
def test__break_continue_else__in_tensor_loop__match_eager(n):
    _assert_matches_eager(break_continue, _f32(2), n)


def test__break__in_tensor_while__match_eager():
    def f(x):
        i = tf.constant(0)
        while i < 100:
            x = x * 1.5
            if tf.reduce_max(x) > 50.0:
                break
            i += 1
        return x, i

    _assert_matches_eager(f, np.ones(2, np.float32))


def sign_scale(x):
    if tf.reduce_sum(x) > 0:
        return x * 2.0
    elif tf.reduce_sum(x) < -10.0:
        return x * 0.0
    y = -x
    return y


@pytest.mark.parametrize("x", [np.ones(2, np.float32), -np.ones(2, np.float32), np.full(2, -9.0, np.float32)])
def test__return_in_final_if__tensor_predicates__match_eager(x):
    assert len(_nodes(_graph(sign_scale, x), "if")) == 2
    _assert_matches_eager(sign_scale, x)


def test__return_in_python_loop__stays_python():
    def first_positive(x, values):
        for k, v in enumerate(values):
            if v > 0:
                return x * float(k)
        return x

    _assert_matches_eager(first_positive, _f32(2), [-1, 2, 3])


# -- user functions, methods, closures ----------------------------------------------------------


def _damp(v, limit):
    if tf.reduce_max(v) > limit:
        v = v * 0.5
    return v


def test__called_user_functions__converted_recursively():
    def f(x, n):
        for _ in tf.range(n):
            x = _damp(x * 3.0, limit=4.0)
        return x

    graph = _graph(f, _f32(3), np.int32(4))
    (loop,) = _nodes(graph, "while")
    assert [n.op for r in loop.regions for n in r.walk() if n.op == "if"] == ["if"]
    _assert_matches_eager(f, _f32(3), np.int32(4))


class _Stepper:
    def step(self, x, n):
        return tf.zeros_like(x)


class _Accumulator(_Stepper):
    def __init__(self, scale: float) -> None:
        self.scale = scale

    def step(self, x, n):
        acc = super().step(x, n)
        for _ in tf.range(n):
            acc = self._update(acc, x)
            acc = super().step(acc, n) + acc  # zero-argument super() inside a loop body
        return acc

    def _update(self, acc, x):
        if tf.reduce_sum(acc) > 5.0:
            return acc - x
        return acc + self.scale * x

    @tf.function
    def traced(self, x, n):
        return self.step(x, n)


def test__methods__converted_with_self():
    acc, x, n = _Accumulator(2.0), np.ones(3, np.float32), np.int32(6)
    graph = acc.traced.get_concrete_function(x, n).graph
    assert len(_nodes(graph, "while")) == 1 and len(_nodes(graph, "if")) == 1
    (out,), _ = run_graph(graph, [x, n])
    assert_close(out, acc.step(tf.constant(x), tf.constant(n)).numpy())


class _Halver:
    def __call__(self, x):
        if tf.reduce_sum(x) > 1.0:
            x = x * 0.5
        return x


def test__callable_objects_converted_and_do_not_convert_respected():
    halve = _Halver()

    @autograph.do_not_convert
    def as_written(x):
        return x + 1.0

    def f(x):
        return as_written(halve(x))

    assert len(_nodes(_graph(f, _f32(2)), "if")) == 1
    assert autograph.convert(as_written) is as_written
    _assert_matches_eager(f, np.ones(2, np.float32))


def test__python_loop_target__keeps_its_last_value():
    def f(x):
        for i in range(3):  # noqa: B007
            x = x + 1.0
        return x * i

    _assert_matches_eager(f, _f32(2))


def test__closures_defaults_keywords_decorators__preserved():
    def decorate(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            return fn(*args, **kwargs)

        return wrapper

    def make(scale):
        @decorate
        def f(x, n, *, offset=1.0):
            for _ in tf.range(n):
                x = x * scale + offset
            return x

        return f

    f = make(0.5)
    graph = tf.function(f).get_concrete_function(np.ones(2, np.float32), np.int32(3), offset=2.0).graph
    assert len(_nodes(graph, "while")) == 1
    (out,), _ = run_graph(graph, [np.ones(2, np.float32), np.int32(3), 2.0])
    assert_close(out, np.full(2, 3.625, np.float32))  # ((1 * .5 + 2) * .5 + 2) * .5 + 2


def test__converted_code__keeps_file_and_line_numbers():
    converted = autograph.convert(accumulate)
    assert converted is not accumulate
    assert converted.__code__.co_filename == accumulate.__code__.co_filename
    assert converted.__code__.co_firstlineno == accumulate.__code__.co_firstlineno
    assert "ag__.for_stmt(" in autograph.to_code(accumulate)


def test__unconvertible__falls_back_to_the_original():
    namespace: dict = {}
    exec("def no_source(x):\n    return x\n", namespace)
    no_source = namespace["no_source"]
    lam = lambda x: x  # noqa: E731
    for fn in (len, lam, no_source, np.sum):
        assert autograph.convert(fn) is fn
    with pytest.raises(ValueError, match="source is not available"):
        autograph.to_code(no_source)


def test__debug_level_2__prints_converted_code(capsys):
    def fresh(x):
        while tf.reduce_sum(x) < 10.0:
            x = x + 1.0
        return x

    with config.context(DEBUG=2):
        autograph.convert(fresh)
    err = capsys.readouterr().err
    assert "autograph" in err and "ag__.while_stmt(" in err


# -- errors name the variable and the user's line -----------------------------------------------


def test__name_defined_only_inside_tensor_loop__error_names_it_and_line():
    def f(x, n):
        for i in tf.range(n):
            y = x * tf.cast(i, tf.float32)
        return y

    with pytest.raises(LoopVariableError) as e:
        _graph(f, _f32(2), np.int32(3))
    assert "'y'" in str(e.value) and f"line {_line_of(f, 'for i in')}" in str(e.value)


def test__name_defined_in_one_tensor_branch__error_names_it_and_line():
    def f(x):
        if tf.reduce_sum(x) > 0:
            y = x * 2.0
        return y

    with pytest.raises(LoopVariableError) as e:
        _graph(f, _f32(2))
    assert "'y'" in str(e.value) and "true branch" in str(e.value)
    assert f"line {_line_of(f, 'if tf.')}" in str(e.value)


def test__carried_value_changes_shape__error_names_it_and_line():
    def f(x, n):
        acc = x
        for _ in tf.range(n):
            acc = tf.concat([acc, x], axis=0)
        return acc

    with pytest.raises(LoopVariableError) as e:
        _graph(f, _f32(3), np.int32(2))
    msg = str(e.value)
    assert "'acc'" in msg and "f32[3]" in msg and "f32[6]" in msg
    assert f"line {_line_of(f, 'for _ in')}" in msg


def test__shape_error_inside_loop_body__names_the_body_line():
    def f(x, n):
        for _ in tf.range(n):
            x = x + tf.ones([4])
        return x

    with pytest.raises(Exception) as e:
        _graph(f, _f32(3), np.int32(2))
    assert f"line {_line_of(f, 'tf.ones([4])')}" in str(e.value)


def test__return_inside_tensor_loop__unsupported_error_names_statement_and_line():
    def f(x, n):
        for _ in tf.range(n):
            if tf.reduce_sum(x) > 0:
                return x
        return -x

    with pytest.raises(UnsupportedControlFlowError) as e:
        _graph(f, _f32(2), np.int32(3))
    assert f"`return` (line {_line_of(f, 'return x')})" in str(e.value)
    assert f"line {_line_of(f, 'for _ in')}" in str(e.value)


def test__return_inside_tensor_if_in_python_loop__unsupported_error():
    def f(x):
        for _ in range(2):
            if tf.reduce_sum(x) > 0:
                return x
            x = x - 1.0
        return x

    with pytest.raises(UnsupportedControlFlowError, match="`return`"):
        _graph(f, _f32(2))


def test__while_condition_becoming_a_tensor__rest_runs_as_graph_loop():
    def f(x):
        while True:
            x = x * 2.0
            if tf.reduce_sum(x) > 100.0:
                break
        i = 0
        while i < 3:
            i = i + tf.constant(1)
        return x * tf.cast(i, tf.float32)

    graph = _graph(f, np.ones(2, np.float32))
    assert len(_nodes(graph, "while")) == 2
    _assert_matches_eager(f, np.ones(2, np.float32))


def test__tensor_break_in_python_loop__error():
    def f(x):
        for _ in range(3):
            if tf.reduce_sum(x) > 0:
                break
            x = x - 1.0
        return x

    with pytest.raises(UnsupportedControlFlowError, match="`break` that depends on a tensor"):
        _graph(f, _f32(2))


def test__name_left_unassigned_by_python_branch__unbound_local_error_names_it():
    def f(x, flag):
        if flag:
            y = x
        return y

    _assert_matches_eager(f, _f32(2), True)
    with pytest.raises(UnboundLocalError) as e:
        _graph(f, _f32(2), False)
    assert "'y'" in str(e.value) and f"line {_line_of(f, 'return y')}" in str(e.value)


def test__threads_converting_one_function_at_once__convert_it_once(monkeypatch) -> None:
    """Conversion holds a lock (CPython 3.11's AST compiler is not thread-safe): eight threads that
    first call one function together get one converted code object, made once."""
    def branchy(x):
        if x > 0:
            return x
        return -x

    made: list[int] = []
    transform = calls._transform

    def slow_transform(fn):  # why: holds each conversion long enough for the other threads to arrive
        made.append(1)
        time.sleep(0.05)
        return transform(fn)

    monkeypatch.setattr(calls, "_transform", slow_transform)
    start = threading.Barrier(8)
    entries: list[object] = [None] * 8

    def convert(k: int) -> None:
        start.wait()
        entries[k] = calls._converted_code(branchy)

    threads = [threading.Thread(target=convert, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(made) == 1, "one conversion"
    assert not isinstance(entries[0], str) and all(e is entries[0] for e in entries)
