"""Control flow: ``while`` (loop-carried values) and ``if`` (two branches).

Both carry regions; the frontend builds them directly (:mod:`popjit.frontend.control_flow`), the
graph interpreter and the loop lowering give them meaning. A ``while`` whose condition is
``counter < constant`` with a constant step lowers to a fixed-count ``Repeat`` (Poplar's
``Repeat``); any other loop to ``RepeatWhile``.

``while`` attrs: ``max_iterations`` (or None). Regions: ``cond(carried) -> [pred]``,
``body(carried) -> carried``. ``if``: input ``pred``; regions ``then() -> outs``, ``else() -> outs``.
"""

from __future__ import annotations

from typing import Any

from popjit.autodiff.control import if_vjp, while_vjp
from popjit.errors import InvalidArgumentError
from popjit.graph.ir import Aval
from popjit.ops.registry import CONTROL, OpDef, register


def _while_infer(*carried: Aval, **attrs: Any) -> tuple[Aval, ...]:
    return tuple(carried)


def _if_infer(pred: Aval, **attrs: Any) -> tuple[Aval, ...]:
    if not pred.dtype.is_bool or pred.ndim != 0:
        raise InvalidArgumentError(f"The predicate of a conditional must be a scalar bool, not {pred}")
    return tuple(attrs["out_avals"])


def _interpreted(*args: Any, **attrs: Any) -> Any:
    raise AssertionError("control-flow ops are run by the graph interpreter, which evaluates their regions")


def _lower_while(ctx: Any, node: Any, args: list[Any]) -> list[Any]:
    return ctx.lower_while(node, args)


def _lower_if(ctx: Any, node: Any, args: list[Any]) -> list[Any]:
    return ctx.lower_if(node, args)


register(OpDef("while", CONTROL, _while_infer, _interpreted, _lower_while, vjp=while_vjp,
                  doc="loop with carried values"))
register(OpDef("if", CONTROL, _if_infer, _interpreted, _lower_if, vjp=if_vjp, doc="two-way conditional"))
