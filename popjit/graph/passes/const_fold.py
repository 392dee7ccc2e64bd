"""Constant folding: a pure op whose inputs are all constants becomes a constant."""

from __future__ import annotations

import numpy as np

from popjit.graph.passes.dce import dce
from popjit.ir.graph import Graph, Node, Region
from popjit.ops import registry

MAX_FOLDED_ELEMENTS = 4096


def _fold_region(region: Region, consts: dict[int, np.ndarray]) -> None:
    out: list[Node] = []
    for node in region.nodes:
        for r in node.regions:
            _fold_region(r, consts)
        op = registry.get(node.op)
        if node.op == "constant":
            consts[node.out.uid] = node.attrs["value"]
        elif (node.inputs and not node.regions and op.folds
              and all(v.uid in consts for v in node.inputs)
              and sum(v.aval.size for v in node.outputs) <= MAX_FOLDED_ELEMENTS):
            with np.errstate(all="ignore"):
                res = op.reference(*[consts[v.uid] for v in node.inputs], **node.attrs)
            res = res if isinstance(res, tuple) else (res,)
            for v, r in zip(node.outputs, res):
                value = np.asarray(r, dtype=v.dtype.np).reshape(v.shape)
                c = Node("constant", [], {"value": value}, [v.aval], **node.placement())
                c.outputs[0] = v
                v.producer, v.index = c, 0
                consts[v.uid] = value
                out.append(c)
            continue
        out.append(node)
    region.nodes = out


def const_fold(graph: Graph) -> Graph:
    _fold_region(graph.region, {})

    return dce(graph)
