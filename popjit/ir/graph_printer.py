"""Text form of the graph IR.

    graph matmul_fn(%0:f32[2,3] @arg:0, %1:f32[3,2] @arg:1) {
      %2:f32[2,2] = matmul[transpose_a=False, transpose_b=False](%0, %1)
      return %2 @out:0
    }
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from popjit.dtypes import DType
from popjit.ir.graph import Graph, Node, Region, Value

REGION_NAMES = {"while": ("cond", "body"), "if": ("then", "else")}
_SMALL_CONSTANT = 8


class _Names:
    def __init__(self) -> None:
        self.names: dict[int, str] = {}

    def __call__(self, v: Value) -> str:
        if v.uid not in self.names:
            self.names[v.uid] = f"%{len(self.names)}"
        return self.names[v.uid]

    def decl(self, v: Value) -> str:
        return f"{self(v)}:{v.aval}"


def format_attr(v: Any, digest: bool = False) -> str:
    if isinstance(v, np.ndarray):
        if v.size <= _SMALL_CONSTANT and not digest:
            return np.array2string(v.ravel(), separator=",", threshold=_SMALL_CONSTANT).replace("\n", "")
        h = hashlib.sha1(np.ascontiguousarray(v).tobytes()).hexdigest()[:12]
        return f"<{v.dtype}{list(v.shape)} #{h}>"
    if isinstance(v, DType):
        return v.name
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, (list, tuple)):
        inner = ", ".join(format_attr(x, digest) for x in v)
        return f"({inner}{',' if len(v) == 1 else ''})"
    return str(v)


def _node_line(node: Node, names: _Names, digest: bool) -> str:
    outs = ", ".join(names.decl(v) for v in node.outputs)
    attrs = ", ".join(f"{k}={format_attr(v, digest)}" for k, v in sorted(node.attrs.items()))
    args = ", ".join(names(v) for v in node.inputs)
    lhs = f"{outs} = " if outs else ""
    return f"{lhs}{node.op}{f'[{attrs}]' if attrs else ''}({args}){_placement(node)}"


def _placement(node: Node) -> str:
    """`` on ipu<k>`` (and `` backward``) for a node placed on a shard; nothing otherwise."""
    if node.shard is None:
        return ""
    return f" on ipu{node.shard}" + (" backward" if node.backward else "")


def _print_region(region: Region, names: _Names, indent: str, digest: bool, out: list[str]) -> None:
    for node in region.nodes:
        out.append(indent + _node_line(node, names, digest))
        labels = REGION_NAMES.get(node.op, ())
        for i, r in enumerate(node.regions):
            label = labels[i] if i < len(labels) else f"region{i}"
            params = ", ".join(names.decl(p) for p in r.params)
            out.append(f"{indent}  {label}({params}) {{")
            _print_region(r, names, indent + "    ", digest, out)
            out.append(f"{indent}    yield {', '.join(names(v) for v in r.results)}")
            out.append(f"{indent}  }}")


def print_region(region: Region, digest_constants: bool = False) -> str:
    """Text of a region on its own (parameters, nodes, results)."""
    names = _Names()
    out = [f"region({', '.join(names.decl(p) for p in region.params)}) {{"]
    _print_region(region, names, "  ", digest_constants, out)
    out.append(f"  yield {', '.join(names(v) for v in region.results)}")
    out.append("}")
    return "\n".join(out)


def print_graph(graph: Graph, digest_constants: bool = False) -> str:
    """The whole graph as text; with ``digest_constants`` large and small constants print as hashes."""
    names = _Names()
    params = ", ".join(f"{names.decl(p)} @{b}" for p, b in zip(graph.params, graph.param_bindings))
    shards = f" on {graph.shards} shards" if graph.shards > 1 else ""
    out = [f"graph {graph.name}({params}){shards} {{"]
    _print_region(graph.region, names, "  ", digest_constants, out)
    results = ", ".join(f"{names(v)} @{b}" for v, b in zip(graph.results, graph.result_bindings))
    out.append(f"  return {results}")
    out.append("}")
    return "\n".join(out)
