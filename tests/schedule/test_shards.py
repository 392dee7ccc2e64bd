"""Programs over several IPUs in the schedule (popjit/schedule/shards.py, program.Pipeline): each shard's
compute sets and tensors on its own IPU's tiles, inter-IPU copies where a tensor crosses over, gradients
with their forward ops, and the pipeline's overlapped timeline."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from popjit import ipu
from popjit import tensorflow as tf
from popjit.dtypes import float32
from popjit.ipu.ops import pipelining_ops
from popjit.ir.loop import Buffer, Copy, Kernel, Load, Program, Store, ivar
from popjit.profile.data import build_profile
from popjit.schedule import cost
from popjit.schedule import program as prog
from popjit.schedule.computesets import INTER_IPU_COPY
from popjit.schedule.shards import buffer_homes, place_statements
from tests.helpers import device_of
from tests.schedule.helpers import pipelined

rng = np.random.default_rng(0)
A = rng.standard_normal((16, 32)).astype(np.float32)
W1 = rng.standard_normal((32, 64)).astype(np.float32)
W2 = rng.standard_normal((64, 8)).astype(np.float32)


def _schedule(fn, *args):
    return fn.get_concrete_function(*args).executable("/device:IPU:0").schedule


def _ipu_tiles(sched, step) -> set[int]:
    """The IPUs whose tiles a step computes, exchanges or keeps anything on."""
    per = sched.target.tiles // sched.target.num_ipus
    busy = (step.compute_cycles > 0) | (step.exchange_in.bytes_in > 0) | (step.exchange_in.bytes_out > 0)
    return {int(t) // per for t in np.flatnonzero(busy)}


def _two_shard_training(optimizer) -> tuple:
    """A training step of two layers on two shards, run once on a device of 2 IPUs with ``optimizer``:
    the traced step and the trained variables."""
    strategy = device_of(2)
    with strategy.scope():
        w1, w2 = tf.Variable(W1), tf.Variable(W2)

        @tf.function(jit_compile=True)
        def step(a):
            with tf.GradientTape() as tape:
                with ipu.scopes.ipu_shard(0):
                    h = tf.tanh(a @ w1)
                with ipu.scopes.ipu_shard(1):
                    loss = tf.reduce_sum(h @ w2)
            optimizer.apply_gradients(zip(tape.gradient(loss, [w1, w2]), [w1, w2]))
            return loss

        strategy.run(step, args=(A,))
    return step, w1.numpy(), w2.numpy()


@pytest.fixture
def two_shards(fresh_ipu_system):
    step, _, _ = _two_shard_training(tf.keras.optimizers.SGD(0.01))
    return _schedule(step, A), step


def test_each_shard_runs_on_its_own_ipu_tiles(two_shards):
    sched, _ = two_shards
    assert sched.target.num_ipus == 2
    per = sched.target.tiles // 2
    matmuls = [s for s in sched.steps if s.kind == "matmul"]
    for s in matmuls:
        assert _ipu_tiles(sched, s) == {s.ipu}, s.name
    assert {s.ipu for s in matmuls} == {0, 1}
    # the variables live on the IPU of the shard that uses them
    for name, ipu_index in (("W1", 0), ("W2", 1)):
        var = next(b for b in sched.buffers.values() if b.kind == "var" and b.size == {"W1": W1.size,
                                                                                        "W2": W2.size}[name])
        tiles = sched.mappings[var.uid].tiles
        assert set((tiles // per).tolist()) == {ipu_index}


def test_gradients_run_on_the_ipu_of_their_forward_ops(two_shards):
    sched, _ = two_shards
    backward = [s for s in sched.steps if s.backward and s.kind == "matmul"]
    assert backward, "the gradient matmuls are marked as backward"
    # d(loss)/dW2 = h^T g uses h on IPU 1 (a copy); d(loss)/dW1 = a^T (...) on IPU 0
    assert {s.ipu for s in backward} == {0, 1}
    forward = [s for s in sched.steps if not s.backward and s.kind == "matmul"]
    assert all(not s.backward for s in forward) and len(forward) == 2


def test_tensors_crossing_shards_are_inter_ipu_copies_over_the_links(two_shards):
    sched, _ = two_shards
    copies = [s for s in sched.steps if s.kind == INTER_IPU_COPY]
    t = sched.target
    h_bytes = A.shape[0] * W1.shape[1] * 4
    forward = [c for c in copies if not c.backward]
    assert any(int(c.exchange_in.bytes_in.sum()) == h_bytes and c.ipu == 1 for c in forward), \
        [(c.name, int(c.exchange_in.bytes_in.sum())) for c in copies]
    for c in copies:
        nbytes = int(c.exchange_in.bytes_in.sum())
        assert int(c.exchange_in.bytes_out.sum()) == nbytes  # what one IPU sends the other receives
        assert c.link_cycles == cost.link_copy_cycles(nbytes, t.link_bytes_per_cycle, t.link_latency_cycles)
        assert c.cycles == t.host_sync_cycles + c.link_cycles
        sent_from = _ipu_tiles(sched, c) - {c.ipu}
        assert len(sent_from) == 1  # from the other IPU's tiles to this one's


def test_sharded_values_and_total_cycles_include_the_copies(two_shards):
    sched, _ = two_shards
    copies = sum(s.cycles * s.executions for s in sched.steps if s.kind == INTER_IPU_COPY)
    assert copies > 0
    assert sched.total_cycles == sum(s.cycles * s.executions for s in sched.steps)
    text = sched.as_text()
    assert "2 IPUs of" in text and "peak tile memory per IPU: IPU 0" in text


def test_a_value_read_twice_on_another_ipu_is_copied_once(fresh_ipu_system):
    @tf.function(jit_compile=True)
    def f(a, b):
        with ipu.scopes.ipu_shard(0):
            x = tf.exp(a) * 3.0
        with ipu.scopes.ipu_shard(1):
            y = tf.reduce_sum(x * b) + tf.reduce_max(x)
        return y

    a, b = np.ones((64,), np.float32), np.arange(64, dtype=np.float32)
    got = device_of(2).run(f, args=(a, b)).numpy()
    np.testing.assert_allclose(got, np.sum(np.exp(1.0) * 3 * b) + np.exp(1.0) * 3, rtol=1e-5)
    sched = _schedule(f, a, b)
    copies = [s for s in sched.steps if s.kind == INTER_IPU_COPY]
    assert [int(c.exchange_in.bytes_in.sum()) for c in copies] == [64 * 4]


def test_placement_follows_data_and_homes_are_first_writers():
    a = Buffer("a", (8,), float32, "arg", binding=0)
    t = Buffer("t", (8,), float32, "temp")
    u = Buffer("u", (8,), float32, "temp")
    out = Buffer("o", (8,), float32, "out", binding=0)
    i = ivar("i0")
    k1 = Kernel("k1", (8,), [Store(t, i, Load(a, i))])
    k2 = Kernel("k2", (8,), [Store(u, i, Load(t, i))])
    k2.shard = 1
    k3 = Kernel("k3", (8,), [Store(out, i, Load(u, i))])
    copy = Copy(out, u)
    program = Program("p", [k1, k2, k3, copy], args=[a], outs=[out], temps=[t, u])
    where = place_statements(program)
    # k1 writes t, which the placed k2 reads on IPU 1; k3 and the copy follow u
    assert [where[id(s)] for s in (k1, k2, k3, copy)] == [1, 1, 1, 1]
    assert buffer_homes(program, where) == {a.uid: 1, t.uid: 1, u.uid: 1, out.uid: 1}
    k1.shard = 0
    where = place_statements(program)
    assert [where[id(s)] for s in (k1, k2, k3, copy)] == [0, 1, 1, 1]
    assert buffer_homes(program, where)[t.uid] == 0  # written on IPU 0, read on IPU 1


# ------------------------------------------------------------------------------------------------
# Pipelines

def _work(pipe: prog.Pipeline) -> tuple[dict, dict, dict]:
    """Per-IPU forward, backward and received-copy cycles of one micro-batch, from the body's steps."""
    f, b, links = {}, {}, {}
    for node in pipe.body.walk():
        if isinstance(node, prog.Execute):
            cs = node.cs
            part = links if cs.kind == INTER_IPU_COPY else (b if cs.backward else f)
            part[cs.ipu] = part.get(cs.ipu, 0) + cs.cycles
    return f, b, links


def test_grouped_pipeline_overlaps_micro_batches(fresh_ipu_system):
    _, pipe = pipelined(3, 8)
    assert (pipe.schedule, pipe.mapping, pipe.count) == ("Grouped", (0, 1, 2), 8)
    f, b, links = _work(pipe)
    assert set(f) == {0, 1, 2} and set(b) == {0, 1, 2}  # every stage has forward and backward work
    step = max(f[d] + b[d] for d in range(3)) + max(links.values())
    assert pipe.step_cycles == step + pipe.work.control
    assert pipe.steps == 8 + 2 * (3 - 1)
    assert pipe.cycles == pipe.steps * pipe.step_cycles
    busy = 8 * sum(f[d] + b[d] for d in range(3))
    assert pipe.utilisation == pytest.approx(busy / (3 * pipe.cycles))
    assert pipe.ideal_utilisation == pytest.approx(8 / 12)
    assert pipe.utilisation < pipe.ideal_utilisation  # imbalanced stages and copies cost more than the ramps
    assert pipe.cycles < pipe.count * pipe.body.cycles  # and yet the overlap beats one IPU at a time
    # every step of a stage is on its IPU; copies carry activations forward and gradients back
    copies = [n.cs for n in pipe.body.walk() if isinstance(n, prog.Execute) and n.cs.kind == INTER_IPU_COPY]
    assert {c.ipu for c in copies if not c.backward} >= {1, 2} and {c.ipu for c in copies if c.backward} >= {0, 1}


def test_sequential_and_interleaved_schedules(fresh_ipu_system):
    _, grouped = pipelined(2, 4)
    _, sequential = pipelined(2, 4, pipelining_ops.PipelineSchedule.Sequential)
    _, interleaved = pipelined(2, 4, pipelining_ops.PipelineSchedule.Interleaved)
    assert sequential.cycles == 4 * sequential.body.cycles  # no overlap: one micro-batch after another
    assert sequential.steps == 4
    f, b, links = _work(interleaved)
    link = max(links.values())
    assert interleaved.step_cycles == max(f.values()) + max(b.values()) + 2 * link + interleaved.work.control
    assert interleaved.cycles >= grouped.cycles


def test_inference_pipeline_fills_once(fresh_ipu_system):
    _, pipe = pipelined(4, 8, train=False)
    assert not pipe.training and pipe.fill == 3 and pipe.steps == 11
    assert pipe.ideal_utilisation == pytest.approx(8 / 11)


def test_pipeline_timeline_keeps_each_ipu_busy_with_one_thing_at_a_time(fresh_ipu_system):
    _, pipe = pipelined(3, 6)
    bars = pipe.timeline()
    assert len(bars) == 6 * 3 * 2
    for ipu_index in range(3):
        mine = sorted((b["start"], b["start"] + b["cycles"]) for b in bars if b["ipu"] == ipu_index)
        assert all(end <= nxt for (_, end), (nxt, _) in itertools.pairwise(mine))
    by = {(b["stage"], b["micro_batch"], b["pass"]): b for b in bars}
    for m in range(6):
        for i in range(1, 3):  # a stage starts a micro-batch after the previous stage finished it
            prev, cur = by[(i - 1, m, "forward")], by[(i, m, "forward")]
            assert cur["start"] >= prev["start"] + prev["cycles"]
        assert by[(0, m, "backward")]["start"] >= by[(2, m, "backward")]["start"] + by[(2, m, "backward")]["cycles"]
    assert max(b["start"] + b["cycles"] for b in bars) <= pipe.cycles


def test_profile_of_apipelined(fresh_ipu_system):
    sched, pipe = pipelined(2, 4)
    profile = build_profile(sched)
    (entry,) = profile["graph"]["pipelines"]
    assert entry["steps"] == pipe.steps and entry["utilisation"] == pytest.approx(pipe.utilisation)
    assert {c["ipu"] for c in profile["graph"]["compute_sets"]} == {0, 1}
    events = profile["execution"]["trace"]
    assert sum(e["cycles"] for e in events) == profile["total_cycles"]
    assert sum(e["kind"] == "pipeline" for e in events) == pipe.steps
    assert sum(profile["execution"]["cycles_by_kind"].values()) == profile["total_cycles"]
    assert [p["ipu"] for p in profile["graph"]["memory"]["peak_by_ipu"]] == [0, 1]


def _stashes(sched) -> dict[int, int]:
    """Micro-batches stashed per IPU: the extra copies of each stashed activation (they agree per IPU)."""
    out: dict[int, set[int]] = {}
    for uid, b in sched.buffers.items():
        if "stashed" in b.name:
            ipu_index, _ = sched.ipu_of_tile(int(sched.mappings[uid].tiles[0]))
            out.setdefault(ipu_index, set()).add(b.shape[0])
            original = next(o for o in sched.buffers.values() if o.name == b.name.split(" stashed")[0])
            np.testing.assert_array_equal(sched.mappings[uid].bytes_per_tile(b.dtype),
                                          b.shape[0] * sched.mappings[original.uid].bytes_per_tile(b.dtype))
            first, last = sched.memory.live_ranges[uid]
            assert sched.steps[first].executions == sched.steps[last].executions  # live for the whole loop
    assert all(len(v) == 1 for v in out.values())
    return {k: v.pop() for k, v in out.items()}


def test_stages_stash_activations_of_the_micro_batches_in_flight(fresh_ipu_system):
    sched, _ = pipelined(3, 6)
    assert _stashes(sched) == {0: 4, 1: 2}  # 2 (S - 1 - i) more micro-batches; the last stage none
    sched, _ = pipelined(3, 6, pipelining_ops.PipelineSchedule.Interleaved)
    assert _stashes(sched) == {0: 2, 1: 1}  # S - i - 1 more
    sched, _ = pipelined(3, 6, pipelining_ops.PipelineSchedule.Sequential)
    assert _stashes(sched) == {}


def test_recomputation_stashes_stage_inputs_and_recomputes_the_forward_pass(fresh_ipu_system):
    kept, plain = pipelined(3, 6)
    redo, recomputing = pipelined(3, 6, recompute=True)
    assert recomputing.recompute and not plain.recompute
    names = {b.name for b in kept.buffers.values() if "stashed" in b.name}
    fewer = {b.name for b in redo.buffers.values() if "stashed" in b.name}
    assert fewer and fewer < names and all("@ipu" in n for n in fewer)  # only what arrived over the links
    f, b = plain.work.forward, plain.work.backward
    for d in (0, 1, 2):
        assert recomputing.work.of(d) == (f[d], b[d] + f[d])
    assert recomputing.cycles > plain.cycles


def test_placement_is_in_the_graph_and_loop_text_and_the_fingerprint(two_shards):
    _, step = two_shards
    graph = step.get_concrete_function(A).graph
    text = graph.as_text()
    assert " on ipu0" in text and " on ipu1" in text and " on ipu1 backward" in text
    program = step.get_concrete_function(A).executable("/device:IPU:0").program
    assert " on ipu1 backward" in str(program)

    def placed(first: int):
        @tf.function(jit_compile=True)
        def f(a):
            with ipu.scopes.ipu_shard(first):
                x = a * 2.0
            with ipu.scopes.ipu_shard(1):
                return x + 1.0

        return f.get_concrete_function(np.ones(4, np.float32)).graph.fingerprint()

    assert placed(0) != placed(1)


@pytest.mark.parametrize("make_optimizer", [lambda: tf.keras.optimizers.SGD(0.01),
                                            lambda: tf.compat.v1.train.GradientDescentOptimizer(0.01)],
                         ids=["keras", "tf1"])
def test_sharded_optimizer_places_each_update_on_its_variables_ipu(fresh_ipu_system, make_optimizer):
    def train(optimizer):
        step, *values = _two_shard_training(optimizer)
        return step.get_concrete_function(A).graph.as_text(), *values

    plain, *plain_values = train(make_optimizer())
    sharded, *sharded_values = train(ipu.optimizers.ShardedOptimizer(make_optimizer()))
    for got, want in zip(sharded_values, plain_values):
        np.testing.assert_array_equal(got, want)  # the same numbers
    updates = [ln for ln in sharded.splitlines() if "backward" not in ln and (" sub(" in ln or "assign" in ln)]
    assert ipu.sharded_optimizer.ShardedOptimizer is ipu.optimizers.ShardedOptimizer
    assert any(" on ipu0" in ln for ln in updates) and any(" on ipu1" in ln for ln in updates), sharded
    assert sharded.count(" on ipu") > plain.count(" on ipu")  # the updates are placed, not left to the data


def test_out_of_memory_names_the_ipu_of_the_fullest_tile(fresh_ipu_system):
    cfg = ipu.config.IPUConfig()
    cfg.auto_select_ipus = 2
    cfg.ipu_model.tiles_per_ipu = 4
    cfg.configure_ipu_system()
    strategy = ipu.ipu_strategy.IPUStrategy()

    @tf.function(jit_compile=True)
    def f(a):
        with ipu.scopes.ipu_shard(0):
            x = a + 1.0
        with ipu.scopes.ipu_shard(1):
            return tf.exp(x) * 2.0 + x

    big = np.ones(1 << 20, np.float32)  # 4 MB over 4 tiles of 639 KB on each IPU
    with pytest.raises(tf.errors.ResourceExhaustedError, match=r"tile \d+ \(IPU [01]'s tile [0-3]\) is the fullest"):
        strategy.run(f, args=(big,))
