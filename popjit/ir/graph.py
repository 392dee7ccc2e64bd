"""The graph IR: SSA values with static shapes, ops with attributes, regions for control flow.

A :class:`Graph` is one traced function. Its top :class:`Region` holds :class:`Node` s in
program order; a node's ``regions`` hold nested code (loop condition and body, the branches of a
conditional). Regions may use values defined in enclosing regions (implicit capture), which is
how a loop body reads a tensor computed before the loop.

Variables are threaded through as values: the graph reads a variable once as a parameter bound
to it and writes it once as a result bound to it; inside a traced function the frontend keeps
the variable's current SSA value, so a loop that assigns a variable carries it. Host streams
(infeeds, outfeeds) are ops marked ``effect``; passes keep their relative order.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from popjit.dtypes import DType, Shaped
from popjit.source import SourceLoc


@dataclass(frozen=True)
class Aval(Shaped):
    """An abstract value: a static shape and a dtype."""

    shape: tuple[int, ...]
    dtype: DType

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __str__(self) -> str:
        return self.type_text()


_value_ids = itertools.count()


class Value:
    """An SSA value: produced by one node output, or a region parameter."""

    __slots__ = ("aval", "index", "producer", "uid")

    def __init__(self, aval: Aval, producer: Node | None = None, index: int = 0) -> None:
        assert isinstance(aval, Aval), f"Value needs an Aval, not {type(aval).__name__}"
        self.aval = aval
        self.producer = producer
        self.index = index
        self.uid = next(_value_ids)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.aval.shape

    @property
    def dtype(self) -> DType:
        return self.aval.dtype

    def __repr__(self) -> str:
        return f"Value#{self.uid}:{self.aval}"


class Node:
    """One op application: ``outputs = op[attrs](inputs) {regions}``.

    ``shard`` is the IPU of its program it was placed on (``ipu.scopes.ipu_shard``, a pipeline stage's
    device), or None where the user placed nothing (the schedule then puts it with its data);
    ``backward`` marks a node of a gradient computation. Neither changes what the node computes.
    """

    __slots__ = ("attrs", "backward", "inputs", "loc", "op", "outputs", "regions", "shard")

    def __init__(
        self,
        op: str,
        inputs: Sequence[Value],
        attrs: dict[str, Any],
        out_avals: Sequence[Aval],
        regions: Sequence[Region] = (),
        loc: SourceLoc | None = None,
        shard: int | None = None,
        backward: bool = False,
    ) -> None:
        self.op = op
        self.inputs = list(inputs)
        self.attrs = dict(attrs)
        self.outputs = [Value(a, self, i) for i, a in enumerate(out_avals)]
        self.regions = list(regions)
        self.loc = loc
        self.shard = shard
        self.backward = backward

    def placement(self) -> dict[str, Any]:
        """Keyword arguments that place a node made to replace this one where this one is."""
        return {"loc": self.loc, "shard": self.shard, "backward": self.backward}

    @property
    def out(self) -> Value:
        assert len(self.outputs) == 1, f"{self.op} has {len(self.outputs)} outputs, not 1"
        return self.outputs[0]

    def __repr__(self) -> str:
        return f"Node({self.op})"


@dataclass(eq=False)
class Region:
    """A block of nodes with parameters and results."""

    params: list[Value] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list)
    results: list[Value] = field(default_factory=list)

    def add(self, node: Node) -> Node:
        self.nodes.append(node)
        return node

    def walk(self) -> Iterator[Node]:
        """Every node in this region and in nested regions, in program order."""
        for n in self.nodes:
            yield n
            for r in n.regions:
                yield from r.walk()

    def shards(self) -> int:
        """The IPUs its nodes were placed on span: one more than the highest shard (1 if none is placed)."""
        return 1 + max((n.shard for n in self.walk() if n.shard is not None), default=0)


def _copy_region(region: Region, values: dict[int, Value]) -> Region:
    """``region`` with every node and value new; ``values`` maps old uids to copies (captured values
    of enclosing regions are already in it, as their definitions come first)."""
    params = [Value(p.aval) for p in region.params]
    values.update((p.uid, q) for p, q in zip(region.params, params))
    nodes = []
    for node in region.nodes:
        regions = [_copy_region(r, values) for r in node.regions]
        new = Node(node.op, [values[v.uid] for v in node.inputs], node.attrs, [v.aval for v in node.outputs],
                   regions, **node.placement())
        values.update((v.uid, w) for v, w in zip(node.outputs, new.outputs))
        nodes.append(new)
    return Region(params, nodes, [values[v.uid] for v in region.results])


@dataclass(frozen=True)
class Binding:
    """What a graph parameter or result is bound to at run time.

    kind ``arg``/``out``: the i-th positional argument / result of the function;
    ``var``: a variable (``key`` is its id) read on entry or written on exit.
    """

    kind: str
    key: Any

    def __str__(self) -> str:
        return f"{self.kind}:{self.key}"


@dataclass(eq=False)
class VarRef:
    """A variable as the graph sees it: an id, a name and an abstract value."""

    id: int
    name: str
    aval: Aval


@dataclass(eq=False)
class Graph:
    """A traced function: the top region plus what its parameters and results are bound to."""

    name: str
    region: Region
    param_bindings: list[Binding]
    result_bindings: list[Binding]
    variables: dict[int, VarRef] = field(default_factory=dict)
    shards: int = 1  # the IPUs one copy of the program spans (ipu.scopes.ipu_shard, pipeline stages)

    @property
    def params(self) -> list[Value]:
        return self.region.params

    @property
    def results(self) -> list[Value]:
        return self.region.results

    def walk(self) -> Iterator[Node]:
        return self.region.walk()

    def copy(self) -> Graph:
        """A structural copy (new nodes, regions and values; attributes shared): passes may rewrite it
        without touching this graph, which the traced function keeps."""
        values: dict[int, Value] = {}
        return Graph(self.name, _copy_region(self.region, values), list(self.param_bindings),
                     list(self.result_bindings), dict(self.variables), self.shards)

    def arg_params(self) -> list[tuple[int, Value]]:
        return [(b.key, p) for b, p in zip(self.param_bindings, self.params) if b.kind == "arg"]

    def as_text(self) -> str:
        # why: the printer is written over these classes (it imports this module)
        from popjit.ir.graph_printer import print_graph

        return print_graph(self)

    def fingerprint(self) -> str:
        """A hash of the graph's structure, shapes, attributes and constant contents."""
        # why: the printer is written over these classes (it imports this module)
        from popjit.ir.graph_printer import print_graph

        return hashlib.sha256(print_graph(self, digest_constants=True).encode()).hexdigest()

    def __str__(self) -> str:
        return self.as_text()


def attr_key(v: Any) -> Any:
    """A hashable, content-based key for an attribute value (arrays by their bytes)."""
    if isinstance(v, np.ndarray):
        return ("ndarray", v.shape, str(v.dtype), hashlib.sha1(np.ascontiguousarray(v).tobytes()).hexdigest())
    if isinstance(v, (list, tuple)):
        return tuple(attr_key(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, attr_key(x)) for k, x in v.items()))
    if isinstance(v, float) and v != v:
        return ("nan",)
    return v
