"""The graph-IR verifier: SSA dominance, shapes and dtypes against each op's rule, regions."""

from __future__ import annotations

from popjit.dtypes import is_device_dtype
from popjit.errors import UnimplementedError, VerifyError
from popjit.ir.graph import Graph, Node, Region
from popjit.ops import registry


def _fail(msg: str, node: Node | None = None) -> VerifyError:
    where = f" (node {node.op}{f' from {node.loc}' if node and node.loc else ''})" if node else ""
    return VerifyError(f"graph verifier: {msg}{where}")


def verify_region(region: Region, visible: set[int]) -> None:
    seen = set(visible)
    for p in region.params:
        if p.uid in seen:
            raise _fail(f"parameter {p!r} defined twice")
        seen.add(p.uid)
    for node in region.nodes:
        for v in node.inputs:
            if v.uid not in seen:
                raise _fail(f"input {v!r} used before it is defined", node)
        _check_node(node)
        for r in node.regions:
            verify_region(r, seen)
        for v in node.outputs:
            if v.producer is not node:
                raise _fail(f"output {v!r} does not point back at its node", node)
            seen.add(v.uid)
    for v in region.results:
        if v.uid not in seen:
            raise _fail(f"result {v!r} is not defined in the region")


def _check_node(node: Node) -> None:
    op = registry.get(node.op)
    if node.op == "while":
        _check_while(node)
        return
    if node.op == "if":
        for r in node.regions:
            if [v.aval for v in r.results] != [v.aval for v in node.outputs]:
                raise _fail("branch results do not match the conditional's outputs", node)
        return
    expected = op.infer(*[v.aval for v in node.inputs], **node.attrs)
    expected = expected if isinstance(expected, tuple) else (expected,)
    got = tuple(v.aval for v in node.outputs)
    if got != expected:
        raise _fail(f"outputs {list(map(str, got))} but the op's rule gives {list(map(str, expected))}", node)


def _check_while(node: Node) -> None:
    if len(node.regions) != 2:
        raise _fail("while needs a cond and a body region", node)
    cond, body = node.regions
    avals = [v.aval for v in node.inputs]
    if [p.aval for p in cond.params] != avals or [p.aval for p in body.params] != avals:
        raise _fail("loop region parameters do not match the carried values", node)
    if [v.aval for v in body.results] != avals:
        raise _fail("loop body results do not match the carried values", node)
    if len(cond.results) != 1 or not cond.results[0].dtype.is_bool or cond.results[0].aval.ndim != 0:
        raise _fail("loop condition must yield one scalar bool", node)


def verify(graph: Graph) -> Graph:
    """Raise :class:`VerifyError` naming the culprit if the graph is malformed; return it otherwise."""
    if len(graph.param_bindings) != len(graph.params):
        raise _fail("every parameter needs a binding")
    if len(graph.result_bindings) != len(graph.results):
        raise _fail("every result needs a binding")
    verify_region(graph.region, set())
    return graph


def check_device_dtypes(graph: Graph) -> None:
    """Refuse values the IPU cannot hold (float64): ``UnimplementedError`` naming the op, the user's
    line and what to do. Host-compiled functions may use them; IPU programs may not."""
    for p, b in zip(graph.params, graph.param_bindings):
        if not is_device_dtype(p.dtype):
            raise UnimplementedError(
                f"{p.dtype.name} is not supported on the IPU: input {b} of '{graph.name}' is {p.aval}. "
                "Cast it to float32 (or int32) on the host first; the IPU has no 64-bit floating point."
            )
    for node in graph.walk():
        for v in node.outputs:
            if not is_device_dtype(v.dtype):
                where = f"\n  at {node.loc.describe()}" if node.loc else ""
                if node.op == "infeed_dequeue":
                    raise UnimplementedError(
                        f"{v.dtype.name} is not supported on the IPU: the infeed's dataset gives {v.aval}. Cast "
                        "its elements to float32 on the host, e.g. `dataset.map(lambda x, y: (tf.cast(x, "
                        f"tf.float32), y))`; the IPU has no 64-bit floating point.{where}"
                    )
                raise UnimplementedError(
                    f"{v.dtype.name} is not supported on the IPU: op '{node.op}' produces {v.aval}{where}. "
                    "Cast to float32 (or int32) before it; the IPU has no 64-bit floating point."
                )
