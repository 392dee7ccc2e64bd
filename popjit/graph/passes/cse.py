"""Common-subexpression elimination for pure ops (no regions, no effects)."""

from __future__ import annotations

from typing import Any

from popjit.graph.passes.dce import dce
from popjit.ir.graph import Graph, Region, Value, attr_key
from popjit.ops import registry


def _cse_region(region: Region, available: dict[Any, list[Value]], replace: dict[int, Value]) -> None:
    local = dict(available)
    for node in region.nodes:
        node.inputs = [replace.get(v.uid, v) for v in node.inputs]
        for r in node.regions:
            _cse_region(r, local, replace)
        op = registry.get(node.op)
        if node.regions or op.effect or (op.kind == registry.SOURCE and node.op != "constant"):
            continue
        inputs = tuple(v.uid for v in node.inputs)
        if op.commutative:
            inputs = tuple(sorted(inputs))
        key = (node.op, inputs, attr_key(node.attrs))
        if key in local:
            for old, new in zip(node.outputs, local[key]):
                replace[old.uid] = new
        else:
            local[key] = node.outputs
    region.results = [replace.get(v.uid, v) for v in region.results]


def cse(graph: Graph) -> Graph:
    _cse_region(graph.region, {}, {})

    return dce(graph)
