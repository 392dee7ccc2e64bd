"""The graph-IR interpreter: runs a graph with each op's NumPy reference.

This is the executable meaning of the graph IR; the loop-IR interpreter and the compiled engine
are tested against it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from popjit.ir.graph import Graph, Node, Region
from popjit.ops import registry


class Env:
    """Values of SSA names, with lookup through enclosing regions."""

    def __init__(self, parent: Env | None = None) -> None:
        self.values: dict[int, Any] = {}
        self.parent = parent

    def __getitem__(self, uid: int) -> Any:
        env: Env | None = self
        while env is not None:
            if uid in env.values:
                return env.values[uid]
            env = env.parent
        raise KeyError(f"value #{uid} is not defined here")

    def __setitem__(self, uid: int, value: Any) -> None:
        self.values[uid] = value


def run_region(region: Region, params: Sequence[Any], parent: Env | None, effects: Any = None) -> list[Any]:
    env = Env(parent)
    for p, v in zip(region.params, params):
        env[p.uid] = v
    for node in region.nodes:
        outs = run_node(node, [env[v.uid] for v in node.inputs], env, effects)
        for v, o in zip(node.outputs, outs):
            env[v.uid] = np.asarray(o, dtype=v.dtype.np).reshape(v.shape)
    return [env[v.uid] for v in region.results]


def run_node(node: Node, args: list[Any], env: Env, effects: Any = None) -> list[Any]:
    if node.op == "while":
        return _run_while(node, args, env, effects)
    if node.op == "if":
        branch = node.regions[0] if bool(args[0]) else node.regions[1]
        return run_region(branch, [], env, effects)
    op = registry.get(node.op)
    if op.effect:
        return list(effects.run(node, args))
    with np.errstate(all="ignore"):
        out = op.reference(*args, **node.attrs)
    return list(out) if isinstance(out, tuple) else [out]


def _run_while(node: Node, args: list[Any], env: Env, effects: Any) -> list[Any]:
    cond, body = node.regions
    carried = list(args)
    limit = node.attrs.get("max_iterations")
    trip = node.attrs.get("trip_count")
    if trip is not None:  # a counted loop: the trip count alone decides (its condition may be pruned)
        for _ in range(trip if limit is None else min(trip, limit)):
            carried = run_region(body, carried, env, effects)
        return carried
    count = 0
    while (limit is None or count < limit) and bool(run_region(cond, carried, env, effects)[0]):
        carried = run_region(body, carried, env, effects)
        count += 1
    return carried


def interpret(graph: Graph, args: Sequence[Any], variables: dict[int, np.ndarray] | None = None,
              effects: Any = None) -> tuple[list[np.ndarray], dict[int, np.ndarray]]:
    """Run ``graph``: returns (results bound to ``out``, new values of written variables)."""
    variables = variables or {}
    params = []
    for b in graph.param_bindings:
        params.append(np.asarray(args[b.key]) if b.kind == "arg" else variables[b.key])
    results = run_region(graph.region, params, None, effects)
    outs = [r for r, b in zip(results, graph.result_bindings) if b.kind == "out"]
    updates = {b.key: r for r, b in zip(results, graph.result_bindings) if b.kind == "var"}
    return outs, updates
