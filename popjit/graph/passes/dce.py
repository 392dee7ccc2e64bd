"""Dead-code elimination: drop pure nodes whose outputs nobody uses."""

from __future__ import annotations

from popjit.ir.graph import Graph, Node, Region
from popjit.ops import registry


def has_effect(node: Node) -> bool:
    """An op with a host-visible effect (stream I/O), here or inside its regions."""
    if registry.get(node.op).effect:
        return True
    return any(has_effect(n) for r in node.regions for n in r.nodes)


def _dce_region(region: Region) -> set[int]:
    """Prune ``region``; return the uids it uses (its own and captured ones)."""
    used = {v.uid for v in region.results}
    kept: list[Node] = []
    for node in reversed(region.nodes):
        if not has_effect(node) and not any(o.uid in used for o in node.outputs):
            continue
        for r in node.regions:
            used |= _dce_region(r)
        used |= {v.uid for v in node.inputs}
        kept.append(node)
    region.nodes = kept[::-1]
    return used


def dce(graph: Graph) -> Graph:
    _dce_region(graph.region)
    return graph
