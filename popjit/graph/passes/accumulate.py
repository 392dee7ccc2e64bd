"""Block accumulation: ``x + dynamic_update_slice(zeros, u, begin)`` becomes
``dynamic_update_slice_add(x, u, begin)``.

The gradient of a slice taken at a run-time position (``dynamic_slice``, or a ``gather`` of one
index such as a recurrent layer's time step ``i``) is the cotangent written into zeros of the whole
operand. A loop summing those gradients (the backward pass of the time loop) would add a whole
tensor per iteration, O(T) work per step and O(T²) per loop; after the rewrite it adds the block
alone, in place when ``x`` is the loop's accumulator.
"""

from __future__ import annotations

import numpy as np

from popjit.graph.passes.dce import dce
from popjit.ir.graph import Graph, Node, Region, Value


def _is_zeros(value: Value) -> bool:
    """``value`` is a constant zero tensor (folded, or a broadcast zero scalar)."""
    node = value.producer
    if node is None:
        return False
    if node.op == "broadcast_to":
        return _is_zeros(node.inputs[0])
    return node.op == "constant" and not np.any(node.attrs["value"])


def _block_update(node: Node) -> Node | None:
    """For ``add(x, d)`` with ``d = dynamic_update_slice(zeros, u, begin)`` (either order), the
    ``dynamic_update_slice_add(x, u, begin)`` that replaces it."""
    if node.op != "add" or len(node.inputs) != 2:
        return None
    out = node.outputs[0]
    for x, d in (node.inputs, node.inputs[::-1]):
        dus = d.producer
        if (dus is not None and dus.op == "dynamic_update_slice" and _is_zeros(dus.inputs[0])
                and x.aval == out.aval and d.aval == out.aval):
            new = Node("dynamic_update_slice_add", [x, dus.inputs[1], dus.inputs[2]], {}, [out.aval],
                       **node.placement())
            new.outputs[0] = out
            out.producer, out.index = new, 0
            return new
    return None


def _rewrite_region(region: Region) -> None:
    for k, node in enumerate(region.nodes):
        for r in node.regions:
            _rewrite_region(r)
        new = _block_update(node)
        if new is not None:
            region.nodes[k] = new


def accumulate_blocks(graph: Graph) -> Graph:
    """Rewrite every ``x + dynamic_update_slice(zeros, u, begin)`` (see the module docstring)."""
    _rewrite_region(graph.region)
    return dce(graph)
