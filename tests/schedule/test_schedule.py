"""Structural checks of the tile schedule: compute sets, spreading, exchange and memory against
hand computations, out-of-memory, loops and the text/summary forms."""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest

import popjit.tensorflow as tf
from popjit.errors import ResourceExhaustedError
from popjit.frontend.control_flow import cond, for_range, while_loop
from popjit.ir.loop import Const, If, Repeat, ivalue, ivar
from popjit.pipeline import compile_graph
from popjit.schedule import cost, make_target, schedule_program
from popjit.schedule.memory import CATEGORIES, OutOfMemoryWarning
from tests.schedule.helpers import apply, buf, kernel, load, program, traced

SYNC = make_target().sync_cycles


def f32(*shape: int) -> np.ndarray:
    return np.zeros(shape, np.float32)


# ----------------------------------------------------------------------------------------------
# Compute sets


def test__chain_of_5_elementwise_ops__is_one_compute_set():
    sched = schedule_program(traced(lambda x, y: tf.tanh(x * y + 1.0) - tf.exp(x), f32(4096), f32(4096)), make_target())
    (cs,) = sched.steps
    assert cs.kind == "elementwise"
    (codelet,) = cs.codelets
    assert codelet.startswith("popjit::Fused1D<") and codelet.count(",") == 4, "five ops in one codelet"
    assert sched.total_cycles == cs.cycles


def test__elementwise_on_linear_layout__one_multivertex_per_busy_tile():
    sched = schedule_program(traced(lambda x: x * 2.0 + 1.0, f32(1 << 20)), make_target())
    (cs,) = sched.steps
    busy = cs.compute_cycles > 0
    assert busy.sum() > 1400
    assert (cs.vertices[busy] == 1).all() and not cs.exchange_in.any


def test__matmul_1024__is_spread_over_more_than_1000_tiles():
    sched = schedule_program(traced(lambda a, b: tf.matmul(a, b), f32(1024, 1024), f32(1024, 1024)), make_target())
    partials = sched.steps[0]
    assert partials.kind == "matmul"
    assert partials.tiles_used > 1000
    assert all(c.startswith("poplin::ConvPartial1x1Out") for c in partials.codelets)
    assert partials.flops == 2 * 1024**3


def test__matmul_with_split_depth__adds_reduce_compute_sets():
    sched = schedule_program(traced(lambda a, b: tf.matmul(a, b), f32(64, 4096), f32(4096, 64)), make_target())
    kinds = [s.kind for s in sched.steps]
    (conv,) = [s for s in sched.steps if s.kind == "matmul"]
    depth = int(conv.note.split(" x K")[1].split()[0])
    stages = [int(d[0]) for d, _ in cost.reduce_stages([depth]) if d[0] > 1]
    assert kinds == ["matmul"] + ["matmul-reduce"] * len(stages) and len(stages) >= 1
    assert np.prod(stages) >= depth, "the stages together sum every partial"
    assert all(s.exchange_in.bytes_in.max() > 0 for s in sched.steps[1:]), "partials travel to the reducing tiles"
    assert all(int(s.exchange_in.msgs_in.max()) == d - 1 for s, d in zip(sched.steps[1:], stages))


@pytest.mark.parametrize(("partials", "depths"), [(1, []), (15, [15]), (16, [4, 4]), (64, [8, 8]), (124, [12, 11]),
                                                   (125, [5, 5, 5]), (1000, [10, 10, 10])])
def test__reduce_stages__as_poplibs_splits_them(partials, depths):
    got = [(int(d[0]), int(left[0])) for d, left in cost.reduce_stages([partials])]
    assert [d for d, _ in got if d > 1] == depths
    assert got[-1][1] == 1 or partials == 1, "one partial product is left at the end"


def test__matmul_operands__are_allocated_in_the_planners_layout():
    p = traced(lambda a, b: tf.matmul(a, b), f32(256, 256), f32(256, 256))
    sched = schedule_program(p, make_target())
    a, b = p.args
    assert sched.origin[a.uid].endswith("operand a") and sched.origin[b.uid].endswith("operand b")


def test__reduction_split_over_tiles__reduces_partials_at_the_destination():
    sched = schedule_program(traced(lambda x: tf.reduce_sum(x, axis=0), f32(1024, 1024)), make_target())
    first, second = sched.steps
    assert first.tiles_used > 1000 and second.note == "reduce at destination"
    assert second.exchange_in.bytes_in.sum() > 0


def test__reduction_of_rows_on_one_tile__is_one_compute_set():
    sched = schedule_program(traced(lambda x: tf.reduce_sum(x, axis=1), f32(8, 4)), make_target())
    (cs,) = sched.steps
    assert cs.kind == "reduce" and not cs.exchange_in.any


# ----------------------------------------------------------------------------------------------
# Hand-computed exchange and memory (4-tile IPU)


def _add_program():
    x, y, o = buf("x", (64,), "arg"), buf("y", (64,), "arg"), buf("o", (64,), "out")
    return program([kernel("add", o, apply("add", load(x), load(y)))], [x, y], [o]), (x, y, o)


def test__hand_computed__exchange_bytes_of_an_add_on_4_tiles():
    # 64 floats = 256 B: linear mapping puts 32 floats (128 B) on each of 2 tiles. x gets tiles
    # 0-1, y (rotated start) tiles 2-3; the output clones x, so tiles 0 and 1 each receive half
    # of y (128 B) from tiles 2 and 3.
    p, (x, y, _o) = _add_program()
    sched = schedule_program(p, make_target("ipu2", 4))
    assert sched.mapping_of(x).tiles.tolist() == [0, 1]
    assert sched.mapping_of(y).tiles.tolist() == [2, 3]
    (cs,) = sched.steps
    assert cs.exchange_in.bytes_in.tolist() == [128, 128, 0, 0]
    assert cs.exchange_in.bytes_out.tolist() == [0, 0, 128, 128]
    assert cs.exchange_in.msgs_in.tolist() == [1, 1, 0, 0]
    # exchange 128 B / 4 B per cycle; BinaryOp1D on 32 floats: 6 x (29 + ceil(6/2) x 3) + 11
    assert cs.exchange_in_cycles == 32
    assert int(cs.compute_cycles.max()) == 6 * (29 + 3 * 3) + 11
    assert cs.cycles == SYNC + 32 + SYNC + 239


def test__hand_computed__per_tile_memory_of_an_add_on_4_tiles():
    p, _ = _add_program()
    sched = schedule_program(p, make_target("ipu2", 4))
    mem = sched.memory.by_category()
    exchange_code = 4 * (cost.EXCHANGE_CODE_BASE_INSTRUCTIONS + cost.EXCHANGE_CODE_PER_MESSAGE * 1)
    control = cost.CONTROL_BYTES["Execute"]
    # tiles 0-1: x (128) and o (128) live, y's half in an exchange buffer (128), one BinaryOp1D
    # (code + state of 3 fields: 4 B x (3 + 1)), exchange code for one message, control code
    compute_tile = 128 + 128 + 128 + cost.CODE_BYTES["elementwise1D"] + 4 * 4 + exchange_code + control
    # tiles 2-3: y (128), exchange code for the one message they send, control code
    holder_tile = 128 + exchange_code + control
    assert sched.memory.total.tolist() == [compute_tile, compute_tile, holder_tile, holder_tile]
    assert mem["temporaries"].tolist() == [256, 256, 128, 128]
    assert mem["exchangeBuffers"].tolist() == [128, 128, 0, 0]
    assert mem["vertexCode"].tolist() == [cost.CODE_BYTES["elementwise1D"]] * 2 + [0, 0]


def test__hand_computed__scalar_broadcast_is_received_once_per_tile_and_sent_once():
    x, s, o = buf("x", (64,), "arg"), buf("s", (), "arg"), buf("o", (64,), "out")
    k = kernel("mul", o, apply("mul", load(x), load(s, 0)))
    sched = schedule_program(program([k], [x, s], [o]), make_target("ipu2", 4))
    assert sched.mapping_of(s).tiles.tolist() == [2]
    ex = sched.steps[0].exchange_in
    assert ex.bytes_in.tolist() == [4, 4, 0, 0]
    assert ex.bytes_out.tolist() == [0, 0, 4, 0], "the exchange multicasts one copy"
    assert ex.msgs_out.tolist() == [0, 0, 2, 0]


def test__hand_computed__sum_of_64_floats_on_4_tiles():
    # tiles 0 and 1 each reduce their 32 floats to one partial; the scalar result is allocated
    # on the next tile (2), which receives the two 4-byte partials and adds them
    x, o = buf("x", (64,), "arg"), buf("o", (), "out")
    from popjit.ir.loop import Kernel, Reduce, Store

    k = Kernel("sum", (), [Store(o, ivar("r0") * 0, load(x, ivar("r0")))], Reduce("sum", (64,)))
    sched = schedule_program(program([k], [x], [o]), make_target("ipu2", 4))
    first, second = sched.steps
    assert first.elements.tolist() == [32, 32, 0, 0]
    assert sched.mapping_of(o).tiles.tolist() == [2]
    assert second.exchange_in.bytes_in.tolist() == [0, 0, 8, 0]
    assert second.exchange_in.bytes_out.tolist() == [4, 4, 0, 0]
    assert second.elements.tolist() == [0, 0, 2, 0]


def test__liveness__a_temporary_is_not_live_after_its_last_use():
    x, t, o = buf("x", (4096,), "arg"), buf("t", (4096,), "temp"), buf("o", (4096,), "out")
    k1 = kernel("k1", t, apply("mul", load(x), Const(2.0, x.dtype)))
    k2 = kernel("k2", o, apply("add", load(t), Const(1.0, x.dtype)))
    k3 = kernel("k3", o, apply("add", load(o), Const(1.0, x.dtype)))
    sched = schedule_program(program([k1, k2, k3], [x], [o], [t]), make_target("ipu2", 4))
    lo, hi = sched.memory.live_ranges[t.uid]
    assert (lo, hi) == (0, 1)
    assert sched.memory.live_ranges[o.uid] == (1, 2)
    assert sched.memory.live_ranges[x.uid] == (0, 0)


def test__liveness__a_loop_carried_value_lives_for_the_whole_loop():
    x, t, o = buf("x", (4096,), "arg"), buf("t", (4096,), "temp"), buf("o", (4096,), "out")
    init = kernel("init", t, Const(0.0, x.dtype))
    body = [kernel("step", t, apply("add", load(t), load(x)))]
    other = kernel("other", o, apply("mul", load(x), Const(3.0, x.dtype)))
    last = kernel("last", o, apply("add", load(o), load(t)))
    sched = schedule_program(program([init, Repeat(5, body), other, last], [x], [o], [t]), make_target("ipu2", 4))
    assert sched.memory.live_ranges[t.uid] == (0, 3)


# ----------------------------------------------------------------------------------------------
# Loops and conditionals


def test__repeat__multiplies_its_body_cycles():
    def counted(x):
        return for_range(0, 7, 1, lambda i, acc: [acc * 0.5 + x], [tf.zeros_like(x)])[0]

    sched = schedule_program(traced(counted, f32(1000)), make_target())
    (loop,) = [n for n in sched.tree.walk() if n.kind == "Repeat"]
    assert loop.count == 7
    assert loop.cycles == 7 * loop.body.cycles
    assert sched.total_cycles == sum(c.cycles for c in sched.tree.body)
    inside = {id(n.cs) for n in loop.walk() if hasattr(n, "cs")}
    assert all(s.executions == 7 for s in sched.steps if id(s) in inside)


def test__repeat_in_loop_ir__total_is_count_times_body():
    x, o = buf("x", (4096,), "arg"), buf("o", (4096,), "out")
    body = [kernel("step", o, apply("add", load(o), load(x)))]
    once = schedule_program(program(body, [x], [o]), make_target("ipu2", 4)).total_cycles
    body2 = [kernel("step", o, apply("add", load(o), load(x)))]
    looped = schedule_program(program([Repeat(10, body2)], [x], [o]), make_target("ipu2", 4))
    assert looped.total_cycles == 10 * once


def test__if__costs_its_dearer_branch_plus_the_predicate_sync():
    x, o, p = buf("x", (4096,), "arg"), buf("o", (4096,), "out"), buf("p", (), "arg", dtype=tf.bool)
    cheap = [kernel("cheap", o, apply("add", load(x), Const(1.0, x.dtype)))]
    dear = [kernel("dear", o, apply("sin", load(x)))]
    sched = schedule_program(program([If(p, cheap, dear)], [x, p], [o]), make_target("ipu2", 4))
    node = sched.tree.body[0]
    assert node.cycles == node.sync.cycles + max(node.then.cycles, node.orelse.cycles)
    assert node.orelse.cycles > node.then.cycles


def test__while__counts_cond_and_body_per_iteration():
    def fn(x):
        return while_loop(lambda i, acc: i < 5, lambda i, acc: (i + 1, acc * 2.0), [tf.constant(0), x])[1]

    sched = schedule_program(traced(fn, f32(64)), make_target())
    (node,) = [n for n in sched.tree.walk() if n.kind == "RepeatWhile"]
    assert node.iterations is None, "a data-dependent trip count is unknown at compile time"
    assert node.per_iteration_cycles == node.body.cycles + node.cond.cycles + node.sync.cycles
    assert node.cycles == node.cond.cycles + node.sync.cycles + node.per_iteration_cycles
    assert "iterations unknown" in sched.as_text()
    node.iterations = 5
    assert node.cycles == node.cond.cycles + node.sync.cycles + 5 * node.per_iteration_cycles


def test__if_inside_a_loop__schedules_both_branches():
    def fn(x):
        def body(i, acc):
            return [cond(tf.equal(i % 2, 0), lambda: acc + x, lambda: acc * 2.0)]

        return for_range(0, 4, 1, body, [x])[0]

    sched = schedule_program(traced(fn, f32(64)), make_target())
    assert any(n.kind == "If" for n in sched.tree.walk())


# ----------------------------------------------------------------------------------------------
# Out of memory


OOM = re.compile(r"Out of memory on tile (\d+): (\d+) bytes used but tiles only have (\d+) bytes of memory")


def _big_program():
    return traced(lambda x: x + 1.0, f32(1 << 22))  # 16 MiB in, 16 MiB out


def test__16mib_tensor_on_8_tiles__is_out_of_memory_naming_the_tile():
    target = make_target("ipu2", 8)
    with pytest.raises(ResourceExhaustedError) as info:
        schedule_program(_big_program(), target)
    text = str(info.value)
    m = OOM.search(text)
    assert m, text
    tile, used, limit = map(int, m.groups())
    assert 0 <= tile < 8 and limit == 638_976
    assert used >= 2 * (1 << 21), "each tile holds 2 MiB of the input and 2 MiB of the output"
    assert "a0 (argument f32[4194304])" in text and "availableMemoryProportion" in text


def test__out_of_memory_under_the_ipu_model__warns_and_marks_the_schedule():
    target = make_target("ipu2", 8, ipu_model=True)
    with pytest.warns(OutOfMemoryWarning, match="Out of memory on tile"):
        sched = schedule_program(_big_program(), target)
    assert sched.oom and len(sched.oom_tiles) == 8
    tile, used, _ = map(int, OOM.search(sched.oom_text).groups())
    assert used == int(sched.memory.total[tile]) == sched.peak_tile_memory
    assert "out-of-memory tiles: 8" in sched.as_text()


def test__host_execution__does_not_enforce_tile_memory():
    graph = tf.function(lambda x: x + 1.0).get_concrete_function(f32(1 << 22)).graph
    with pytest.raises(ResourceExhaustedError):
        compile_graph(graph, make_target("ipu2", 8))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        exe = compile_graph(graph, None)
    assert exe.schedule is None  # a host program: no tile schedule, no out-of-memory check
    small = schedule_program(_big_program(), make_target("ipu2", 8), enforce_memory=False)
    assert small.oom


def test__oom_on_a_configured_device__through_tf_function(fresh_ipu_system):
    fresh_ipu_system.configure([1], "ipu2", tiles_per_ipu=8)
    fn = tf.function(lambda x: x * 3.0, jit_compile=True)
    with tf.device("/device:IPU:0"), pytest.raises(ResourceExhaustedError, match="Out of memory on tile"):
        fn(f32(1 << 22))


# ----------------------------------------------------------------------------------------------
# Text and summary


def test__as_text__has_the_superstep_table_tree_and_totals():
    sched = schedule_program(traced(lambda a, b: tf.nn.relu(tf.matmul(a, b)), f32(64, 64), f32(64, 64)),
                             make_target())
    text = sched.as_text()
    assert "compute set" in text and "max exch in B" in text and "peak tile B" in text
    assert "program:" in text and "Execute" in text
    assert f"total: {sched.total_cycles:,} cycles" in text
    assert "out-of-memory tiles: none" in text


def test__summary__per_tile_arrays_and_per_step_figures():
    target = make_target("ipu2", 16)
    sched = schedule_program(traced(lambda x: tf.reduce_sum(tf.exp(x), axis=1), f32(64, 64)), target)
    s = sched.summary()
    assert set(s["memory_by_category"]) == set(CATEGORIES)
    for arr in s["memory_by_category"].values():
        assert arr.shape == (16,)
    assert s["memory_by_tile"].tolist() == sum(s["memory_by_category"].values()).tolist()
    assert s["peak_tile_memory"] == max(s["memory_by_tile"])
    assert s["total_cycles"] == sum(st["cycles"] * st["executions"] for st in s["steps"])
    assert s["seconds"] == pytest.approx(s["total_cycles"] / 1.33e9)
    assert s["program"]["type"] == "Sequence"


def test__ipu1_and_ipu2__same_program_different_estimates():
    p = traced(lambda a, b: tf.matmul(a, b), f32(512, 512), f32(512, 512))
    s1, s2 = schedule_program(p, make_target("ipu1")), schedule_program(p, make_target("ipu2"))
    assert s1.steps[0].tiles_used <= 1216 < 1472
    assert s1.seconds > s2.seconds
    assert s1.memory.total.shape == (1216,) and s2.memory.total.shape == (1472,)


# ----------------------------------------------------------------------------------------------
# Data-dependent indices and other shapes of kernels


def test__gather__charges_remote_reads_by_the_uniform_access_model():
    x, idx, o = buf("x", (4096,), "arg"), buf("idx", (4096,), "arg", dtype=tf.int32), buf("o", (4096,), "out")
    k = kernel("gather", o, load(x, ivalue(load(idx))))
    sched = schedule_program(program([k], [x, idx], [o]), make_target("ipu2", 4))
    (cs,) = sched.steps
    # each tile computes 1024 outputs reading anywhere in x; it holds a quarter of x, so 3/4 of
    # its 1024 reads (4 B each) are remote
    assert cs.exchange_in.bytes_in.tolist() == [1024 * 3 // 4 * 4] * 4


def test__scatter__computes_where_the_updates_live_and_sends_results():
    x, idx, o = buf("x", (4096,), "arg"), buf("idx", (4096,), "arg", dtype=tf.int32), buf("o", (4096,), "out")
    k = kernel("scatter", o, load(x), index=ivalue(load(idx)))
    sched = schedule_program(program([k], [x, idx], [o]), make_target("ipu2", 4))
    (cs,) = sched.steps
    assert cs.elements.tolist() == [1024] * 4
    assert cs.exchange_out is not None and cs.exchange_out.bytes_out.sum() > 0


@pytest.mark.parametrize(("fn", "shapes"), [
    (lambda x: tf.cumsum(x, axis=1), [(64, 300)]),
    (lambda x: tf.argmax(x, axis=0), [(300, 64)]),
    (lambda x: tf.transpose(x) * 2.0, [(96, 40)]),
    (lambda x: x[::2, 1:5] + 1.0, [(64, 32)]),
    (lambda x: tf.concat([x, x * 2.0], axis=1), [(64, 32)]),
    (lambda a, b: tf.matmul(a, b, transpose_b=True), [(6, 32, 16), (24, 16)]),
    (lambda a, b: tf.matmul(a, b, transpose_a=True), [(6, 16, 32), (6, 16, 24)]),
    (lambda x: tf.reduce_mean(x * x), [(1000,)]),
], ids=["cumsum", "argmax", "transpose", "slice", "concat", "bmm-broadcast", "bmm-transposed", "mean"])
@pytest.mark.parametrize("target", [make_target(), make_target("ipu1", 4)], ids=["ipu2", "ipu1x4"])
def test__invariants__hold_for_many_kernel_shapes(fn, shapes, target):
    sched = schedule_program(traced(fn, *[f32(*s) for s in shapes]), target, enforce_memory=False)
    assert sched.steps
    for s in sched.steps:
        assert (s.compute_cycles >= 0).all() and s.cycles >= target.sync_cycles
        ex = s.exchange_in
        assert ((ex.bytes_in > 0) == (ex.msgs_in > 0)).all(), "a tile hears from someone iff it receives bytes"
        assert ((ex.bytes_out > 0) == (ex.msgs_out > 0)).all()
        assert s.elements is None or s.elements.sum() > 0
    assert sched.total_cycles == sum(s.cycles * s.executions for s in sched.steps)
    assert (sched.memory.total >= sched.memory.always_live_total).all()
    mapped = sum(int(sched.mapping_of(b).elements_per_tile.sum()) == b.size for b in sched.buffers.values())
    assert mapped == len(sched.buffers), "every mapping covers its buffer exactly once"
