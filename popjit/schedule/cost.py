"""Cycle and memory estimators of the vertices popjit places on tiles (``docs/ipu_hardware.md`` §3).

Formulas marked [V] are poplibs' own estimators as the spec quotes them; [D] ones are derived
from those; [U] figures are estimates of ours (no published number) and are tunable here.

Every estimator works on NumPy arrays (one entry per tile), so a compute set over 1472 tiles
is a handful of array operations. Vertex cycles follow poplibs: a MultiVertex/Supervisor
estimate is ``workers x worker cycles + supervisor overhead`` (tile cycles), a worker vertex's
estimate is thread cycles and a tile's time is ``workers x`` its slowest worker (§2.1).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from popjit import dtypes
from popjit.dtypes import DType
from popjit.ops.reduce import REDUCTIONS
from popjit.ops.registry import BINARY, UNARY, ElementCost, get

Array = np.ndarray

#: Per-loop figures of pseudo-ops that have no registry row: a plain copy (8 bytes per thread
#: cycle, like a 64-bit load/store pair) and an index value (iota, one_hot) [U].
COPY_COST = ElementCost((1, 2, False), (1, 4, False), (1, 2, False), 0)
IOTA_COST = ElementCost((2, 1, False), (2, 1, False), (2, 1, False), 0)
DEFAULT_COST = ElementCost()

#: [U] extra worker entry cycles per op fused into one generated codelet beyond the first.
FUSED_ENTRY_PER_OP = 4
#: [V] ``basicOpSupervisorOverhead`` of the 1D binary/broadcast MultiVertex estimators.
SUPERVISOR_OVERHEAD = 11
#: [V] unary 1D supervisor overhead (9 + 11).
UNARY_SUPERVISOR_OVERHEAD = 20


def ceil_div(a: Array | int, b: Array | int) -> Array:
    return -(-np.asarray(a, np.int64) // np.maximum(np.asarray(b, np.int64), 1))


def family(dtype: DType) -> str:
    """The cost-table column of a dtype: ``half``, ``float`` or ``int`` (bool and ints)."""
    if dtype == dtypes.float16:
        return "half"
    if dtype.is_floating:
        return "float"
    return "int"


# ----------------------------------------------------------------------------------------------
# Element-wise ops (§3.2–3.4)


@dataclass(frozen=True)
class OpUse:
    """One element-wise op inside a kernel's expression."""

    name: str
    kind: str  # BINARY, UNARY or another element-wise kind
    family: str
    cost: ElementCost
    scalar_operand: bool = False  # a binary op with a constant or scalar operand
    cast_to: str = ""  # for cast: the output family

    def loop(self, n: Array) -> Array:
        """Thread cycles of this op's inner loop over ``n`` elements (§3.2).

        Natural-width loops pay the per-loop overhead: +2 for float/half ADD/SUB/MUL (assembly
        codelets), +5 for other binary ops, +4 for unary ops (+1/+4 for scalar broadcasts).
        """
        cycles, width, natural = getattr(self.cost, self.family)
        if self.name == "cast" and self.cast_to and {self.family, self.cast_to} == {"float", "half"}:
            per, width = (2, 4) if self.family == "float" else (1, 2)  # [V] Cast float<->half
            return ceil_div(n, width) * per
        if not natural:
            return ceil_div(n, width) * cycles
        fast = self.cost.assembly and self.family in ("float", "half")
        if self.scalar_operand:
            ovh = 1 if fast else 4
        elif self.kind == BINARY:
            ovh = 2 if fast else 5
        else:
            ovh = 4
        return ceil_div(n, width) * (cycles + ovh)

    @property
    def entry_1d(self) -> int:
        """Worker entry cycles of the op's 1D MultiVertex [V]."""
        if self.name == "cast":
            return 19 + 18
        if self.scalar_operand:
            return 20
        if self.kind == BINARY:
            return 29 if self.family == "float" else 26
        if self.kind == UNARY:
            return self.cost.entry_1d or 17
        return 26  # n-ary (select, clip) [U]: like a binary op

    @property
    def entry_2d(self) -> int:
        """Thread entry cycles of the op's 2D worker vertex [V] (cast: per region, see below)."""
        if self.kind == UNARY:
            return 20
        return 5


def vertex_name(ops: list[OpUse], dims: str) -> str:
    """The codelet a kernel's compute set uses, in poplibs' naming where one exists (a kernel
    that only fills is ``popops::Fill``, one that only moves data ``popjit::Copy``)."""
    if not ops:
        return f"popops::Fill{'2d' if dims == '2D' else ''}"
    if len(ops) == 1 and ops[0].name == "copy":
        return f"popjit::Copy{dims}"
    if len(ops) == 1:
        op = ops[0]
        t = {"float": "float", "half": "half", "int": "int"}[op.family]
        if op.name == "cast":
            return f"popops::Cast{dims}<{t},{op.cast_to}>"
        if op.scalar_operand:
            return f"popops::BroadcastScalar{dims}<{op.name.upper()},{t}>"
        kind = "BinaryOp" if op.kind == BINARY else ("UnaryOp" if op.kind == UNARY else "ElementwiseOp")
        return f"popops::{kind}{dims}<{op.name.upper()},{t}>"
    return f"popjit::Fused{dims}<{','.join(o.name for o in ops)}>"


def elementwise_1d_cycles(ops: list[OpUse], n: Array, workers: int = 6) -> Array:
    """Tile cycles of one MultiVertex over ``n`` contiguous elements per tile [V for single ops].

    BinaryOp1D ``W x [(float ? 29 : 26) + loops] + 11``; UnaryOp1D ``W x [(exp ? 33 : 17) + loop]
    + 20``; Cast1D ``12 + W x (castWorker + 18)``; BroadcastScalar1D ``W x [20 + loop] + 11``.
    A fused chain [U] pays the largest entry plus ``FUSED_ENTRY_PER_OP`` per extra op, the sum of
    the ops' loops, and one supervisor overhead: that is what fusing saves.
    """
    per = ceil_div(n, workers)
    loops = sum(op.loop(per) for op in ops)
    entry = max(op.entry_1d for op in ops) + FUSED_ENTRY_PER_OP * (len(ops) - 1)
    if len(ops) == 1 and ops[0].name == "cast":
        return 12 + workers * (entry + loops)
    sup = UNARY_SUPERVISOR_OVERHEAD if len(ops) == 1 and ops[0].kind == UNARY else SUPERVISOR_OVERHEAD
    return workers * (entry + loops) + sup


def elementwise_2d_cycles(ops: list[OpUse], elements: Array, regions: Array, vertices: Array,
                          workers: int = 6) -> Array:
    """Tile cycles of up to 6 worker vertices sharing a tile's regions [V per op, D for the split].

    Each vertex gets ``ceil(elements / vertices)`` elements in ``ceil(regions / vertices)``
    regions; every extra region costs one more (rounded-up) loop of each op. The tile takes
    ``workers x`` its slowest vertex (§2.1). BinaryOp2D entry 5, UnaryOp2D 20, Cast2D
    ``5 + 11 per region``.
    """
    v = np.maximum(vertices, 1)
    e, r = ceil_div(elements, v), ceil_div(regions, v)
    entry = max(op.entry_2d for op in ops) + FUSED_ENTRY_PER_OP * (len(ops) - 1)
    thread = entry + sum(op.loop(e) + (r - 1) * op.loop(np.ones_like(e)) for op in ops)
    if any(op.name == "cast" for op in ops):
        thread = thread + 11 * r
    return np.where(elements > 0, workers * thread, 0)


def fill_cycles(dtype: DType, n: Array) -> Array:
    """Thread cycles of one Fill vertex over ``n`` elements [V]: float ``23 + n/2 + (n odd)``
    (int32 the same [U]); half ``26 + n/4`` (15 and 21 for 1 and 2 elements); 8-bit ``28 + n/4``
    below 64 elements, else ``39 + n/8``."""
    n = np.asarray(n, np.int64)
    if dtype.size == 2:
        return np.where(n <= 1, 15, np.where(n == 2, 21, 26 + n // 4))
    if dtype.size == 1:
        return np.where(n < 64, 28 + n // 4, 39 + n // 8)
    return 23 + n // 2 + (n % 2)


def binary_op_1d(n: Array, op: str = "add", dtype: DType = dtypes.float32, workers: int = 6) -> Array:
    """``popops::BinaryOp1D<op, dtype>`` over ``n`` elements on one tile (§3.3 worked example:
    float ADD of 1000 elements = 1,697 cycles)."""
    use = OpUse(op, BINARY, family(dtype), get(op).cost or DEFAULT_COST)
    return elementwise_1d_cycles([use], np.asarray(n), workers)


# ----------------------------------------------------------------------------------------------
# Reductions (§3.5)


def reduce_thread_cycles(op: str, fam: str, elements: Array, outputs: Array, scan: bool = False) -> Array:
    """Thread cycles of one reduce worker over ``elements`` inputs into ``outputs`` outputs, by the
    formula the reduction's row names (``REDUCTIONS[op].cost``; scans use the generic one).

    ``vectorised`` (ADD/MAX/MIN/MUL) [V]: one output: ``17 + n/epl + n % epl`` (+5 if not float);
    many outputs ("all regions continuous"): ``outputs x ceil(partials/epl) + 2 (odd) + 12 x outputs
    + 17``; ``epl`` = min(accumulator width, data-path elements) = 2 float, 4 half, 1 int [U for int].
    ``logical`` (any/all, non-vectorised [V]): ``24 + 22 x outputs + 25 x elements``. ``generic``
    (argmax/argmin, scans) [U]: ``30 + 12 x outputs + 3 x elements``.
    """
    e = np.asarray(elements, np.int64)
    o = np.maximum(np.asarray(outputs, np.int64), 1)
    formula = "generic" if scan else REDUCTIONS[op].cost
    if formula == "logical":
        return np.where(e > 0, 24 + 22 * o + 25 * e, 0)
    if formula == "generic":
        return np.where(e > 0, 30 + 12 * o + 3 * e, 0)
    epl = {"float": 2, "half": 4, "int": 1}[fam]
    single = 17 + e // epl + e % epl + (0 if fam == "float" else 5)
    per = ceil_div(e, o)
    many = o * ceil_div(per, epl) + 2 * (per % 2) + 12 * o + 17
    return np.where(e > 0, np.where(o == 1, single, many), 0)


def reduce_tile_cycles(op: str, fam: str, elements: Array, outputs: Array, workers: int = 6) -> Array:
    """A tile's reduce work split evenly over its workers (``workers x`` slowest worker) [D]."""
    return workers * reduce_thread_cycles(op, fam, ceil_div(elements, workers), ceil_div(outputs, workers))


# ----------------------------------------------------------------------------------------------
# Matmul (§3.6, §3.5 ReduceAdd)


def _amp_worker_cycles(e: np.ndarray, half: bool, zeroing: bool, conv_units: int, half_partials: bool) -> np.ndarray:
    """One worker's thread cycles in ``ConvPartial1x1Out`` for ``e`` output rows [V, PopLibs 3.x
    ``getConvPartial1x1SupervisorInnerLoopCycleEstimate``], state retention included."""
    z = int(zeroing)
    idx = np.clip(e, 0, 3)
    if not half:  # float in, float partials: 8 cycles a row; zeroing 8 a row with 16 units, else 4
        zc = 8 if conv_units == 16 else 4
        small = np.array([24, 47 + (2 + zc) * z, 46 + (2 + 2 * zc) * z, 0])[idx]
        return np.where(e < 3, small, 46 + (2 + zc * e) * z + (e - 3) * 8)
    if conv_units == 16 or not half_partials:  # the common half path (16 units or float partials)
        extra = 1 if zeroing else 2
        small = np.array([20 + extra, 31 + extra, 40 + extra, 0])[idx]
        return np.where(e < 3, small, (37 if zeroing else 38) + (e - 3) * 4) - 7
    small = np.array([24, 39 + 4 * z, 40 + 6 * z, 0])[idx]  # half partials on 8 units
    return np.where(e < 3, small, 41 + (2 + 2 * e) * z + (e - 3) * 4)


def conv_partial_cycles(rows: Array, out_groups: Array, in_groups: Array, conv_groups: Array, half: bool,
                        conv_units: int, in_chans: int, workers: int = 6, coeff_load_bytes: int = 16,
                        half_partials: bool = False) -> Array:
    """``poplin::ConvPartial1x1Out`` (SupervisorVertex) tile cycles for a per-tile matmul of
    ``rows`` rows, ``out_groups`` groups of ``conv_units`` output columns and ``in_groups`` groups
    of ``in_chans`` input columns, ``conv_groups`` times (batched matmul) [V].

    Each worker takes ``e = ceil(rows / W)`` rows (:func:`_amp_worker_cycles`); the tile's inner loop
    is ``W x worker + 14``, the first input group zeroing the partials. Outer:
    ``50 + W x retention + G x {13 + (IG-1)[15 + OG(19 + 6 + loads + inner)] + 11 + OG(18 + 7 + loads +
    inner_zeroing)}``, ``loads = units x in_chans x bytes / 16`` (128-bit coefficient loads [U]).
    """
    e = ceil_div(rows, workers)
    inner_zero = workers * _amp_worker_cycles(e, half, True, conv_units, half_partials) + 14
    inner_nz = workers * _amp_worker_cycles(e, half, False, conv_units, half_partials) + 14
    retention = 7 if half and (conv_units == 16 or not half_partials) else 0
    loads = conv_units * in_chans * (2 if half else 4) // coeff_load_bytes
    og, ig = np.asarray(out_groups), np.asarray(in_groups)
    per_group = (13 + (ig - 1) * (15 + og * (19 + 6 + loads + inner_nz)) + 11 + og * (18 + 7 + loads + inner_zero))
    return np.where(np.asarray(rows) > 0, 50 + workers * retention + np.asarray(conv_groups) * per_group, 0)


def reduce_add_cycles(outputs: Array, partials: Array, workers: int = 6, half_partials: bool = False) -> Array:
    """``poplin::ReduceAdd`` tile cycles [V]: ``W x (32 + ((accVW/ppd + 1) x partials + 8) x
    ceil(outputs / accVW / W))`` with accVW 4 (float) or 8 (half), ppd 2 or 4."""
    acc, ppd = (8, 4) if half_partials else (4, 2)
    loops = ceil_div(outputs, acc * workers)
    return np.where(np.asarray(outputs) > 0, workers * (32 + ((acc // ppd + 1) * np.asarray(partials) + 8) * loops), 0)


def reduce_stages(partials: Array) -> list[tuple[np.ndarray, np.ndarray]]:
    """How PopLibs reduces ``partials`` partial products (``enableMultiStageReduce``, on by default) [V]:
    one stage below 16 partials, two from 16, three from 125, each intermediate stage reducing groups of
    ``ceil(partials^(1/stages))``, so each tile hears from fewer tiles (less exchange code). Three
    ``(depth, left)`` pairs: the partials each output of the stage sums and how many partial products are
    left after it; a stage of depth 1 does nothing."""
    p = np.asarray(partials, dtype=np.int64)
    n = np.where(p >= 125, 3, np.where(p >= 16, 2, 1))
    factor = np.maximum(1, np.ceil(p ** (1.0 / n) - 1e-9).astype(np.int64))
    stages, left = [], p
    for s in range(3):
        active, last = s < n, s == n - 1
        depth = np.where(active, np.where(last, left, factor), 1)
        after = np.where(active, np.where(last, 1, ceil_div(left, factor)), left)
        stages.append((depth, after))
        left = after
    return stages


def int_matmul_cycles(rows: Array, cols: Array, depth: Array, groups: Array) -> Array:
    """Integer matmuls have no AMP path [U]: about two tile cycles per multiply-accumulate plus 100."""
    macs = np.asarray(rows) * np.asarray(cols) * np.asarray(depth) * np.asarray(groups)
    return np.where(macs > 0, 2 * macs + 100, 0)


def link_copy_cycles(nbytes: int, link_bytes_per_cycle: float, latency_cycles: int) -> int:
    """IPU-Link cycles of an inter-IPU copy of ``nbytes`` [U]: one link's bandwidth in one direction plus one
    message's latency (nothing for no data)."""
    if nbytes <= 0:
        return 0
    return int(np.ceil(nbytes / link_bytes_per_cycle)) + latency_cycles


def collective_link_cycles(op: str, src_bytes: int, group: int, link_bytes_per_cycle: float,
                           latency_cycles: int) -> int:
    """IPU-Link cycles of a collective over ``group`` IPUs in a ring [U, the textbook ring algorithms]:
    an all-reduce sends ``2 (k-1)/k`` of the data over ``2 (k-1)`` steps, a reduce-scatter or all-to-all
    ``(k-1)/k`` over ``k-1`` steps, an all-gather every other member's ``src`` over ``k-1`` steps."""
    k = group
    if k <= 1:
        return 0
    if op == "gather":
        moved, steps = (k - 1) * src_bytes, k - 1
    elif op in ("reduce_scatter", "all_to_all"):
        moved, steps = (k - 1) * src_bytes / k, k - 1
    else:
        moved, steps = 2 * (k - 1) * src_bytes / k, 2 * (k - 1)
    return int(np.ceil(moved / link_bytes_per_cycle)) + steps * latency_cycles


def copy_cycles(local_bytes: Array, memcpy_bytes_per_cycle: int = 8) -> Array:
    """On-tile part of a Copy program [U]: ``bytes / 8`` plus 30 cycles per tile that copies."""
    b = np.asarray(local_bytes, np.int64)
    return np.where(b > 0, ceil_div(b, memcpy_bytes_per_cycle) + 30, 0)


# ----------------------------------------------------------------------------------------------
# Memory figures [U] (Graphcore publishes categories, not sizes). The matmul codelets' code and state
# sizes and the control code per step are calibrated on the one published profile (§2.10): a
# Dense(4096→1024) layer, batch 16, fp32, has ≈2.4 KB vertex code, ≈124 B vertex state, ≈70 B
# control code and ≈250 B exchange code per tile (tests/schedule/test_calibration.py)

#: Code bytes of one codelet type on a tile (counted once per tile that uses it) [U].
CODE_BYTES = {
    "elementwise1D": 320, "elementwise2D": 400, "fused_base": 200, "fused_per_op": 60,
    "fill": 150, "copy": 160, "reduce": 700, "scan": 500,
    "ConvPartial1x1Out": 1500, "ReduceAdd": 600, "MatMulInt": 600,
}
#: Vertex instance state [U]: 4 B per field pointer/size of a MultiVertex; a 2D worker vertex adds
#: an 8 B vector-list descriptor entry per region per field; AMP and reduce vertices fixed sizes.
STATE_FIELD_BYTES = 4
STATE_REGION_BYTES = 8
STATE_BYTES = {"ConvPartial1x1Out": 96, "ReduceAdd": 32, "reduce": 24, "MatMulInt": 48}
#: Exchange code per exchange phase on a tile that sends or receives [U]: 4 instructions, plus one per
#: message each way (a send, or a receive-mux switch), 4 B each (calibrated: ≈250 B per tile, §2.10).
EXCHANGE_CODE_BASE_INSTRUCTIONS = 4
EXCHANGE_CODE_PER_MESSAGE = 1
#: Control code per program node on every tile [U], bytes.
CONTROL_BYTES = {"Execute": 20, "Copy": 20, "Repeat": 16, "RepeatWhile": 32, "If": 24, "Sync": 4}
#: Copy descriptors of a Copy program per region per tile [U], bytes.
COPY_DESCRIPTOR_BYTES = 8


def fused_code_bytes(n_ops: int, dims: str) -> int:
    """Code of an element-wise codelet: poplibs' single-op vertices or a generated fused one [U]."""
    if n_ops <= 1:
        return CODE_BYTES["elementwise1D" if dims == "1D" else "elementwise2D"]
    return CODE_BYTES["fused_base"] + CODE_BYTES["fused_per_op"] * n_ops + (80 if dims == "2D" else 0)


def exchange_code_bytes(msgs_in: Array, msgs_out: Array, instruction_bytes: int = 4) -> Array:
    """Internal exchange code of one exchange phase per tile [U]."""
    msgs = np.asarray(msgs_in) + np.asarray(msgs_out)
    return np.where(msgs > 0, instruction_bytes * (EXCHANGE_CODE_BASE_INSTRUCTIONS + EXCHANGE_CODE_PER_MESSAGE * msgs),
                    0)
