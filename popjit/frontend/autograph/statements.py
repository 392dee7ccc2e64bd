"""The statements converted code runs: ``for_stmt``, ``while_stmt``, ``if_stmt`` and ``if_exp``.

Each decides at trace time, from the values it sees, whether it is a graph loop or conditional
(its predicate or iterable is a tensor) or Python's own statement, and checks that what a graph
loop carries, or both branches of a graph conditional produce, has a fixed structure, shape and dtype.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from popjit import dtypes
from popjit.frontend import control_flow, gather_ops, math_ops, nest
from popjit.frontend.autograph.errors import LoopVariableError, UnsupportedControlFlowError
from popjit.frontend.autograph.runtime import (
    Undefined,
    _as_predicate,
    _Carry,
    _describe,
    _is_graph_value,
    _is_number,
    _Range,
    _state_fns,
)
from popjit.frontend.convert import convert_to_tensor
from popjit.frontend.tensor import Tensor
from popjit.frontend.tracing import current_trace
from popjit.frontend.variables import Variable
from popjit.source import SourceLoc, user_location, where

# -- loops ---------------------------------------------------------------------------------------


def for_stmt(iterable: Any, extra_test: Callable[[], Any] | None, body: Callable[[Any], None],
             get_state: Callable | None, set_state: Callable | None, names: Sequence[str]) -> None:
    """A ``for`` statement: a graph loop over a tensor or a tensor range, else a Python loop."""
    if current_trace() is not None:
        rng, item = _graph_iteration(iterable)
        if rng is not None:
            get, put = _state_fns(get_state, set_state)
            _traced_for(rng, item, extra_test, body, get, put, names, user_location(2))
            return
    _python_for(iterable, extra_test, body)


def _graph_iteration(iterable: Any) -> tuple[_Range | None, Callable[[Tensor], Any] | None]:
    """How a graph loop iterates over ``iterable``: its index range and the item for each index."""
    if isinstance(iterable, _Range):
        return iterable, None
    if isinstance(iterable, Variable):
        iterable = iterable.read_value()
    if not (isinstance(iterable, Tensor) and iterable.is_symbolic):
        return None, None
    if iterable.ndim == 0:
        raise TypeError(f"Cannot iterate over a scalar tensor{where(user_location(3))}")
    producer = iterable._sym.producer  # type: ignore[union-attr]
    if producer is not None and producer.op == "iota" and iterable.ndim == 1:
        # why: `r = tf.range(n); for i in r` needs no gather: the iota's own bounds drive the loop
        a, n = producer.attrs, iterable.shape[0]
        return _Range(a["start"], a["start"] + n * a["delta"], a["delta"], iterable.dtype), None
    t = iterable
    return _Range(0, t.shape[0], 1, dtypes.int32), (lambda i: _row(t, i))


def _row(t: Tensor, i: Tensor) -> Tensor:
    """``t[i]`` for a loop index ``i`` (never negative, so no wrap-around select)."""
    return gather_ops.gather(t, i, axis=0)


def _python_for(iterable: Any, extra_test: Callable[[], Any] | None, body: Callable[[Any], None]) -> None:
    it = iter(iterable)
    while extra_test is None or _python_flag(extra_test()):
        try:
            item = next(it)
        except StopIteration:
            return
        body(item)


def _python_flag(value: Any) -> bool:
    if _is_graph_value(value):
        raise UnsupportedControlFlowError(
            "A `break` that depends on a tensor cannot stop a Python `for` loop (one over a Python iterable, "
            "unrolled while tracing): iterate over tf.range(...) or a tensor so that it becomes a graph loop"
            f"{where(user_location(3))}"
        )
    return bool(value)


def _traced_for(rng: _Range, item: Callable[[Tensor], Any] | None, extra_test: Callable[[], Any] | None,
                body: Callable[[Any], None], get_state: Callable, set_state: Callable, names: Sequence[str],
                loc: SourceLoc | None) -> None:
    carry = _Carry(names, get_state(), "for", loc)

    def step(i: Tensor, *leaves: Any) -> list[Tensor]:
        set_state(carry.values(leaves))
        body(item(i) if item is not None else i)
        return carry.next_leaves(get_state())

    start, limit, delta = rng.tensors()
    trace = current_trace()
    # why: for_range counts up unless delta is a known negative constant
    if extra_test is None and start.dtype.is_integer and trace is not None and trace.constant_value(delta) is not None:
        out = control_flow.for_range(start, limit, delta, step, carry.init)
    else:
        out = _guarded_range(start, limit, delta, step, extra_test, carry, set_state)
    set_state(carry.values(out))


def _guarded_range(start: Tensor, limit: Tensor, delta: Tensor, step: Callable[..., list[Tensor]],
                   extra_test: Callable[[], Any] | None, carry: _Carry, set_state: Callable) -> list[Tensor]:
    """A range loop that also stops when ``extra_test()`` is false (``break``), or over floats."""
    trace = current_trace()
    d = trace.constant_value(delta) if trace is not None else None

    def in_range(i: Tensor) -> Tensor:
        if d is not None:
            return math_ops.less(i, limit) if d > 0 else math_ops.greater(i, limit)
        up = math_ops.logical_and(math_ops.greater(delta, 0), math_ops.less(i, limit))
        down = math_ops.logical_and(math_ops.less(delta, 0), math_ops.greater(i, limit))
        return math_ops.logical_or(up, down)

    def cond(i: Tensor, *leaves: Any) -> Tensor:
        go = in_range(i)
        if extra_test is not None:
            set_state(carry.values(leaves))
            go = math_ops.logical_and(go, extra_test())
        return go

    def body(i: Tensor, *leaves: Any) -> list[Tensor]:
        return [math_ops.add(i, delta), *step(i, *leaves)]

    return list(control_flow.while_loop(cond, body, [start, *carry.init])[1:])


def while_stmt(test: Callable[[], Any], body: Callable[[], None], get_state: Callable | None,
               set_state: Callable | None, names: Sequence[str]) -> None:
    """A ``while`` statement: a Python loop while its condition is a Python value, a graph loop from
    the first time it is a tensor.

    A condition that becomes a tensor after some iterations (``while True:`` with a ``break`` on a
    tensor, or a counter that becomes a tensor) leaves those iterations unrolled and runs the rest
    as a graph loop, which is what Python would have done.
    """
    loc = user_location(2)
    while True:
        value = _as_predicate(test())
        if _is_graph_value(value):
            _graph_while(test, body, *_state_fns(get_state, set_state), names, loc)
            return
        if not value:
            return
        body()


def _graph_while(test: Callable[[], Any], body: Callable[[], None], get: Callable, put: Callable,
                 names: Sequence[str], loc: SourceLoc | None) -> None:
    carry = _Carry(names, get(), "while", loc)

    def cond(*leaves: Any) -> Any:
        put(carry.values(leaves))
        return test()

    def step(*leaves: Any) -> list[Tensor]:
        put(carry.values(leaves))
        body()
        return carry.next_leaves(get())

    out = control_flow.while_loop(cond, step, list(carry.init))
    put(carry.values(out))


# -- conditionals ------------------------------------------------------------------------------


def if_stmt(pred: Any, then_fn: Callable[[], Any], else_fn: Callable[[], Any], get_state: Callable | None,
            set_state: Callable | None, names: Sequence[str], outputs: Sequence[str]) -> Any:
    """An ``if`` statement: a graph conditional if ``pred`` is a tensor, else Python's ``if``.

    ``names`` are the locals the branches assign (each branch starts from their values before the
    ``if``), ``outputs`` those of them used afterwards (merged). Returns what the branch returns
    (the function's return value for the function's last ``if``).
    """
    pred = _as_predicate(pred)
    if not _is_graph_value(pred):
        return then_fn() if pred else else_fn()
    loc = user_location(2)
    get, put = _state_fns(get_state, set_state)
    init = get()
    keep = [list(names).index(n) for n in outputs]

    def branch(fn: Callable[[], Any]) -> Callable[[], tuple]:
        def run() -> tuple:
            put(init)
            ret = fn()
            state = get()
            return (*(state[k] for k in keep), ret)

        return run

    labels = [*(f"'{n}'" for n in outputs), "the return value"]
    out = _graph_cond(pred, branch(then_fn), branch(else_fn), labels, loc)
    final = list(init)
    for k, value in zip(keep, out):
        final[k] = value
    put(tuple(final))
    return out[-1]


def if_exp(pred: Any, true_fn: Callable[[], Any], false_fn: Callable[[], Any]) -> Any:
    """``a if pred else b``."""
    pred = _as_predicate(pred)
    if not _is_graph_value(pred):
        return true_fn() if pred else false_fn()
    out = _graph_cond(pred, lambda: (true_fn(),), lambda: (false_fn(),), ["the conditional expression"],
                      user_location(2))
    return out[0]


def _graph_cond(pred: Any, true_fn: Callable[[], tuple], false_fn: Callable[[], tuple], labels: list[str],
                loc: SourceLoc | None) -> tuple:
    """``control_flow.cond`` over tuples of values labelled for errors; Python numbers become tensors."""
    seen: list[tuple] = []

    def wrap(fn: Callable[[], tuple]) -> Callable[[], tuple]:
        def run() -> tuple:
            values = fn()
            other = seen[0] if seen else (None,) * len(values)
            values = tuple(_tensorize(v, o) for v, o in zip(values, other))
            if seen:
                _check_branches(seen[0], values, labels, loc)
            seen.append(values)
            return values

        return run

    return tuple(control_flow.cond(pred, wrap(true_fn), wrap(false_fn)))


def _tensorize(value: Any, other: Any) -> Any:
    """``value`` with Python numbers as tensors (dtype from the matching tensor of ``other``)."""
    leaves, tree = nest.flatten_with_tree(value)
    hints: list[Any] = [None] * len(leaves)
    if other is not None:
        other_leaves, other_tree = nest.flatten_with_tree(other)
        if repr(other_tree) == repr(tree):
            hints = [o.dtype if isinstance(o, Tensor) else None for o in other_leaves]
    out = [convert_to_tensor(x, dtype_hint=h) if _is_number(x) else x for x, h in zip(leaves, hints)]
    return nest.unflatten(tree, out)


def _check_branches(true: tuple, false: tuple, labels: list[str], loc: SourceLoc | None) -> None:
    for label, a, b in zip(labels, true, false):
        if isinstance(a, Undefined) != isinstance(b, Undefined):
            side = "false" if isinstance(a, Undefined) else "true"
            raise LoopVariableError(
                f"{label} is assigned in the {side} branch of this `if` but not in the other, and is used after "
                "the `if`. Its condition is a tensor, so both branches become part of the graph: assign it in "
                f"both branches, or before the `if`{where(loc)}"
            )
        (al, at), (bl, bt) = nest.flatten_with_tree(a), nest.flatten_with_tree(b)
        if repr(at) != repr(bt):
            raise LoopVariableError(
                f"{label} has a different structure in the two branches of this `if`: {a!r} in the true branch, "
                f"{b!r} in the false branch. Both branches of a graph conditional must produce the same "
                f"structure{where(loc)}"
            )
        for x, y in zip(al, bl):
            if isinstance(x, Tensor) and isinstance(y, Tensor) and x.aval == y.aval:
                continue
            if not isinstance(x, Tensor) and not isinstance(y, Tensor) and (x is y or _same(x, y)):
                continue
            fell_off = " (a branch that ends without `return` returns None)" if label == "the return value" else ""
            raise LoopVariableError(
                f"{label} is {_describe(x)} in the true branch but {_describe(y)} in the false branch of this "
                f"`if`{fell_off}. Its condition is a tensor, so both branches must produce tensors of the same "
                f"shape and dtype{where(loc)}"
            )


def _same(x: Any, y: Any) -> bool:
    try:
        return bool(x == y)
    except Exception:  # why: arbitrary objects may not compare
        return False
