"""Lowering: graph IR → loop IR.

Walks the graph in program order, turning each value into a :class:`~popjit.ir.lazy.Lazy`
with its op's ``lower`` rule. Values the fusion plan marks as materialized get a kernel that
writes them into a buffer; everything else stays an expression and fuses into its consumers.
Loops carry their values in buffers; a ``while`` with a static trip count becomes ``Repeat``.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator, Sequence

import numpy as np

from popjit import dtypes
from popjit.dtypes import DType
from popjit.graph.passes.fusion import FusionPlan, plan_fusion
from popjit.ir.graph import Graph, Node, Region, Value
from popjit.ir.lazy import Lazy
from popjit.ir.loop import Apply, Buffer, Copy, If, Kernel, Program, Repeat, Stmt, Store, While, flat_index, ivar
from popjit.ir.loop import row_major_strides as rm
from popjit.loop.streams import StreamLowering
from popjit.ops import registry
from popjit.ops.source import RESERVE


class LowerCtx:
    """State of one lowering: the program being built, the current block and the value map."""

    def __init__(self, graph: Graph, plan: FusionPlan) -> None:
        self.graph = graph
        self.plan = plan
        self.program = Program(graph.name, [])
        self.block: list[Stmt] = self.program.body
        self.env: dict[int, Lazy] = {}
        self._count = 0
        self._consts: dict[str, Buffer] = {}
        self.stream = StreamLowering(self)
        self.placing: Node | None = None  # the node being lowered: its statements go where it was placed

    # -- building blocks -----------------------------------------------------------------------
    def name(self, base: str, ops: Sequence[str]) -> str:
        self._count += 1
        tail = [o for o in ops if o not in ("constant",)][-3:]
        return f"k{self._count}_" + "_".join([*tail] if tail and tail[-1] == base else [*tail, base])

    def new_temp(self, shape: Sequence[int], dtype: DType, hint: str = "t") -> Buffer:
        buf = Buffer(f"t{len(self.program.temps)}", shape, dtype, "temp")
        self.program.temps.append(buf)
        return buf

    def constant_buffer(self, value: np.ndarray) -> Buffer:
        key = hashlib.sha1(value.tobytes() + str((value.shape, value.dtype)).encode()).hexdigest()
        if key not in self._consts:
            buf = Buffer(f"c{len(self.program.consts)}", value.shape, dtypes.as_dtype(value.dtype), "const",
                         value=np.ascontiguousarray(value))
            self.program.consts.append(buf)
            self._consts[key] = buf
        return self._consts[key]

    def emit(self, stmt: Stmt) -> None:
        if self.placing is not None:
            stmt.shard, stmt.backward = self.placing.shard, self.placing.backward
        self.block.append(stmt)

    @contextlib.contextmanager
    def into(self, block: list[Stmt]) -> Iterator[list[Stmt]]:
        saved, self.block = self.block, block
        try:
            yield block
        finally:
            self.block = saved

    def materialize(self, x: Lazy, hint: str = "t", into: Buffer | None = None) -> Lazy:
        """``x`` in a dense buffer: itself if it already is one, else a kernel that writes it."""
        if into is None and x.view is not None and x.view.is_contiguous:
            return x
        buf = into or self.new_temp(x.shape, x.dtype, hint)
        assert buf.size == x.size, f"materialize: {x.shape} into {buf!r}"
        if x.size == 0:  # nothing to compute: no kernel over an empty domain
            return Lazy.of_buffer(buf, x.shape)
        if x.view is not None and x.view.is_contiguous and x.dtype == buf.dtype:
            self.emit(Copy(buf, x.view.buffer))
            return Lazy.of_buffer(buf, x.shape)
        idx = tuple(ivar(f"i{k}") for k in range(len(x.shape)))
        value = x.build(idx)
        if value.dtype != buf.dtype:
            value = Apply("cast", (value,), buf.dtype, (("dtype", buf.dtype),))
        store = Store(buf, flat_index(idx, rm(x.shape)), value)
        self.emit(Kernel(self.name("copy" if not x.ops else x.ops[-1], x.ops), tuple(x.shape), [store], None, x.ops))
        return Lazy.of_buffer(buf, x.shape)

    # -- graph walking ---------------------------------------------------------------------------
    def lower_nodes(self, region: Region) -> None:
        for node in region.nodes:
            op = registry.get(node.op)
            lower = registry.facet(op, "lower")
            outer, self.placing = self.placing, node
            try:
                outs = lower(self, node, [self.env[v.uid] for v in node.inputs])
                assert len(outs) == len(node.outputs), f"{node.op} gave {len(outs)} values, not {len(node.outputs)}"
                for v, lz in zip(node.outputs, outs):
                    assert lz.shape == v.shape, f"{node.op}: lowered shape {lz.shape} != {v.shape}"
                    self.env[v.uid] = self.materialize(lz, node.op) if v.uid in self.plan else lz
            finally:
                self.placing = outer

    def bind(self, values: Sequence[Value], buffers: Sequence[Buffer]) -> None:
        for v, b in zip(values, buffers):
            self.env[v.uid] = Lazy.of_buffer(b, v.shape)

    def lower_while(self, node: Node, args: list[Lazy]) -> list[Lazy]:
        cond, body = node.regions
        carried = [self.new_temp(v.shape, v.dtype, "carried") for v in node.inputs]
        trip = node.attrs.get("trip_count")
        limit = node.attrs.get("max_iterations")
        whole = trip is not None and (limit is None or limit >= trip)  # every iteration runs
        for v, lz, buf in zip(node.inputs, args, carried):
            if not (whole and v.producer is not None and v.producer.op == RESERVE):  # a reserved stack: unfilled
                self.materialize(lz, into=buf)
        cond_block: list[Stmt] = []
        pred = None
        if trip is None:
            with self.into(cond_block):
                self.bind(cond.params, carried)
                self.lower_nodes(cond)
                pred = self.materialize(self.env[cond.results[0].uid], into=self.new_temp((), dtypes.bool_, "pred"))
        body_block: list[Stmt] = []
        self.stream.trips.append(None if trip is None else (trip if limit is None else min(trip, limit)))
        with self.into(body_block):
            self.bind(body.params, carried)
            self.lower_nodes(body)
            self._write_back([self.env[v.uid] for v in body.results], carried)
        self.stream.trips.pop()
        if trip is not None:
            count = trip if limit is None else min(trip, limit)
            self.emit(Repeat(int(count), body_block, node.attrs.get("pipeline")))
        else:
            assert pred is not None and pred.view is not None
            self.emit(While(cond_block, pred.view.buffer, body_block, limit))
        return [Lazy.of_buffer(b) for b in carried]

    def _write_back(self, values: list[Lazy], targets: list[Buffer]) -> None:
        """Set each target buffer to its new value, all reads before any write (a swap stays a swap)."""
        overwritten = {b.uid for b in targets}
        staged = []
        for lz, buf in zip(values, targets):
            if lz.view is not None and lz.view.buffer is buf and lz.view.is_contiguous:
                continue
            src = self.materialize(lz, "next")
            assert src.view is not None
            if src.view.buffer.uid in overwritten:
                src = self.materialize(src, "next", into=self.new_temp(src.shape, src.dtype, "next"))
            staged.append((src, buf))
        for src, buf in staged:
            assert src.view is not None
            self.emit(Copy(buf, src.view.buffer))

    def lower_if(self, node: Node, args: list[Lazy]) -> list[Lazy]:
        pred = self.materialize(args[0], "pred")
        outs = [self.new_temp(v.shape, v.dtype, "branch") for v in node.outputs]
        blocks: list[list[Stmt]] = [[], []]
        self.stream.trips.append(None)  # a branch may or may not run
        for region, block in zip(node.regions, blocks):
            with self.into(block):
                self.lower_nodes(region)
                for v, buf in zip(region.results, outs):
                    self.materialize(self.env[v.uid], into=buf)
        self.stream.trips.pop()
        assert pred.view is not None
        self.emit(If(pred.view.buffer, blocks[0], blocks[1], node.attrs.get("weight_update_every")))
        return [Lazy.of_buffer(b) for b in outs]

    # -- the whole graph -----------------------------------------------------------------------------
    def lower_graph(self) -> Program:
        g = self.graph
        for p, b in zip(g.params, g.param_bindings):
            kind = "arg" if b.kind == "arg" else "var"
            buf = Buffer(f"{'a' if kind == 'arg' else 'v'}{b.key}", p.shape, p.dtype, kind, binding=b.key)
            (self.program.args if kind == "arg" else self.program.variables).append(buf)
            self.env[p.uid] = Lazy.of_buffer(buf, p.shape)
        self.lower_nodes(g.region)
        self._lower_results()
        self.stream.finish()
        return self.program

    def _lower_results(self) -> None:
        g, prog = self.graph, self.program
        claimed: set[int] = set()
        outs: dict[int, Buffer] = {}
        for v, b in zip(g.results, g.result_bindings):
            if b.kind != "out":
                continue
            lz = self.env[v.uid]
            buf = lz.view.buffer if lz.view is not None and lz.view.is_contiguous else None
            if buf is not None and buf.kind == "temp" and buf.uid not in claimed and buf.shape == v.shape:
                prog.temps.remove(buf)
                buf.kind, buf.binding, buf.name = "out", b.key, f"o{b.key}"
                claimed.add(buf.uid)
                outs[b.key] = buf
            else:
                out = Buffer(f"o{b.key}", v.shape, v.dtype, "out", binding=b.key)
                self.materialize(lz, into=out)
                outs[b.key] = out
        prog.outs = [outs[k] for k in sorted(outs)]
        var_bufs = {buf.binding: buf for buf in prog.variables}
        updates, targets = [], []
        for v, b in zip(g.results, g.result_bindings):
            if b.kind == "var":
                if b.key not in var_bufs:
                    buf = Buffer(f"v{b.key}", v.shape, v.dtype, "var", binding=b.key)
                    prog.variables.append(buf)
                    var_bufs[b.key] = buf
                updates.append(self.env[v.uid])
                targets.append(var_bufs[b.key])
        self._write_back(updates, targets)


def lower(graph: Graph, plan: FusionPlan | None = None) -> Program:
    """Lower a verified graph to a loop-IR program."""
    return LowerCtx(graph, plan or plan_fusion(graph)).lower_graph()
