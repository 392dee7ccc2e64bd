"""Merge a differentiated loop with its replay: the forward loop runs once, not twice.

The gradient of a counted ``while`` (``popjit.ops.control_flow.while_vjp``) replays the loop to
stack every iteration's carried values for the backward pass. That replay ``S`` computes the
primal loop ``A``'s results as well: ``S`` carries its own counter, then ``A``'s carried values
(starting from the same initial values and stepped by a copy of ``A``'s body), then the stacks. When
``S``'s body steps those values exactly as ``A``'s body does (structurally equal, same captured
values, same trip count) and ``A`` has no effects, ``A``'s results are taken from ``S``, ``S``
moves to ``A``'s place, and ``A`` is removed: a recurrent layer's forward pass runs once per step.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from popjit.graph.passes.dce import dce, has_effect
from popjit.ir.graph import Graph, Node, Region, Value, attr_key


def _value_keys(region: Region, params: dict[int, Any]) -> dict[int, Any]:
    """A structural key for every value of ``region`` (params as given, outer values by identity)."""
    keys = dict(params)

    def key(v: Value) -> Any:
        return keys.get(v.uid) or _outer_key(v)

    for node in region.nodes:
        inner = tuple(_region_key(r, keys) for r in node.regions)
        value = node.attrs["value"].tobytes() if node.op == "constant" else None  # contents, not identity
        attrs = attr_key({k: v for k, v in node.attrs.items() if k != "value"})
        base = (node.op, attrs, value, tuple(key(v) for v in node.inputs), inner)
        for i, out in enumerate(node.outputs):
            keys[out.uid] = (base, i, out.aval)
    return keys


def _outer_key(v: Value) -> Any:
    """A value from outside the regions compared: a constant by its contents, anything else by identity."""
    node = v.producer
    if node is not None and node.op == "constant":
        return ("constant", node.attrs["value"].tobytes(), v.aval)
    return ("outer", v.uid)


def _region_key(region: Region, outer: dict[int, Any]) -> Any:
    params = {**outer, **{p.uid: ("param", i, p.aval) for i, p in enumerate(region.params)}}
    keys = _value_keys(region, params)
    return tuple(keys.get(v.uid) or _outer_key(v) for v in region.results)


def _steps_alike(primal: Node, replay: Node) -> bool:
    """``replay``'s body steps its carried values ``1..k`` exactly as ``primal``'s body steps its own."""
    k = len(primal.inputs)
    a_body, s_body = primal.regions[1], replay.regions[1]
    a_keys = _value_keys(a_body, {p.uid: ("carried", i) for i, p in enumerate(a_body.params)})
    s_params = {p.uid: ("carried", i - 1) if 1 <= i <= k else ("own", i) for i, p in enumerate(s_body.params)}
    s_keys = _value_keys(s_body, s_params)
    return all((a_keys.get(a.uid) or _outer_key(a)) == (s_keys.get(s.uid) or _outer_key(s))
               for a, s in zip(a_body.results, s_body.results[1:k + 1]))


def _is_replay_of(primal: Node, replay: Node) -> bool:
    k = len(primal.inputs)
    return (replay is not primal and replay.op == "while" and not has_effect(primal)
            and primal.attrs.get("trip_count") is not None
            and replay.attrs.get("trip_count") == primal.attrs.get("trip_count")
            and replay.attrs.get("max_iterations") == primal.attrs.get("max_iterations")
            and len(replay.inputs) > k and [v.uid for v in replay.inputs[1:k + 1]] == [v.uid for v in primal.inputs]
            and _steps_alike(primal, replay))


def _outer_inputs(node: Node) -> Iterator[Value]:
    """Values ``node`` reads from outside itself (its inputs and what its regions capture)."""
    yield from node.inputs
    for region in node.regions:
        inside = {p.uid for p in region.params} | {o.uid for n in region.walk() for o in n.outputs}
        inside |= {p.uid for n in region.walk() for r in n.regions for p in r.params}
        for n in region.walk():
            yield from (v for v in n.inputs if v.uid not in inside)
        yield from (v for v in region.results if v.uid not in inside)


def _hoisted(region: Region, primal: Node, replay: Node) -> list[Node] | None:
    """``replay`` and the nodes it needs that sit between ``primal`` and it, in program order, or
    None when one of them depends on ``primal`` (the replay cannot move up)."""
    position = {id(n): i for i, n in enumerate(region.nodes)}
    start = position[id(primal)]
    primal_outputs = {o.uid for o in primal.outputs}
    needed: dict[int, Node] = {}
    pending = [replay]
    while pending:
        node = pending.pop()
        if id(node) in needed:
            continue
        needed[id(node)] = node
        for v in _outer_inputs(node):
            if v.uid in primal_outputs:
                return None
            producer = v.producer
            if producer is not None and position.get(id(producer), -1) > start:
                if has_effect(producer):
                    return None
                pending.append(producer)
    return sorted(needed.values(), key=lambda n: position[id(n)])


def _substitute(region: Region, mapping: dict[int, Value]) -> None:
    for node in region.nodes:
        node.inputs = [mapping.get(v.uid, v) for v in node.inputs]
        for r in node.regions:
            _substitute(r, mapping)
    region.results = [mapping.get(v.uid, v) for v in region.results]


def _merge_in(region: Region) -> bool:
    """Merge one primal loop of ``region`` with its replay; True if one was merged."""
    loops = [n for n in region.nodes if n.op == "while"]
    for primal in loops:
        for replay in loops:
            if not _is_replay_of(primal, replay):
                continue
            moved = _hoisted(region, primal, replay)
            if moved is None:
                continue
            at = region.nodes.index(primal)
            moved_ids = {id(n) for n in moved}
            rest = [n for n in region.nodes if id(n) not in moved_ids and n is not primal]
            region.nodes = rest[:at] + moved + rest[at:]
            k = len(primal.inputs)
            _substitute(region, {a.uid: s for a, s in zip(primal.outputs, replay.outputs[1:k + 1])})
            return True
    return False


def _merge_region(region: Region) -> None:
    for node in region.nodes:
        for r in node.regions:
            _merge_region(r)
    while _merge_in(region):
        pass


def merge_replayed_loops(graph: Graph) -> Graph:
    """Run each differentiated loop's forward pass once (see the module docstring)."""
    _merge_region(graph.region)
    return dce(graph)
