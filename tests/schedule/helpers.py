"""Building programs for schedule tests: traced through the front end, or written in loop IR."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from popjit import dtypes
from popjit.ir.loop import Apply, Buffer, Expr, Kernel, Load, Program, Store, as_index, ivar
from popjit.pipeline import lower_graph, optimize_graph

F32 = dtypes.float32


def traced(fn: Callable[..., Any], *args: Any) -> Program:
    """``fn`` traced with ``args`` and lowered to loop IR, as ``compile_graph`` does."""
    import popjit.tensorflow as tf

    return lower_graph(optimize_graph(tf.function(fn).get_concrete_function(*args).graph))


def buf(name: str, shape: tuple[int, ...], kind: str, dtype: dtypes.DType = F32) -> Buffer:
    return Buffer(name, shape, dtype, kind)


def load(b: Buffer, index: Any = None) -> Load:
    return Load(b, ivar("i0") if index is None else as_index(index))


def apply(op: str, *args: Expr, dtype: dtypes.DType = F32) -> Apply:
    return Apply(op, tuple(args), dtype)


def kernel(name: str, out: Buffer, value: Expr, domain: tuple[int, ...] | None = None, index: Any = None) -> Kernel:
    """``out[i0] = value`` over ``domain`` (default: the output's size)."""
    return Kernel(name, domain or (out.size,), [Store(out, ivar("i0") if index is None else as_index(index), value)])


def program(body: list, args: list[Buffer] = (), outs: list[Buffer] = (), temps: list[Buffer] = (),
            variables: list[Buffer] = ()) -> Program:
    return Program("p", list(body), list(args), list(outs), list(variables), [], list(temps))
