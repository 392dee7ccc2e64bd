"""Loop clean-up: drop carried values of counted loops that nothing needs.

A ``for _ in tf.range(n)`` loop carries its counter even when the body never reads it. When a
``while`` has a static ``trip_count`` its condition is redundant, so a carried value whose final
value is unused after the loop, and that no other carried value or effect depends on inside the
body, can be removed together with the code computing it. The condition region is then replaced
by a constant ``True`` (the trip count alone ends the loop).
"""

from __future__ import annotations

import numpy as np

from popjit import dtypes
from popjit.graph.passes.dce import dce, has_effect
from popjit.ir.graph import Aval, Graph, Node, Region, Value


def _region_uses(region: Region) -> set[int]:
    used = {v.uid for v in region.results}
    for node in region.nodes:
        used |= {v.uid for v in node.inputs}
        for r in node.regions:
            used |= _region_uses(r)
    return used


def _needed_params(body: Region, keep: list[int]) -> set[int]:
    """uids of body values needed by the kept results and by effects (backwards closure)."""
    needed = {body.results[k].uid for k in keep}
    for node in reversed(body.nodes):
        if has_effect(node) or any(o.uid in needed for o in node.outputs):
            needed |= {v.uid for v in node.inputs}
            for r in node.regions:
                needed |= _region_uses(r)
    return needed


def _true_region(avals: list[Aval]) -> Region:
    const = Node("constant", [], {"value": np.array(True)}, [Aval((), dtypes.bool_)])
    return Region([Value(a) for a in avals], [const], [const.out])


def _prune_node(node: Node, used_after: set[int]) -> None:
    cond, body = node.regions
    n = len(node.outputs)
    dead = {k for k in range(n) if node.outputs[k].uid not in used_after}
    while True:
        needed = _needed_params(body, [k for k in range(n) if k not in dead])
        revived = {k for k in dead if body.params[k].uid in needed}
        if not revived:
            break
        dead -= revived
    if not dead:
        return
    keep = [k for k in range(n) if k not in dead]
    node.inputs = [node.inputs[k] for k in keep]
    node.outputs = [node.outputs[k] for k in keep]
    for i, v in enumerate(node.outputs):
        v.index = i
    body.params = [body.params[k] for k in keep]
    body.results = [body.results[k] for k in keep]
    node.regions[0] = _true_region([v.aval for v in node.outputs])
    del cond


def _prune_region(region: Region, used_outside: set[int]) -> None:
    used = used_outside | _region_uses(region)
    for node in region.nodes:
        for r in node.regions:
            _prune_region(r, used)
        if node.op == "while" and node.attrs.get("trip_count") is not None:
            _prune_node(node, used)


def prune_loop_state(graph: Graph) -> Graph:
    """Remove unneeded carried values from counted loops, then dead code."""
    _prune_region(graph.region, set())
    return dce(graph)
