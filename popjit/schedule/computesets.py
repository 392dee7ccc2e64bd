"""Compute sets: the vertices of each loop-IR statement on each tile, their exchange and cycles.

One :class:`ComputeSet` per BSP superstep. A fused element-wise kernel is ONE compute set; a
reduction is a partials compute set plus, when partials live on other tiles than their output,
a reduce-at-destination compute set (``docs/ipu_hardware.md`` §4.4); a matmul is an AMP partials compute set plus a
ReduceAdd compute set when the depth is split (§4.1); a loop-IR ``Copy`` is a Poplar ``Copy``
program (exchange plus on-tile copies). Per-tile figures are arrays over tiles.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from popjit import dtypes
from popjit.dtypes import DType
from popjit.errors import UnimplementedError
from popjit.ir.loop import (
    Apply,
    Buffer,
    Collective,
    Const,
    Copy,
    Expr,
    IndexValue,
    Kernel,
    Load,
    LoopFunctor,
    MatMul,
    flat_index,
    ivar,
    row_major_strides,
)
from popjit.ops.reduce import REDUCTIONS
from popjit.ops.registry import BINARY, UNARY, ElementCost
from popjit.ops.registry import get as get_op
from popjit.schedule import cost
from popjit.schedule.access import Pieces, Ref, data_dependent, walk
from popjit.schedule.intervals import (
    Exchange,
    exchange_of,
    merged_intervals,
    split_runs,
    union_by_group,
    unknown_exchange,
)
from popjit.schedule.mapping import (
    LinearAllocator,
    TileMapping,
    linear_mapping,
    linear_partitions,
    single_tile_mapping,
)
from popjit.schedule.matmul_plan import (
    Blocked,
    MatMulPlan,
    block_exchange,
    operand_layout,
    output_layout,
    plan_matmul,
    tile_blocks,
)
from popjit.schedule.target import PlanOptions, Target

#: The kind of a step that copies a tensor from one IPU of a multi-IPU program to another.
INTER_IPU_COPY = "inter-ipu copy"


@dataclass(frozen=True)
class Vertex:
    """Vertices of one codelet on one tile (``count`` instances)."""

    codelet: str
    tile: int
    count: int


@dataclass(eq=False)
class ComputeSet:
    """One superstep: ``Execute(cs)`` or a ``Copy`` program, with arrays over tiles.

    ``cycles`` = (sync + exchange-in, if any) + sync + slowest tile's compute
    (+ exchange-out + sync if results are sent elsewhere), §2.2.
    """

    name: str
    kind: str
    codelets: dict[str, np.ndarray]  # codelet -> vertices per tile
    compute_cycles: np.ndarray
    exchange_in: Exchange
    target: Target
    exchange_out: Exchange | None = None
    temp_bytes: np.ndarray | None = None  # exchange buffers and partials live during this step
    state_bytes: np.ndarray | None = None  # vertex instance state
    code_bytes: dict[str, int] = field(default_factory=dict)  # codelet -> code size per tile
    copy_descriptor_bytes: np.ndarray | None = None
    elements: np.ndarray | None = None
    flops: int = 0
    reads: frozenset[int] = frozenset()
    writes: frozenset[int] = frozenset()
    program: str = "Execute"
    note: str = ""
    executions: int = 1  # times it runs per program run (loop counts multiplied), set by the tree
    link_cycles: int = 0  # traffic over IPU-Links: a collective's to the other replicas, an inter-IPU copy's
    index: int = -1  # position in the schedule's step list
    ipu: int = 0  # the IPU of a multi-IPU program it runs on (an inter-IPU copy: the receiving one)
    backward: bool = False  # part of a gradient computation
    passes: int = 1  # a matmul's serial passes: its steps run this many times in a row (a Repeat)

    @property
    def tiles(self) -> int:
        return self.target.tiles

    @property
    def vertices(self) -> np.ndarray:
        total = np.zeros(self.tiles, np.int64)
        for v in self.codelets.values():
            total += v
        return total

    @property
    def tiles_used(self) -> int:
        return int(np.count_nonzero(self.vertices | (self.compute_cycles > 0)))

    @property
    def exchange_in_cycles(self) -> int:
        return self.exchange_in.cycles(self.target.exchange_bytes_per_cycle)

    @property
    def exchange_out_cycles(self) -> int:
        return self.exchange_out.cycles(self.target.exchange_bytes_per_cycle) if self.exchange_out else 0

    @property
    def max_compute_cycles(self) -> int:
        return int(self.compute_cycles.max(initial=0))

    @property
    def phases(self) -> list[tuple[str, int]]:
        """The superstep in order as ``(kind, cycles)``, kind ``sync``, ``exchange`` or ``compute``: a sync and
        the exchange-in (if any), the sync before compute, the slowest tile's compute, then the exchange-out
        and its sync (if any). The execution trace of a profile shows these."""
        if self.kind == INTER_IPU_COPY:  # every IPU syncs, then the data crosses the IPU-Links
            return [("sync", self.target.host_sync_cycles), ("link", self.link_cycles)]
        sync = self.target.sync_cycles
        ex_in, ex_out = self.exchange_in_cycles, self.exchange_out_cycles
        out = [("sync", sync), ("exchange", ex_in)] if ex_in else []
        if self.link_cycles:
            out += [("sync", self.target.host_sync_cycles), ("link", self.link_cycles)]
        out += [("sync", sync), ("compute", self.max_compute_cycles)]
        return out + ([("exchange", ex_out), ("sync", sync)] if ex_out else [])

    @property
    def cycles(self) -> int:
        return sum(c for _, c in self.phases)

    @property
    def exchange_phases(self) -> list[Exchange]:
        return [e for e in (self.exchange_in, self.exchange_out) if e is not None and e.any]

    def iter_vertices(self) -> Iterator[Vertex]:
        """Every (codelet, tile, count), for inspection; the arrays are the source of truth."""
        for codelet, per_tile in self.codelets.items():
            for t in np.flatnonzero(per_tile):
                yield Vertex(codelet, int(t), int(per_tile[t]))


# ----------------------------------------------------------------------------------------------
# Expressions → ops


def _op_cost(name: str) -> tuple[str, ElementCost]:
    try:
        op = get_op(name)
    except UnimplementedError:
        return UNARY, cost.DEFAULT_COST
    c = op.cost if isinstance(op.cost, ElementCost) else cost.DEFAULT_COST
    return op.kind, c


def _is_scalar(e: Expr) -> bool:
    return isinstance(e, Const) or (isinstance(e, Load) and e.index.is_const)


OpUse = cost.OpUse


class _OpUses(LoopFunctor):
    """The element-wise ops an expression computes per point, operands before their users."""

    def __init__(self) -> None:
        self.uses: list[OpUse] = []

    def visit_apply(self, e: Apply) -> None:
        for a in reversed(e.args):
            self.expr(a)
        kind, c = _op_cost(e.op)
        fam = cost.family(e.args[0].dtype if e.args else e.dtype)
        scalar = kind == BINARY and any(_is_scalar(a) for a in e.args)
        cast_to = cost.family(e.dtype) if e.op == "cast" else ""
        self.uses.append(OpUse(e.op, kind, fam, c, scalar, cast_to))

    def visit_index_value(self, e: IndexValue) -> None:
        self.uses.append(OpUse("iota", UNARY, cost.family(e.dtype), cost.IOTA_COST))

    def visit_load(self, e: Load) -> None:
        pass

    def visit_const(self, e: Const) -> None:
        pass


def expression_ops(exprs: list[Expr]) -> list[OpUse]:
    """The element-wise ops a kernel computes per point, in evaluation order."""
    walker = _OpUses()
    for e in exprs:
        walker.expr(e)
    return walker.uses


def _copy_op(dtype: DType) -> OpUse:
    return OpUse("copy", UNARY, cost.family(dtype), cost.COPY_COST)


# ----------------------------------------------------------------------------------------------
# The builder


class Builder:
    """Turns statements into compute sets, deciding each buffer's tile mapping on first use."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.mappings: dict[int, TileMapping] = {}
        self.buffers: dict[int, Buffer] = {}
        self.origin: dict[int, str] = {}  # how each mapping was chosen
        self.linear = LinearAllocator(target)
        self.plans: dict[int, MatMulPlan] = {}

    # -- mappings -------------------------------------------------------------------------------
    def mapping(self, buf: Buffer) -> TileMapping:
        """The buffer's mapping, allocating a linear one if it has none yet."""
        if buf.uid not in self.mappings:
            self.assign(buf, self.linear(buf.size, buf.dtype), "linear")
        return self.mappings[buf.uid]

    def assign(self, buf: Buffer, mapping: TileMapping, origin: str) -> None:
        self.mappings[buf.uid] = mapping
        self.buffers[buf.uid] = buf
        self.origin[buf.uid] = origin

    def mapped(self, buf: Buffer) -> bool:
        return buf.uid in self.mappings

    def plan(self, mm: MatMul) -> MatMulPlan:
        key = id(mm)
        if key not in self.plans:
            options = PlanOptions(*mm.plan) if mm.plan else self.target.plan_options(mm.convolution)
            self.plans[key] = plan_matmul(mm.batch, mm.m, mm.n, mm.k, mm.a.dtype, self.target,
                                          mm.batch > 1 and mm.a_batch_stride == 0,
                                          mm.batch > 1 and mm.b_batch_stride == 0, options, mm.name)
        return self.plans[key]

    def operand_layout(self, mm: MatMul, which: str) -> Blocked:
        plan = self.plan(mm)
        stride = mm.a_batch_stride if which == "a" else mm.b_batch_stride
        groups = mm.batch if stride else 1
        return operand_layout(plan, which, groups, mm.ta if which == "a" else mm.tb)

    def allocate_for_matmul(self, buf: Buffer, mm: MatMul) -> None:
        """``createMatMulInputLHS/RHS``: lay an input out as the matmul's plan wants (§4.2)."""
        which = "a" if buf is mm.a else "b"
        layout = self.operand_layout(mm, which)
        if layout.groups * layout.rows * layout.cols == buf.size:
            self.assign(buf, layout.mapping(self.target.tiles), f"matmul {mm.name} operand {which}")
        else:
            self.mapping(buf)

    # -- control flow (one IPU: nothing to track; see ShardedBuilder) --------------------------------
    def enter_loop(self, body: list) -> None:
        """A loop's body is about to be built."""

    def branch(self) -> contextlib.AbstractContextManager[None]:
        """Building one branch of an ``If``."""
        return contextlib.nullcontext()

    # -- statements -----------------------------------------------------------------------------
    def steps_of(self, stmt: Kernel | MatMul | Copy | Collective) -> list[ComputeSet]:
        """The steps of one computing statement, marked as a gradient computation if it is one."""
        if isinstance(stmt, Kernel):
            steps = self.kernel(stmt)
        elif isinstance(stmt, MatMul):
            steps = self.matmul(stmt)
        elif isinstance(stmt, Copy):
            steps = [self.copy(stmt)]
        else:
            steps = [self.collective(stmt)]
        for cs in steps:
            cs.backward = stmt.backward
        return steps

    def kernel(self, k: Kernel) -> list[ComputeSet]:
        """One compute set for an element-wise kernel or scan; one or two for a reduction. A
        kernel with no points (an empty tensor) costs nothing."""
        points = k.size * (int(np.prod(k.reduce.rdomain, dtype=np.int64)) if k.reduce else 1)
        if points == 0:
            return []
        if k.reduce is not None and k.reduce.mode == "reduce":
            return self._reduction(k)
        return [self._elementwise(k)]

    def _output_mapping(self, k: Kernel) -> TileMapping:
        """Element-wise outputs clone the best-mapped same-size input read at the store's own
        index (§2.3); otherwise a new linear mapping."""
        out = k.stores[0]
        if not self.mapped(out.buf):
            same = [ld for ld in k.loads() if ld.buf.size == out.buf.size and ld.index == out.index]
            for ld in same:
                self.mapping(ld.buf)
            if same:
                best = min(same, key=lambda ld: self.mappings[ld.buf.uid].rank())
                self.assign(out.buf, self.mappings[best.buf.uid], f"follows {best.buf.name}")
        return self.mapping(out.buf)

    def _space(self, k: Kernel, with_reduce: bool) -> tuple[list[str], list[int]]:
        names = [f"i{d}" for d in range(len(k.domain))]
        dims = list(k.domain)
        if with_reduce and k.reduce is not None:
            names += [f"r{d}" for d in range(len(k.reduce.rdomain))]
            dims += list(k.reduce.rdomain)
        return names, dims

    def _read_exchange(self, pieces: Pieces, dst: np.ndarray, loads: list[Load], first_ref: int) -> Exchange:
        """Exchange bringing every load's remote elements to the computing tile."""
        ex = Exchange.zeros(self.target.tiles)
        by_buf: dict[int, list[int]] = {}
        for n, ld in enumerate(loads):
            by_buf.setdefault(ld.buf.uid, []).append(first_ref + n)
        for uid, refs in by_buf.items():
            buf = self.buffers[uid]
            known = [r for r in refs if not pieces.unknown[r]]
            if known:
                distinct = len(known) == 1 and pieces.injective[known[0]]
                ex = ex + exchange_of(np.concatenate([dst] * len(known)),
                                      np.concatenate([pieces.tiles[r] for r in known]),
                                      np.concatenate([pieces.interval(r)[0] for r in known]),
                                      np.concatenate([pieces.interval(r)[1] for r in known]),
                                      buf.dtype.size, self.target.tiles, distinct)
            if len(known) < len(refs):
                ex = ex + unknown_exchange(dst, pieces.length, self.mappings[uid], buf.dtype.size)
        return ex

    def _write_exchange(self, pieces: Pieces, src: np.ndarray, stores: list, first_ref: int) -> Exchange | None:
        """Exchange sending results computed on one tile to the tile that holds them."""
        ex = None
        for n, st in enumerate(stores):
            r = first_ref + n
            if pieces.unknown[r]:
                part = unknown_exchange(src, pieces.length, self.mappings[st.buf.uid], st.buf.dtype.size)
            else:
                lo, hi = pieces.interval(r)
                part = exchange_of(pieces.tiles[r], src, lo, hi, st.buf.dtype.size, self.target.tiles)
            ex = part if ex is None else ex + part
        return ex if ex is not None and ex.any else None

    def _elementwise(self, k: Kernel) -> ComputeSet:
        T, W = self.target.tiles, self.target.workers
        out_map = self._output_mapping(k)
        loads = k.loads()
        scan = k.reduce is not None
        names, dims = self._space(k, with_reduce=scan)
        if data_dependent(k.stores[0].index):  # a scatter: compute where the data comes from
            compute, extra = self._point_ref(loads, names, dims), k.stores
        else:
            compute, extra = Ref(k.stores[0].index, out_map), k.stores[1:]
        refs = [compute] + [Ref(ld.index, self.mapping(ld.buf)) for ld in loads]
        refs += [Ref(s.index, self.mapping(s.buf)) for s in extra]
        pieces = walk(names, dims, refs, compute=0)
        dst = pieces.tiles[0]
        elements = np.bincount(dst, weights=pieces.length, minlength=T).astype(np.int64)
        lo, hi = pieces.interval(0)
        regions = union_by_group(dst, lo, hi, T)[1]
        ex_in = self._read_exchange(pieces, dst, loads, 1)
        ex_out = self._write_exchange(pieces, dst, extra, 1 + len(loads))
        out_dtype = k.stores[0].buf.dtype
        ops = expression_ops([s.value for s in k.stores])
        if not ops and loads:
            ops = [_copy_op(out_dtype)]
        busy = elements > 0
        grain = self.target.grain(out_dtype)
        nv = np.where(busy, np.minimum(W, np.maximum(1, cost.ceil_div(elements, 2 * grain))), 0)
        fields = 1 + len({ld.buf.uid for ld in loads}) + len(extra)
        if scan:
            assert k.reduce is not None
            fam = cost.family(k.stores[0].value.dtype)
            codelets, code, compute, state = self._scan_vertices(k.reduce.op, fam, ops, elements, regions, nv)
        elif not ops:
            codelets, code, compute, state = self._fill_vertices(out_dtype, elements, nv, fields)
        else:
            codelets, code, compute, state = self._elementwise_vertices(ops, elements, regions, nv, fields)
        flops = sum(o.cost.flops for o in ops if o.name not in ("copy", "iota")) * int(elements.sum())
        return ComputeSet(
            k.name, "scan" if scan else "elementwise", codelets, compute, ex_in, self.target, ex_out,
            temp_bytes=ex_in.bytes_in + (ex_out.bytes_out if ex_out else 0), state_bytes=state, code_bytes=code,
            elements=elements, flops=flops, reads=frozenset(ld.buf.uid for ld in loads),
            writes=frozenset(s.buf.uid for s in k.stores),
        )

    def _point_ref(self, loads: list[Load], names: list[str], dims: list[int], fallback: Ref | None = None) -> Ref:
        """Where a kernel's points are computed when its output does not say: at its largest
        input read at a compile-time index, else ``fallback``, else spread linearly [U]."""
        known = [ld for ld in loads if not data_dependent(ld.index)]
        if known:
            primary = max(known, key=lambda ld: ld.buf.size)
            return Ref(primary.index, self.mapping(primary.buf))
        if fallback is not None and not data_dependent(fallback.index):
            return fallback
        points = int(np.prod(dims, dtype=np.int64)) if dims else 1
        flat = flat_index([ivar(n) for n in names], row_major_strides(dims))
        return Ref(flat, linear_mapping(points, dtypes.float32, self.target, self.linear.offset))

    def _scan_vertices(self, op: str, fam: str, ops: list[OpUse], elements: np.ndarray, regions: np.ndarray,
                       nv: np.ndarray) -> tuple[dict, dict, np.ndarray, np.ndarray]:
        """A scan (cumsum) computed where its output lives [U]: the reduce-worker estimate with one
        output per element, plus the fused element-wise prelude; carries between tiles ignored."""
        W = self.target.workers
        per = cost.ceil_div(elements, W)
        compute = W * (cost.reduce_thread_cycles(op, fam, per, per, scan=True)
                       + sum(o.loop(per) for o in ops if o.name != "copy"))
        codelet = f"popjit::Scan<{REDUCTIONS[op].poplar},{fam}>"
        per_vertex = cost.ceil_div(regions, np.maximum(nv, 1))
        state = nv * (cost.STATE_BYTES["reduce"] + cost.STATE_REGION_BYTES * per_vertex)
        return {codelet: nv}, {codelet: cost.CODE_BYTES["scan"]}, compute, state

    def _fill_vertices(self, dtype: DType, elements: np.ndarray, nv: np.ndarray,
                       fields: int) -> tuple[dict, dict, np.ndarray, np.ndarray]:
        """A kernel storing only constants: ``Fill`` worker vertices sharing each tile's elements."""
        per = cost.ceil_div(elements, np.maximum(nv, 1))
        compute = np.where(elements > 0, self.target.workers * cost.fill_cycles(dtype, per), 0)
        codelet = cost.vertex_name([], "1D")
        return {codelet: nv}, {codelet: cost.CODE_BYTES["fill"]}, compute, nv * cost.STATE_FIELD_BYTES * (fields + 1)

    def _elementwise_vertices(self, ops: list[OpUse], elements: np.ndarray, regions: np.ndarray, nv: np.ndarray,
                              fields: int) -> tuple[dict, dict, np.ndarray, np.ndarray]:
        """Per tile: one MultiVertex for one contiguous region, else up to 6 worker vertices (§3.3)."""
        W = self.target.workers
        busy = elements > 0
        one = busy & (regions <= 1)
        two = busy & ~one
        c1 = cost.elementwise_1d_cycles(ops, elements, W)
        c2 = cost.elementwise_2d_cycles(ops, elements, regions, nv, W)
        compute = np.where(one, c1, np.where(two, c2, 0))
        name1, name2 = cost.vertex_name(ops, "1D"), cost.vertex_name(ops, "2D")
        codelets: dict[str, np.ndarray] = {}
        code: dict[str, int] = {}
        if one.any():
            codelets[name1] = one.astype(np.int64)
            code[name1] = cost.fused_code_bytes(len(ops), "1D")
        if two.any():
            codelets[name2] = np.where(two, nv, 0)
            code[name2] = cost.fused_code_bytes(len(ops), "2D")
        per_vertex_regions = cost.ceil_div(regions, np.maximum(nv, 1))
        state = np.where(one, cost.STATE_FIELD_BYTES * (fields + 1), 0) + np.where(
            two, nv * fields * (cost.STATE_FIELD_BYTES + cost.STATE_REGION_BYTES * per_vertex_regions), 0)
        return codelets, code, compute, state

    # -- reductions ----------------------------------------------------------------------------
    def _reduction(self, k: Kernel) -> list[ComputeSet]:
        """Partials on the tiles holding the input, then reduce at the output's tiles (§4.4)."""
        T, W = self.target.tiles, self.target.workers
        red = k.reduce
        assert red is not None
        store = k.stores[0]
        out_known = self.mapped(store.buf)
        out_map = self.mappings[store.buf.uid] if out_known else single_tile_mapping(store.buf.size, 0, T)
        loads = k.loads()
        for ld in loads:
            self.mapping(ld.buf)
        names, dims = self._space(k, with_reduce=True)
        first = self._point_ref(loads, names, dims, Ref(store.index, out_map))
        refs = [first, Ref(store.index, out_map)] + [Ref(ld.index, self.mappings[ld.buf.uid]) for ld in loads]
        pieces = walk(names, dims, refs, compute=0)
        src = pieces.tiles[0]
        elements = np.bincount(src, weights=pieces.length, minlength=T).astype(np.int64)
        olo, ohi = pieces.interval(1)
        outputs, regions1 = union_by_group(src, olo, ohi, T)
        fam = cost.family(store.value.dtype)
        ops = expression_ops([store.value])
        per_e, per_o = cost.ceil_div(elements, W), cost.ceil_div(outputs, W)
        compute1 = W * (cost.reduce_thread_cycles(red.op, fam, per_e, per_o) + sum(o.loop(per_e) for o in ops))
        ex_in = self._read_exchange(pieces, src, loads, 2)
        pbytes = REDUCTIONS[red.op].partial_bytes(store.buf.dtype)
        partials = merged_intervals(src, olo, ohi)
        stage2 = self._final_stage(k, partials, pbytes, fam, out_map if out_known else None)
        codelet = f"popops::Reduce<{REDUCTIONS[red.op].poplar},{fam}>"
        grain = self.target.grain(store.value.dtype)
        nv = np.where(elements > 0, np.minimum(W, np.maximum(1, cost.ceil_div(elements, 2 * grain))), 0)
        stage1 = ComputeSet(
            k.name if stage2 is None else f"{k.name}/Reduce0", "reduce", {codelet: nv}, compute1, ex_in, self.target,
            temp_bytes=ex_in.bytes_in + outputs * pbytes,
            state_bytes=nv * cost.STATE_BYTES["reduce"] + cost.STATE_REGION_BYTES * regions1,
            code_bytes={codelet: cost.CODE_BYTES["reduce"]}, elements=elements,
            flops=int(elements.sum()) * (1 + sum(o.cost.flops for o in ops)),
            reads=frozenset(ld.buf.uid for ld in loads), writes=frozenset({store.buf.uid}),
        )
        if stage2 is None:
            return [stage1]
        stage2.temp_bytes = stage2.temp_bytes + outputs * pbytes
        return [stage1, stage2]

    def _final_stage(self, k: Kernel, partials: tuple[np.ndarray, ...], pbytes: int, fam: str,
                     out_map: TileMapping | None) -> ComputeSet | None:
        """The reduce-at-destination stage, or None when every output's partials are already on its
        tile. A new output is placed where its partials are if they are on one tile; otherwise
        linearly or spread one element per tile, whichever the estimate says is cheaper (§4.4)."""
        store = k.stores[0]
        if out_map is not None:
            return self._stage2(k, partials, pbytes, fam, out_map)
        exact = self._partials_mapping(store.buf, *partials)
        if exact is not None:
            self.assign(store.buf, exact, "reduction partials")
            return None
        target, size = self.target, store.buf.size
        linear = linear_mapping(size, store.buf.dtype, target, self.linear.offset)
        starts = linear_partitions(size, 1, 1, target.tiles)
        spread = TileMapping(size, starts, (np.arange(starts.size - 1) + self.linear.offset) % target.tiles,
                             target.tiles)
        options = []
        for mapping, name in ((linear, "linear"), (spread, "reduction spread")):
            cs = self._stage2(k, partials, pbytes, fam, mapping)
            options.append((cs.cycles if cs else 0, name, mapping, cs))
        _cycles, name, mapping, cs = min(options, key=lambda o: o[0])
        self.linear.advance(mapping.tiles.size)
        self.assign(store.buf, mapping, name)
        return cs

    def _partials_mapping(self, out: Buffer, tile: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> TileMapping | None:
        """The output laid out where its partials are, if each output's partials are on one tile."""
        order = np.argsort(lo, kind="stable")
        tile, lo, hi = tile[order], lo[order], hi[order]
        if lo.size and lo[0] == 0 and hi[-1] == out.size and np.array_equal(lo[1:], hi[:-1]):
            return TileMapping(out.size, np.append(lo, out.size), tile, self.target.tiles)
        return None

    def _stage2(self, k: Kernel, partials: tuple[np.ndarray, ...], pbytes: int, fam: str,
                out_map: TileMapping) -> ComputeSet | None:
        """Partials exchanged to the output's tiles and reduced there."""
        W = self.target.workers
        red = k.reduce
        assert red is not None
        flows = partial_flows(*partials, out_map, pbytes)
        if flows is None:
            return None
        ex, elements = flows
        outputs = np.where(elements > 0, out_map.elements_per_tile, 0)
        regions = np.where(elements > 0, out_map.regions_per_tile, 0)
        acc = "float" if fam == "half" else fam
        compute = W * cost.reduce_thread_cycles(red.op, acc, cost.ceil_div(elements, W), cost.ceil_div(outputs, W))
        nv = np.where(outputs > 0, np.minimum(W, np.maximum(1, outputs)), 0)
        codelet = f"popops::Reduce<{REDUCTIONS[red.op].poplar},{acc}>"
        return ComputeSet(
            f"{k.name}/Reduce1", "reduce", {codelet: nv}, compute, ex, self.target, temp_bytes=ex.bytes_in,
            state_bytes=nv * cost.STATE_BYTES["reduce"] + cost.STATE_REGION_BYTES * regions,
            code_bytes={codelet: cost.CODE_BYTES["reduce"]}, elements=elements, flops=int(elements.sum()),
            reads=frozenset(), writes=frozenset({k.stores[0].buf.uid}), note="reduce at destination",
        )

    # -- matmul ----------------------------------------------------------------------------------
    def matmul(self, mm: MatMul) -> list[ComputeSet]:
        """One pass of a matmul's plan: the partial products (``Conv1x1``) and, when the depth is split,
        their reduction (``Reduce``); a plan of several serial passes runs these steps once per pass
        (their ``passes``), each pass on its share of the output columns."""
        T = self.target.tiles
        plan = self.plan(mm)
        for buf in (mm.a, mm.b):
            if not self.mapped(buf):
                self.allocate_for_matmul(buf, mm)
        first, second = ("b", "a") if plan.swapped else ("a", "b")  # the product's operands
        ex_first = self._operand_exchange(getattr(mm, first), self.operand_layout(mm, first))
        if plan.bN % 2 == 0:
            ex_first = ex_first.supertile_paired()
        ex_second = self._operand_exchange(getattr(mm, second), self.operand_layout(mm, second))
        ex_in = ex_first + ex_second.divided(plan.serial)
        blocks = tile_blocks(plan, T)
        g, m, k = blocks["g"], blocks["m"], blocks["k"]
        n = np.minimum(blocks["n"], plan.n_pass) if plan.serial > 1 else blocks["n"]
        dtype = mm.a.dtype
        units, inch = self.target.conv_units(dtype), self.target.amp_in_channels(dtype)
        pbytes = plan.partial_bytes
        if dtype.is_floating:
            compute = cost.conv_partial_cycles(m, cost.ceil_div(n, units), cost.ceil_div(k, inch), g,
                                               dtype == dtypes.float16, units, inch, self.target.workers,
                                               half_partials=plan.half_partials)
            codelet = f"poplin::ConvPartial1x1Out<{_t(dtype)},{'half' if plan.half_partials else 'float'},{units}>"
            kind, code_key = "matmul", "ConvPartial1x1Out"
        else:
            compute = cost.int_matmul_cycles(m, n, k, g)
            codelet, kind, code_key = f"popjit::MatMulInt<{_t(dtype)}>", "matmul", "MatMulInt"
        busy = (m > 0) & (n > 0)
        partials = g * m * n * pbytes
        multi = plan.bK > 1
        out_layout = output_layout(plan)
        ex_out = self._result_exchange(mm.out, out_layout)
        ex_out = ex_out.divided(plan.serial) if ex_out is not None else None
        cs1 = ComputeSet(
            f"{mm.name}/Conv1x1" if multi else mm.name, kind, {codelet: busy.astype(np.int64)}, compute, ex_in,
            self.target, None if multi else ex_out,
            temp_bytes=ex_in.bytes_in + (partials if multi or dtype == dtypes.float16 else 0),
            state_bytes=busy * cost.STATE_BYTES[code_key], code_bytes={codelet: cost.CODE_BYTES[code_key]},
            elements=g * m * n, flops=2 * mm.batch * mm.m * mm.n * mm.k // plan.serial,
            reads=frozenset({mm.a.uid, mm.b.uid}), writes=frozenset() if multi else frozenset({mm.out.uid}),
            note=plan.describe(), passes=plan.serial,
        )
        if not multi:
            return [cs1]
        return [cs1, *self._matmul_reduce(mm, plan, blocks["red_rows"] * n * g, m * n * g, busy, partials, ex_out)]

    def _matmul_reduce(self, mm: MatMul, plan: MatMulPlan, outs: np.ndarray, held: np.ndarray, busy: np.ndarray,
                       partials: np.ndarray, ex_out: Exchange | None) -> list[ComputeSet]:
        """The reduction of a depth-split matmul's partials, one compute set per stage (PopLibs' multi-stage
        reduce, ``cost.reduce_stages``): a tile sums ``outs`` final outputs (times the partial products left
        after the stage), receiving the other tiles' partials of them; the last stage writes the output."""
        pbytes = plan.partial_bytes
        acc = "half" if plan.half_partials else "float"
        codelet = f"poplin::ReduceAdd<{_t(mm.out.dtype)},{acc}>"
        stages = [(int(d[0]), int(left[0])) for d, left in cost.reduce_stages(np.array([plan.bK]))]
        stages = [(d, left) for d, left in stages if d > 1]
        steps = []
        for i, (depth, left) in enumerate(stages):
            last = i == len(stages) - 1
            produced = outs * left
            bytes_in = (depth - 1) * produced * pbytes
            bytes_out = np.maximum(held - produced, 0) * pbytes  # the partials this tile does not sum
            msgs = np.where(busy, depth - 1, 0)
            name = f"{mm.name}/Reduce" if last else f"{mm.name}/Reduce/Stage{i}"
            steps.append(ComputeSet(
                name, "matmul-reduce", {codelet: (produced > 0).astype(np.int64)},
                cost.reduce_add_cycles(produced, depth, self.target.workers, plan.half_partials),
                Exchange(bytes_in, bytes_out, msgs, msgs), self.target, ex_out if last else None,
                temp_bytes=partials + bytes_in, state_bytes=(produced > 0) * cost.STATE_BYTES["ReduceAdd"],
                code_bytes={codelet: cost.CODE_BYTES["ReduceAdd"]}, elements=produced,
                flops=int((produced * depth).sum()), reads=frozenset(),
                writes=frozenset({mm.out.uid}) if last else frozenset(),
                note=f"{depth} partials per output" + ("" if last else f", {left} partial products left"),
                passes=plan.serial,
            ))
            held = produced
        return steps

    def _operand_exchange(self, buf: Buffer, need: Blocked) -> Exchange:
        """Bytes each plan tile receives of the operand block it multiplies (§4.2)."""
        return block_exchange(self.mappings[buf.uid], need, buf.dtype.size)

    def _result_exchange(self, out: Buffer, layout: Blocked) -> Exchange | None:
        """The output in the plan's layout; if the buffer already has another layout, the exchange
        that moves the result there."""
        plan_map = layout.mapping(self.target.tiles)
        if not self.mapped(out):
            self.assign(out, plan_map, "matmul output")
            return None
        return copy_exchange(plan_map, self.mappings[out.uid], out.dtype.size, self.target.tiles)[0]

    # -- collectives ---------------------------------------------------------------------------------
    def collective(self, c: Collective) -> ComputeSet:
        """A collective between replicas (Poplar's replicated all-reduce and friends): the data crosses the
        IPU-Links in a ring (:func:`~popjit.schedule.cost.collective_link_cycles`), each tile receives its
        part of the result into a buffer and reduces what arrives (one operation per element and step)."""
        T, t = self.target.tiles, self.target
        group = c.group or t.replicas
        src_map, dst_map = self.mapping(c.src), self.mapping(c.dst)
        es = c.dst.dtype.size
        received = dst_map.bytes_per_tile(c.dst.dtype).astype(np.int64)
        reduces = c.op not in ("gather", "all_to_all")
        steps = max(group - 1, 0)
        per_tile = src_map.elements_per_tile.astype(np.int64)
        vector = t.vector_width(c.src.dtype)
        compute = np.where(per_tile > 0, steps * (-(-per_tile // vector)) + 30, 0) if reduces and steps else \
            cost.copy_cycles(received, t.memcpy_bytes_per_cycle)
        link = cost.collective_link_cycles(c.op, c.src.size * es, group, t.link_bytes_per_cycle,
                                           t.link_latency_cycles)
        return ComputeSet(
            f"{c.op} across {group} replicas {c.dst.name} <- {c.src.name}", "collective", {}, compute,
            Exchange.zeros(T), t, temp_bytes=received, elements=per_tile, reads=frozenset({c.src.uid}),
            writes=frozenset({c.dst.uid}), program="ReplicatedCollective", link_cycles=link,
            note=f"{c.src.size * es:,} B per replica over IPU-Links",
        )

    # -- copies ------------------------------------------------------------------------------------
    def copy(self, c: Copy) -> ComputeSet:
        """A ``Copy`` program: exchange where layouts differ, on-tile copies where they agree."""
        T = self.target.tiles
        src_map = self.mapping(c.src)
        if not self.mapped(c.dst) and c.dst.size == c.src.size:
            self.assign(c.dst, src_map, f"copy of {c.src.name}")
        dst_map = self.mapping(c.dst)
        es = c.dst.dtype.size
        ex, local, regions = copy_exchange(src_map, dst_map, es, T)
        ex = ex if ex is not None else Exchange.zeros(T)
        on_tile = cost.copy_cycles(local, self.target.memcpy_bytes_per_cycle)
        return ComputeSet(
            f"copy {c.dst.name} <- {c.src.name}", "copy", {}, on_tile, ex, self.target, temp_bytes=ex.bytes_in,
            copy_descriptor_bytes=regions * cost.COPY_DESCRIPTOR_BYTES,
            elements=(local + ex.bytes_in) // es, reads=frozenset({c.src.uid}), writes=frozenset({c.dst.uid}),
            program="Copy",
        )


def partial_flows(producer: np.ndarray, lo: np.ndarray, hi: np.ndarray, out_map: TileMapping,
                  pbytes: int) -> tuple[Exchange, np.ndarray] | None:
    """Sending reduction partials to their output's tile: (exchange, partials reduced per tile),
    or None if every partial is already on its output's tile.

    ``producer`` tiles hold partials for outputs ``[lo, hi)`` (disjoint per producer). Partials of
    different producers are distinct data, each sent to exactly one owner. With at most one output
    interval per tile this is computed from coverage prefix sums, without cutting the intervals.
    """
    T = out_map.num_tiles
    if np.bincount(out_map.tiles, minlength=T).max(initial=0) > 1:
        run, t0, plen = split_runs(hi - lo, [(lo, out_map)])
        owner = out_map.tile_of(lo[run] + t0)
        if (owner == producer[run]).all():
            return None
        start = lo[run] + t0
        ex = exchange_of(owner, producer[run], start, start + plen, pbytes, T, distinct=True)
        return ex, np.bincount(owner, weights=plen, minlength=T).astype(np.int64)
    size = out_map.size
    cover = np.cumsum(np.bincount(lo, minlength=size + 1) - np.bincount(hi, minlength=size + 1))
    prefix = np.concatenate([[0], np.cumsum(cover[:size])])
    a, b, owner = out_map.starts[:-1], out_map.starts[1:], out_map.tiles
    elements = np.bincount(owner, weights=prefix[b] - prefix[a], minlength=T).astype(np.int64)
    t_lo, t_hi = np.zeros(T, np.int64), np.zeros(T, np.int64)
    t_lo[owner], t_hi[owner] = a, b
    local_len = np.clip(np.minimum(hi, t_hi[producer]) - np.maximum(lo, t_lo[producer]), 0, None)
    if int(local_len.sum()) == int((hi - lo).sum()):
        return None
    local = np.bincount(producer, weights=local_len, minlength=T).astype(np.int64)
    made = np.bincount(producer, weights=hi - lo, minlength=T).astype(np.int64)
    has_local = np.bincount(producer, weights=local_len > 0, minlength=T) > 0
    slo, shi = np.sort(lo), np.sort(hi)
    heard = np.zeros(T, np.int64)
    heard[owner] = np.searchsorted(slo, b, side="left") - np.searchsorted(shi, a, side="right")
    spans = out_map.interval_of(np.maximum(hi - 1, lo)) - out_map.interval_of(lo) + 1
    told = np.bincount(producer, weights=spans, minlength=T).astype(np.int64)
    ex = Exchange((elements - local) * pbytes, (made - local) * pbytes, np.maximum(heard - has_local, 0),
                  np.maximum(told - has_local, 0))
    return ex, elements


def copy_exchange(src: TileMapping, dst: TileMapping, elem_bytes: int, tiles: int) -> tuple[Exchange | None, ...]:
    """Moving a tensor from layout ``src`` to ``dst``: (exchange or None, local bytes per tile,
    regions per destination tile)."""
    size = min(src.size, dst.size)
    if size == 0:
        z = np.zeros(tiles, np.int64)
        return None, z, z
    zero = np.zeros(1, np.int64)
    _run, t0, plen = split_runs(np.array([size], np.int64), [(zero, src), (zero, dst)])
    s, d = src.tile_of(t0), dst.tile_of(t0)
    local = np.bincount(d[s == d], weights=plen[s == d], minlength=tiles).astype(np.int64) * elem_bytes
    regions = np.bincount(d, minlength=tiles).astype(np.int64)
    ex = exchange_of(d, s, t0, t0 + plen, elem_bytes, tiles)
    return (ex if ex.any else None), local, regions


def _t(dtype: DType) -> str:
    return {"float16": "half", "float32": "float"}.get(dtype.name, dtype.name)
