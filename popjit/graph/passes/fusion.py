"""Fusion planning: which values get their own buffer (a kernel boundary), which fuse.

Element-wise ops, movements and constants fuse into their consumers by default. A value is
*materialized* (computed by its own kernel into a buffer) when

- it is a region result, a loop-carried value or a graph result;
- more than one node uses it (recomputing it per use would repeat work);
- a nested region (a loop body) captures it from outside (it would be recomputed per iteration);
- its fused expression has grown past ``MAX_FUSED_OPS`` ops (bounds codelet size);
- an element-wise consumer reads each of its elements several times through a broadcast over an outer
  axis (so the codelet cannot hoist it out of its inner loop) and its fused expression costs at least
  ``REPEATED_OPS`` ops: a max-pool's gradient spreading the col2im sum of the next convolution's gradient
  over each pooling window would compute that sum once per window entry;
- its producer is a reduction, matmul or control-flow op (their lowering always writes buffers).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from popjit.ir.graph import Graph, Node, Region
from popjit.ops import registry

MAX_FUSED_OPS = 48
REPEATED_OPS = 8
_FREE_KINDS = (registry.MOVEMENT, registry.SOURCE)
# movements at a run-time position: no strided view of them exists, so a matmul copies them out
_INDEXED = ("gather", "dynamic_slice")


@dataclass
class FusionPlan:
    """The set of value uids that are materialized, with the reason for each."""

    materialized: dict[int, str] = field(default_factory=dict)
    uses: Counter = field(default_factory=Counter)  # value uid -> how many nodes (and region results) use it

    def __contains__(self, uid: int) -> bool:
        return uid in self.materialized

    def mark(self, uid: int, reason: str) -> None:
        self.materialized.setdefault(uid, reason)

    def as_text(self) -> str:
        reasons = Counter(self.materialized.values())
        return "fusion plan: " + ", ".join(f"{n} {r}" for r, n in sorted(reasons.items()))


def _uses(region: Region, counts: Counter, captured: set[int], depth_of: dict[int, int], depth: int) -> None:
    for p in region.params:
        depth_of[p.uid] = depth
    for node in region.nodes:
        for v in node.inputs:
            counts[v.uid] += 1
            if depth_of.get(v.uid, depth) < depth:
                captured.add(v.uid)
        for r in node.regions:
            _uses(r, counts, captured, depth_of, depth + 1)
            for v in r.results:
                counts[v.uid] += 1
        for v in node.outputs:
            depth_of[v.uid] = depth


def _producers(region: Region, out: dict[int, Node]) -> None:
    for node in region.nodes:
        for v in node.outputs:
            out[v.uid] = node
        for r in node.regions:
            _producers(r, out)


def plan_fusion(graph: Graph) -> FusionPlan:
    plan = FusionPlan()
    counts = plan.uses
    captured: set[int] = set()
    _uses(graph.region, counts, captured, {}, 0)
    producer: dict[int, Node] = {}
    _producers(graph.region, producer)
    for v in graph.results:
        plan.mark(v.uid, "result")
    matmul_uses = Counter(v.uid for node in graph.walk() if registry.get(node.op).kind == registry.MATMUL
                          for v in node.inputs)
    fused_size: dict[int, int] = {}
    for node in graph.walk():
        op = registry.get(node.op)
        for r in node.regions:
            for v in r.results:
                plan.mark(v.uid, "region result")
        if op.is_elementwise:
            _mark_repeated_reads(node, producer, fused_size, plan)
        size = _own_ops(node, op) + sum(fused_size.get(v.uid, 0) for v in node.inputs if v.uid not in plan)
        for v in node.outputs:
            fused_size[v.uid] = size
            if op.kind in (registry.REDUCE, registry.MATMUL, registry.CONTROL):
                continue
            if v.uid in captured and not (node.op == "constant" and v.aval.size == 1):
                plan.mark(v.uid, "captured by a loop")
            elif counts[v.uid] > 1 and op.kind not in _FREE_KINDS:
                plan.mark(v.uid, "multiple uses")
            elif node.op in _INDEXED and matmul_uses[v.uid] > 1:
                plan.mark(v.uid, "several matmul operands")  # each would copy it out again
            elif counts[v.uid] > 1:
                _mark_through_movements(node, producer, counts, plan)
            elif size > MAX_FUSED_OPS:
                plan.mark(v.uid, "fusion size limit")
                fused_size[v.uid] = 0
    _mark_crossing_shards(graph, producer, plan)
    return plan


def _own_ops(node: Node, op: registry.OpDef) -> int:
    """What one output element of ``node`` adds to a fused expression: one op, or what its op says (a
    col2im sums several window entries per element)."""
    ops = op.extra.get("fused_ops")
    return 1 if ops is None else ops(**node.attrs)


def _mark_repeated_reads(node: Node, producer: dict[int, Node], fused_size: dict[int, int], plan: FusionPlan) -> None:
    """Materialize an input that the element-wise ``node`` broadcasts (reads each element of several
    times) if its fused expression costs ``REPEATED_OPS`` or more: computed once into a buffer rather
    than once per read. The buffer is the value behind any reshapes of it, which then cost one op each."""
    out_shape = node.outputs[0].aval.shape
    for v in node.inputs:
        if v.uid in plan or fused_size.get(v.uid, 0) < REPEATED_OPS or not _broadcast_outside(v.aval.shape, out_shape):
            continue
        views = []
        while (p := producer.get(v.uid)) is not None and p.op == "reshape" and p.inputs[0].uid not in plan:
            views.append(v)
            v = p.inputs[0]
        plan.mark(v.uid, "read repeatedly through a broadcast")
        for ops, view in enumerate(reversed(views), start=1):
            fused_size[view.uid] = ops


def _broadcast_outside(shape: tuple[int, ...], out_shape: tuple[int, ...]) -> bool:
    """Whether a value of ``shape`` broadcast to ``out_shape`` repeats along an axis with a varying axis
    inside it (a broadcast only along the innermost axes is loop-invariant there, and hoisted)."""
    padded = (1,) * (len(out_shape) - len(shape)) + tuple(shape)
    repeated = [d == 1 < o for d, o in zip(padded, out_shape)]
    varying = [d == o > 1 for d, o in zip(padded, out_shape)]
    return any(r and any(varying[j + 1:]) for j, r in enumerate(repeated))


def _mark_crossing_shards(graph: Graph, producer: dict[int, Node], plan: FusionPlan) -> None:
    """A value computed on one IPU and used on another is computed where it was placed and sent over (an
    inter-IPU copy), not recomputed by its user: each one is materialized."""
    for node in graph.walk():
        for v in node.inputs:
            p = producer.get(v.uid)
            if (p is not None and p.op != "constant" and p.shard is not None and node.shard is not None
                    and p.shard != node.shard and registry.get(p.op).kind != registry.CONTROL):
                plan.mark(v.uid, "used on another IPU")


def _mark_through_movements(node: Node, producer: dict[int, Node], counts: Counter, plan: FusionPlan) -> None:
    """A movement with several uses: materialize the element-wise value it moves, not the view."""
    while node.inputs and registry.get(node.op).kind == registry.MOVEMENT:
        src = node.inputs[0]
        p = producer.get(src.uid)
        if p is None:
            return
        if registry.get(p.op).is_elementwise:
            plan.mark(src.uid, "multiple uses (through a view)")
            return
        node = p
