"""The profile's data against the schedule it comes from: compute sets, the execution trace with its
loops, memory categories, liveness, out-of-memory tiles, and the file format's header."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import popjit.tensorflow as tf
from popjit.errors import InvalidArgumentError
from popjit.frontend.control_flow import cond, for_range, while_loop
from popjit.ir.loop import If, Repeat
from popjit.profile import FORMAT, VERSION, build_profile, load_profile
from popjit.profile.trace import cycles_by_kind, execution_trace
from popjit.schedule import make_target, schedule_program
from popjit.schedule import program as sp
from popjit.schedule.memory import ALWAYS_LIVE, CATEGORIES, OutOfMemoryWarning
from tests.schedule.helpers import apply, buf, kernel, load, program, traced


def f32(*shape: int) -> np.ndarray:
    return np.zeros(shape, np.float32)


def _looped(n: int):
    def fn(x):
        return for_range(0, n, 1, lambda i, acc: [acc * 0.5 + x], [tf.zeros_like(x)])[0]

    return schedule_program(traced(fn, f32(1000)), make_target("ipu2", 16))


def _contiguous(events: list[dict]) -> bool:
    return all(a["start"] + a["cycles"] == b["start"] for a, b in itertools.pairwise(events))


def test__header_target_and_totals():
    sched = schedule_program(traced(lambda x: tf.exp(x) * 2.0, f32(256)), make_target("ipu1", 8))
    p = build_profile(sched)
    assert (p["format"], p["version"]) == ("popjit-profile", 1) == (FORMAT, VERSION)
    assert p["target"] == {"version": "ipu1", "tiles": 8, "bytes_per_tile": 262_144, "clock_hz": 1.6e9,
                           "num_ipus": 1, "ipu_model": False}
    assert p["total_cycles"] == sched.total_cycles == p["execution"]["total_cycles"]
    assert p["seconds"] == pytest.approx(sched.total_cycles / 1.6e9)


def test__compute_sets__a_split_matmul_has_its_reduce_stages_and_an_elementwise_chain_one():
    sched = schedule_program(traced(lambda a, b: tf.matmul(a, b), f32(64, 4096), f32(4096, 64)), make_target())
    css = build_profile(sched)["graph"]["compute_sets"]
    kinds = [c["kind"] for c in css]
    assert kinds[0] == "matmul" and len(kinds) > 1 and set(kinds[1:]) == {"matmul-reduce"}
    assert [c["name"] for c in css] == [s.name for s in sched.steps]
    for c, step in zip(css, sched.steps):
        assert c["vertices"] == sum(c["vertices_by_codelet"].values()) == int(step.vertices.sum())
        assert (c["tiles"], c["cycles"]) == (step.tiles_used, step.cycles)
    assert css[0]["tiles"] > 1, "the partials are spread over tiles"
    chain = build_profile(schedule_program(traced(lambda x: tf.tanh(x * 3.0 + 1.0) - tf.exp(x), f32(4096)),
                                           make_target()))
    (only,) = chain["graph"]["compute_sets"]
    assert only["kind"] == "elementwise"
    compute = [e for e in chain["execution"]["trace"] if e["kind"] == "compute"]
    assert [e["step"] for e in compute] == [0]


def test__loop__its_trip_count_multiplies_the_trace():
    three, seven = build_profile(_looped(3)), build_profile(_looped(7))
    (repeat,) = [n for n in seven["graph"]["program_tree"]["children"] if n["type"] == "Repeat"]
    assert repeat["count"] == 7
    body_steps = {c["index"] for c in seven["graph"]["compute_sets"] if c["executions"] == 7}
    assert body_steps, "the loop body's compute sets run 7 times"

    def runs(p: dict, steps: set[int]) -> int:
        return sum(e["kind"] == "compute" and e["step"] in steps for e in p["execution"]["trace"])

    assert runs(seven, body_steps) == 7 * len(body_steps)
    assert runs(three, body_steps) == 3 * len(body_steps)
    trace = seven["execution"]["trace"]
    assert _contiguous(trace) and trace[0]["start"] == 0
    assert trace[-1]["start"] + trace[-1]["cycles"] == seven["total_cycles"]
    assert seven["execution"]["folded_iterations"] == 0


def test__a_long_loop__folds_the_iterations_past_the_limit_and_keeps_the_time():
    sched = _looped(1000)
    trace = execution_trace(sched.tree, limit=50)
    (loop,) = [e for e in trace.events if e["kind"] == "loop"]
    assert 0 < loop["iterations"] == trace.folded_iterations < 1000
    assert len(trace.events) < 50 + 20
    assert _contiguous(trace.events)
    assert trace.now == sched.total_cycles


def test__while_and_if__trace_and_cycles_by_kind_add_up_to_the_total():
    def fn(x):
        def body(i, acc):
            return (i + 1, cond(tf.equal(i % 2, 0), lambda: acc + x, lambda: tf.sin(acc) * 2.0))

        return while_loop(lambda i, acc: i < 5, body, [tf.constant(0), x])[1]

    sched = schedule_program(traced(fn, f32(64)), make_target("ipu2", 8))
    p = build_profile(sched)
    trace = p["execution"]["trace"]
    assert _contiguous(trace) and trace[-1]["start"] + trace[-1]["cycles"] == sched.total_cycles
    assert sum(p["execution"]["cycles_by_kind"].values()) == sched.total_cycles
    assert {"compute", "sync"} <= {e["kind"] for e in trace} <= {"compute", "exchange", "sync"}
    program_syncs = [e for e in trace if e["step"] == -1]
    assert program_syncs and all(e["name"] == "Sync(INTERNAL)" for e in program_syncs)
    tree = json.dumps(p["graph"]["program_tree"])
    assert '"type": "RepeatWhile"' in tree and '"type": "If"' in tree and '"iterations": null' in tree


def test__memory_categories__sum_to_the_schedules_per_tile_totals():
    sched = schedule_program(traced(lambda a, b: tf.nn.relu(tf.matmul(a, b)) + 1.0, f32(64, 64), f32(64, 64)),
                             make_target("ipu2", 32))
    mem = build_profile(sched)["graph"]["memory"]
    assert set(mem["by_category"]) == set(CATEGORIES)
    by_tile = np.sum([mem["by_category"][c] for c in CATEGORIES], axis=0)
    assert by_tile.tolist() == mem["total_by_tile"] == sched.memory.total.tolist()
    always = np.sum([mem["by_category"][c] for c in ALWAYS_LIVE], axis=0)
    assert always.tolist() == mem["always_live_by_tile"]
    assert mem["peak_tile_bytes"] == max(mem["total_by_tile"]) == mem["total_by_tile"][mem["peak_tile"]]
    assert mem["total_bytes"] == sum(mem["total_by_tile"])
    assert mem["oom_tiles"] == [] and not mem["oom"]


def test__liveness__one_entry_per_step_with_the_schedules_figures():
    sched = schedule_program(traced(lambda x: tf.reduce_sum(tf.exp(x), axis=1), f32(64, 64)), make_target("ipu2", 16))
    live = build_profile(sched)["graph"]["liveness"]
    assert [s["step"] for s in live["steps"]] == list(range(len(sched.steps)))
    assert [s["max_tile_bytes"] for s in live["steps"]] == sched.memory.step_max_bytes.tolist()
    assert [s["not_always_live_bytes"] for s in live["steps"]] == sched.memory.step_live_bytes.tolist()
    assert live["always_live_bytes"] == int(sched.memory.always_live_total.sum())


def test__out_of_memory_under_the_ipu_model__marks_the_tiles_over_their_memory():
    target = make_target("ipu2", 8, ipu_model=True)
    with pytest.warns(OutOfMemoryWarning):
        sched = schedule_program(traced(lambda x: x + 1.0, f32(1 << 22)), target)
    mem = build_profile(sched)["graph"]["memory"]
    over = [t for t, n in enumerate(mem["total_by_tile"]) if n > target.bytes_per_tile]
    assert mem["oom"] and mem["oom_tiles"] == over and len(over) == 8
    assert mem["oom_text"].startswith("Out of memory on tile")


def test__graph_or_execution_alone():
    sched = schedule_program(traced(lambda x: x * 2.0, f32(64)), make_target("ipu2", 4))
    assert "execution" not in build_profile(sched, execution=False)
    assert "graph" not in build_profile(sched, graph=False)


def test__load_profile__checks_the_header(tmp_path):
    sched = schedule_program(traced(lambda x: x * 2.0, f32(64)), make_target("ipu2", 4))
    good = tmp_path / "profile.json"
    good.write_text(json.dumps(build_profile(sched)))
    assert load_profile(good)["total_cycles"] == sched.total_cycles
    for bad, message in [({"format": "other"}, "is not a popjit profile"),
                         ({"format": FORMAT, "version": VERSION + 1}, f"of version {VERSION + 1}")]:
        good.write_text(json.dumps(bad))
        with pytest.raises(InvalidArgumentError, match=message):
            load_profile(good)
    good.write_text("{not json")
    with pytest.raises(InvalidArgumentError, match="cannot read the profile"):
        load_profile(good)


# ----------------------------------------------------------------------------------------------
# Any program tree: the trace and the phase totals are the schedule's cycles


def _bodies(x, o, p):
    """Random statement lists over ``o += x`` (cheap) and ``o = sin(x)`` (dear) kernels, nested in
    ``Repeat`` and ``If`` up to three deep."""
    leaf = st.sampled_from(["cheap", "dear"]).map(
        lambda k: kernel(k, o, apply("add", load(o), load(x)) if k == "cheap" else apply("sin", load(x))))
    return st.recursive(
        st.lists(leaf, min_size=1, max_size=2),
        lambda inner: st.lists(st.one_of(
            leaf,
            st.builds(lambda n, body: Repeat(n, body), st.integers(1, 30), inner),
            st.builds(lambda a, b: If(p, a, b), inner, inner)), min_size=1, max_size=3),
        max_leaves=6)


@st.composite
def _programs(draw):
    x, o, p = buf("x", (512,), "arg"), buf("o", (512,), "out"), buf("p", (), "arg", dtype=tf.bool)
    return program(draw(_bodies(x, o, p)), [x, p], [o])


@given(_programs(), st.integers(5, 200))
def test__any_program__trace_ends_at_the_total_and_phases_sum_to_it(loop_program, limit):
    sched = schedule_program(loop_program, make_target("ipu2", 4))
    trace = execution_trace(sched.tree, limit)
    assert _contiguous(trace.events)
    assert trace.now == sched.total_cycles == sum(cycles_by_kind(sched.tree).values())
    executed = sum(e["kind"] == "compute" for e in trace.events)
    folded = sum(e["iterations"] for e in trace.events if e["kind"] == "loop")
    assert (folded == 0) == (trace.folded_iterations == 0)
    if not folded:  # every execution of every compute set is in the trace (the taken branch: the dearer)
        expected = sum(n.cs.executions for n in _costed_executes(sched.tree))
        assert executed == expected


def _costed_executes(node: sp.Node) -> list[sp.Execute]:
    """The Execute nodes the estimate runs: both branches are scheduled, only the dearer one is costed."""
    if isinstance(node, sp.Execute):
        return [node]
    out = []
    for nodes, _ in node.runs():
        for child in nodes:
            out += _costed_executes(child)
    return out
