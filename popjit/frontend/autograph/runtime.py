"""The values and operators converted code uses at run time: :class:`Undefined` (a local not yet
assigned) and ``ld``, the ``and``/``or``/``not`` helpers, the guards of statements left as Python,
and the loop-carried state of graph loops (:class:`_Carry`) and lazy ranges (:class:`_Range`).

Converted code reaches these as attributes of ``ag__``, the ``popjit.frontend.autograph`` package.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from popjit import dtypes
from popjit.errors import InvalidArgumentError
from popjit.frontend import math_ops, nest
from popjit.frontend.autograph.errors import LoopVariableError, UnsupportedControlFlowError
from popjit.frontend.convert import convert_to_tensor
from popjit.frontend.tensor import Tensor
from popjit.frontend.tracing import current_trace
from popjit.frontend.variables import Variable
from popjit.source import SourceLoc, user_location, where


class Undefined:
    """The value of a local that has not been assigned yet (set before a converted statement)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<undefined {self.name!r}>"

    def fail(self, *args: Any, **kwargs: Any) -> Any:
        raise UnboundLocalError(
            f"local variable '{self.name}' is used before it is assigned: it is assigned only in a branch or "
            f"loop body that did not assign it on this path{where(user_location(2))}"
        )

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return self.fail()


for _dunder in ("bool", "iter", "len", "call", "getitem", "setitem", "neg", "pos", "abs", "invert", "index",
                "int", "float", "add", "radd", "sub", "rsub", "mul", "rmul", "truediv", "rtruediv", "floordiv",
                "rfloordiv", "mod", "rmod", "pow", "rpow", "matmul", "rmatmul", "and", "rand", "or", "ror",
                "xor", "rxor", "lt", "le", "gt", "ge", "iadd", "isub", "imul", "itruediv", "array"):
    setattr(Undefined, f"__{_dunder}__", Undefined.fail)


def ld(value: Any) -> Any:
    """A read of a local that may still be :class:`Undefined`."""
    if isinstance(value, Undefined):
        value.fail()
    return value


def _is_graph_value(x: Any) -> bool:
    """A symbolic tensor, or a variable while tracing (its read is symbolic)."""
    return (isinstance(x, Tensor) and x.is_symbolic) or (isinstance(x, Variable) and current_trace() is not None)


def _as_predicate(x: Any) -> Any:
    return x.read_value() if isinstance(x, Variable) and current_trace() is not None else x


def not_(x: Any) -> Any:
    """``not x``."""
    x = _as_predicate(x)
    return math_ops.logical_not(x) if _is_graph_value(x) else not x


def not_any(*flags: Any) -> Any:
    """``not (f1 or f2 …)`` for break/continue flags."""
    flags = tuple(_as_predicate(f) for f in flags)
    if not any(_is_graph_value(f) for f in flags):
        return not any(flags)
    out = flags[0]
    for f in flags[1:]:
        out = math_ops.logical_or(out, f)
    return math_ops.logical_not(out)


def and_(*operands: Callable[[], Any]) -> Any:
    """``a and b …``: Python's short-circuit on Python values, ``logical_and`` once one is a tensor."""
    value = operands[0]()
    for operand in operands[1:]:
        if _is_graph_value(value):
            value = math_ops.logical_and(value, operand())
        elif not value:
            return value
        else:
            value = operand()
    return value


def or_(*operands: Callable[[], Any]) -> Any:
    """``a or b …``: Python's short-circuit on Python values, ``logical_or`` once one is a tensor."""
    value = operands[0]()
    for operand in operands[1:]:
        if _is_graph_value(value):
            value = math_ops.logical_or(value, operand())
        elif value:
            return value
        else:
            value = operand()
    return value


def python_condition(value: Any, kind: str, what: str, advice: str) -> Any:
    """The test of an ``if``/``while`` left as Python because it holds ``what``; refuses a tensor."""
    if _is_graph_value(value):
        statement, becomes = ("an `if` statement", "conditional") if kind == "if" else ("a `while` loop", "loop")
        raise UnsupportedControlFlowError(
            f"{what} inside {statement} whose condition is a tensor is not supported: autograph turns such a "
            f"statement into a graph {becomes}, which cannot hold it. {advice}{where(user_location(2))}"
        )
    return value


def python_iterable(iterable: Any, what: str, advice: str) -> Any:
    """The iterable of a ``for`` left as Python because it holds ``what``; refuses a tensor."""
    if isinstance(iterable, _Range) or _is_graph_value(iterable):
        raise UnsupportedControlFlowError(
            f"{what} inside a `for` loop over a tensor is not supported: autograph turns the loop into a graph "
            f"loop, which cannot hold it. {advice}{where(user_location(2))}"
        )
    return iterable


# -- loop-carried and branch-merged state -------------------------------------------------------


def _is_number(x: Any) -> bool:
    return isinstance(x, (bool, int, float, np.generic, np.ndarray))


def _carriable(x: Any) -> bool:
    return isinstance(x, Tensor) or _is_number(x)


def _describe(x: Any) -> str:
    if isinstance(x, Tensor):
        return f"a {x.aval} tensor"
    if isinstance(x, Undefined):
        return "not assigned"
    return "None" if x is None else f"a Python {type(x).__name__}"


def _state_fns(get_state: Callable | None, set_state: Callable | None) -> tuple[Callable, Callable]:
    if get_state is None or set_state is None:
        return (lambda: ()), (lambda values: None)
    return get_state, set_state


class _Carry:
    """The Python locals a traced loop carries: their tensor leaves become loop variables; the other
    leaves (models, undefined names…) must come out of each iteration unchanged."""

    def __init__(self, names: Sequence[str], values: Sequence[Any], kind: str, loc: SourceLoc | None) -> None:
        self.names, self.kind, self.loc = list(names), kind, loc
        self.leaves, self.tree = nest.flatten_with_tree(tuple(values))
        self.owner = [name for name, v in zip(names, values) for _ in nest.flatten(v)]
        self.slots = [k for k, x in enumerate(self.leaves) if _carriable(x)]
        self.init = [convert_to_tensor(self.leaves[k]) for k in self.slots]

    def values(self, carried: Sequence[Any]) -> tuple:
        leaves = list(self.leaves)
        for k, t in zip(self.slots, carried):
            leaves[k] = t
        return nest.unflatten(self.tree, leaves)

    def next_leaves(self, values: Sequence[Any]) -> list[Tensor]:
        """The loop variables after one iteration, checked against those before it."""
        leaves, tree = nest.flatten_with_tree(tuple(values))
        if repr(tree) != repr(self.tree):
            self.structure_error(values)
        slots = dict(zip(self.slots, self.init))
        out = []
        for k, (old, new) in enumerate(zip(self.leaves, leaves)):
            if k in slots:
                out.append(self.checked(self.owner[k], slots[k], new))
            elif new is not old:
                raise self.replaced_error(self.owner[k], old, new)
        return out

    def checked(self, name: str, before: Tensor, new: Any) -> Tensor:
        if not _carriable(new):
            raise LoopVariableError(
                f"'{name}' is {_describe(before)} before the {self.kind} loop but {_describe(new)} after one "
                f"iteration: a graph loop carries tensors of a fixed shape and dtype{where(self.loc)}"
            )
        t = convert_to_tensor(new, dtype_hint=before.dtype) if not isinstance(new, Tensor) else new
        if t.aval != before.aval:
            raise LoopVariableError(
                f"'{name}' is {_describe(before)} before the {self.kind} loop but {_describe(t)} after one "
                "iteration. A graph loop carries values of a fixed shape and dtype (XLA needs static shapes): "
                f"give it its final shape and dtype before the loop, or cast/reshape it in the body{where(self.loc)}"
            )
        return t

    def replaced_error(self, name: str, old: Any, new: Any) -> LoopVariableError:
        if isinstance(old, Undefined):
            return LoopVariableError(
                f"'{name}' is assigned inside the {self.kind} loop but not before it, and is used after the loop "
                "or in the next iteration. A graph loop can only carry a value that exists before it: assign "
                f"'{name}' before the loop (e.g. `{name} = tf.zeros(shape)`){where(self.loc)}"
            )
        return LoopVariableError(
            f"'{name}' is {_describe(old)} before the {self.kind} loop and the loop body makes it "
            f"{_describe(new)}. A graph loop over a tensor can only carry tensors and Python numbers: initialize "
            f"it with a tensor of its final shape and dtype before the loop{where(self.loc)}"
        )

    def structure_error(self, values: Sequence[Any]) -> None:
        before = nest.unflatten(self.tree, self.leaves)
        for name, old, new in zip(self.names, before, values):
            if repr(nest.flatten_with_tree(old)[1]) != repr(nest.flatten_with_tree(new)[1]):
                if isinstance(old, Undefined):
                    raise self.replaced_error(name, old, new)
                raise LoopVariableError(
                    f"'{name}' changes structure in the {self.kind} loop: {old!r} before it, {new!r} after one "
                    f"iteration. A graph loop carries a fixed structure of tensors{where(self.loc)}"
                )


# -- the bounds of a range loop ------------------------------------------------------------------


@dataclass
class _Range:
    """``range``/``tf.range`` bounds in a ``for`` header, kept lazy so the loop needs no ``iota``."""

    start: Any
    limit: Any
    delta: Any
    dtype: Any

    def tensors(self) -> tuple[Tensor, Tensor, Tensor]:
        """start, limit, delta as tensors of one dtype (tf.range's: the float one if any, else limit's)."""
        ts = [convert_to_tensor(x) for x in (self.start, self.limit, self.delta)]
        if self.dtype is not None:
            dtype = dtypes.as_dtype(self.dtype)
        else:
            dtype = next((t.dtype for t in ts if t.dtype.is_floating), ts[1].dtype)
        trace = current_trace()
        delta = trace.constant_value(ts[2]) if trace is not None else None
        if delta is not None and not np.all(delta):
            raise InvalidArgumentError(f"Requires delta != 0: 0 [Op:Range]{where(user_location(2))}")
        return tuple(math_ops.cast(t, dtype) for t in ts)  # type: ignore[return-value]
