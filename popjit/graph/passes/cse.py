"""Common-subexpression elimination for pure ops (no regions, no effects), and multiplications by one.

``x * 1`` is ``x`` exactly for every value (NaN, infinities and signed zeros included), so a product
with a constant one (or a broadcast or reshape of one, as gradients of ``reduce_sum`` start) of the
output's shape and dtype is replaced by its other operand: otherwise it is a copy, and a
materialised one when the product has several uses.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from popjit.graph.passes.dce import dce
from popjit.ir.graph import Graph, Node, Region, Value, attr_key
from popjit.ops import registry

#: Ops whose output is all ones when their input is.
_KEEPS_ONES = ("broadcast_to", "reshape", "expand_dims", "squeeze")


def _ones(node: Node, ones: set[int]) -> bool:
    if node.op == "constant":
        value = node.attrs["value"]
        return value.size > 0 and bool(np.all(value == 1))
    return node.op in _KEEPS_ONES and node.inputs[0].uid in ones


def _times_one(node: Node, ones: set[int]) -> Value | None:
    """The operand ``node`` (a ``mul``) equals, if it multiplies it by one without changing its shape."""
    if node.op != "mul":
        return None
    a, b = node.inputs
    for one, other in ((a, b), (b, a)):
        if one.uid in ones and other.aval == node.outputs[0].aval:
            return other
    return None


def _cse_region(region: Region, available: dict[Any, list[Value]], replace: dict[int, Value],
                ones: set[int]) -> None:
    local = dict(available)
    for node in region.nodes:
        node.inputs = [replace.get(v.uid, v) for v in node.inputs]
        for r in node.regions:
            _cse_region(r, local, replace, ones)
        op = registry.get(node.op)
        if node.regions or op.effect or (op.kind == registry.SOURCE and node.op != "constant"):
            continue
        if _ones(node, ones):
            ones.add(node.outputs[0].uid)
        same = _times_one(node, ones)
        if same is not None:
            replace[node.outputs[0].uid] = same
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
    _cse_region(graph.region, {}, {}, set())

    return dce(graph)
