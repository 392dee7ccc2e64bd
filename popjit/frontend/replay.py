"""Replaying a region of the graph IR through the frontend.

Gradients of control flow recompute a branch or a loop step inside the backward pass: every node
of the region is applied again (with ``apply_op`` and the control-flow builders), so the ops are
recorded on whatever tape is active and differentiated like any other code.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from popjit.errors import UnimplementedError
from popjit.frontend.gradient_tape import record
from popjit.frontend.tensor import Tensor
from popjit.frontend.tracing import apply_op, current_trace
from popjit.ir.graph import Node, Region, Value
from popjit.ops import registry


def free_values(regions: Sequence[Region]) -> list[Value]:
    """Values the regions use but do not define (captured from enclosing code), in first-use order."""
    defined: set[int] = set()
    used: dict[int, Value] = {}

    def walk(region: Region) -> None:
        defined.update(p.uid for p in region.params)
        for node in region.nodes:
            for v in node.inputs:
                used.setdefault(v.uid, v)
            for r in node.regions:
                walk(r)
            defined.update(v.uid for v in node.outputs)
        for v in region.results:
            used.setdefault(v.uid, v)

    for r in regions:
        walk(r)
    return [v for uid, v in used.items() if uid not in defined]


def replay(region: Region, args: Sequence[Tensor], captured: Mapping[int, Tensor] | None = None,
           stashed: Mapping[int, Tensor] | None = None) -> list[Tensor]:
    """Apply ``region``'s nodes again to ``args`` (its parameters); its results as tensors.

    ``captured`` maps values of enclosing regions that are being replayed too (by uid) to their
    new tensors, so a nested branch or loop reads the replayed values, not the originals.
    ``stashed`` maps outputs of the region's own nodes (by uid) to tensors holding the values they had
    when the region first ran: such a node is not computed again, its stashed value is used and
    recorded on the active tapes as the node's output, so gradients still flow to its inputs through
    the op's own rule.
    """
    return _results(region, _replayed(region, args, captured, stashed or {}))


def replay_keeping(region: Region, args: Sequence[Tensor], keep: Sequence[Value]) -> tuple[list[Tensor], list[Tensor]]:
    """:func:`replay`, and the tensors the replay computed for ``keep`` (outputs of the region's nodes)."""
    env = _replayed(region, args, None, {})
    return _results(region, env), [env[v.uid] for v in keep]


def _results(region: Region, env: Mapping[int, Tensor]) -> list[Tensor]:
    """The region's results among the replayed tensors (a result the region does not define is the
    enclosing value itself)."""
    return [env[v.uid] if v.uid in env else Tensor.symbolic(v, current_trace()) for v in region.results]


def _replayed(region: Region, args: Sequence[Tensor], captured: Mapping[int, Tensor] | None,
              stashed: Mapping[int, Tensor]) -> dict[int, Tensor]:
    """The tensors of a replay of ``region``: every value it defines (and ``captured``), by uid."""
    trace = current_trace()
    assert trace is not None, "replay only happens while tracing"
    env: dict[int, Tensor] = dict(captured or {})
    env.update({p.uid: a for p, a in zip(region.params, args)})

    def get(v: Value) -> Tensor:
        return env[v.uid] if v.uid in env else Tensor.symbolic(v, trace)

    for node in region.nodes:
        inputs = [get(v) for v in node.inputs]
        if node.outputs and all(v.uid in stashed for v in node.outputs):
            outs = [stashed[v.uid] for v in node.outputs]
            record(node.op, inputs, outs, node.attrs)
        else:
            outs = _replay_node(node, inputs, env)
        env.update({v.uid: o for v, o in zip(node.outputs, outs)})
    return env


def _replay_node(node: Node, inputs: list[Tensor], env: Mapping[int, Tensor]) -> list[Tensor]:
    # why: control_flow is built on this module (importing it at the top would be circular)
    from popjit.frontend import control_flow

    if node.op == "if":
        then, orelse = node.regions
        return list(control_flow.cond(inputs[0], lambda: replay(then, [], env), lambda: replay(orelse, [], env)))
    if node.op == "while":
        cond, body = node.regions
        out = control_flow.while_loop(lambda *c: replay(cond, c, env)[0], lambda *c: replay(body, c, env),
                                      list(inputs), maximum_iterations=node.attrs.get("max_iterations"),
                                      trip_count=node.attrs.get("trip_count"))
        return list(out)
    if registry.get(node.op).effect:
        raise UnimplementedError(
            f"Cannot differentiate through '{node.op}' inside a loop or conditional: replaying it for the gradient "
            "would read or write the stream again. Move the dequeue/enqueue out of the differentiated code."
        )
    out = apply_op(node.op, inputs, **node.attrs)
    return list(out) if isinstance(out, tuple) else [out]
