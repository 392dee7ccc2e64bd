"""Host streams: the infeed dequeue and the outfeed enqueue (effect ops).

``infeed_dequeue[feed, avals]()`` yields the next element of an infeed (one output per component);
``outfeed_enqueue[feed, mode](values...)`` appends values to an outfeed. Both are effects: the
passes keep them and their order. Lowering gives each feed a host buffer holding every element one
execution uses (``[count, ...]``, count from the static trip counts of the enclosing loops) and an
on-device position counter; the engine reads and writes those buffers natively, one element per
dequeue or enqueue, with no Python per step (see :meth:`popjit.loop.lower.LowerCtx.stream`).
"""

from __future__ import annotations

from typing import Any

from popjit.ir.graph import Aval
from popjit.ir.opdef import EFFECT, OpDef, register


def _dequeue_infer(feed: int, avals: tuple[Aval, ...]) -> tuple[Aval, ...]:
    return tuple(avals)


def _enqueue_infer(*values: Aval, feed: int, mode: str) -> tuple[Aval, ...]:
    return ()


def _run_by_interpreter(*args: Any, **attrs: Any) -> Any:
    raise AssertionError("stream ops are run by an interpreter's effect handler (graph.interpret(effects=...))")


def _lower_dequeue(ctx: Any, node: Any, args: list[Any]) -> list[Any]:
    return ctx.stream.dequeue(node.attrs["feed"], [v.aval for v in node.outputs])


def _lower_enqueue(ctx: Any, node: Any, args: list[Any]) -> list[Any]:
    ctx.stream.enqueue(node.attrs["feed"], node.attrs["mode"], args)
    return []


register(OpDef("infeed_dequeue", EFFECT, _dequeue_infer, _run_by_interpreter, _lower_dequeue, effect=True,
               doc="next(iterator) / IPUInfeedQueue: the next element of a host infeed",
               extra={"tuple_output": True}))
register(OpDef("outfeed_enqueue", EFFECT, _enqueue_infer, _run_by_interpreter, _lower_enqueue, effect=True,
               doc="IPUOutfeedQueue.enqueue: append values to a host outfeed (mode all or last)",
               extra={"tuple_output": True}))
