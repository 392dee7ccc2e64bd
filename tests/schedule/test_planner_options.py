"""The matmul and convolution planner's options (``IPUConfig.matmuls.poplar_options``,
``convolutions.poplar_options``): what they change in the estimate, PopLibs' fallback when no plan fits,
and the errors for options popjit does not take."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import popjit.tensorflow as tf
from popjit import dtypes, ipu
from popjit.errors import InvalidArgumentError, UnimplementedError
from popjit.ipu.ops import pipelining_ops
from popjit.ipu.ops.pipelining_ops import PipelineStageOptions
from popjit.runtime import device as devices
from popjit.schedule import make_target
from popjit.schedule.matmul_plan import operand_layout, output_layout, plan_matmul
from popjit.schedule.target import PlanOptions
from tests.schedule.helpers import pipelined, traced

F32, F16 = dtypes.float32, dtypes.float16


def _configured(matmuls: dict | None = None, convolutions: dict | None = None) -> ipu.ipu_strategy.IPUStrategy:
    cfg = ipu.config.IPUConfig()
    cfg.auto_select_ipus = 1
    cfg.matmuls.poplar_options = matmuls or {}
    cfg.convolutions.poplar_options = convolutions or {}
    cfg.configure_ipu_system()
    return ipu.ipu_strategy.IPUStrategy()


def _schedule(strategy: ipu.ipu_strategy.IPUStrategy, fn, *args):
    strategy.run(fn, args=args)
    return fn.get_concrete_function(*args).executable("/device:IPU:0").schedule


@pytest.mark.parametrize("dtype", [F32, F16])
def test__lower_proportion__less_temporary_memory_and_more_cycles(dtype):
    target = make_target()
    default = plan_matmul(1, 1024, 1024, 1024, dtype, target)
    low = plan_matmul(1, 1024, 1024, 1024, dtype, target, options=PlanOptions(0.05))
    assert low.temp_bytes <= 0.05 * target.bytes_per_tile < default.temp_bytes
    assert low.cycles > default.cycles


def test__matmul_options__change_the_matmuls_estimate_through_ipu_config(fresh_ipu_system):
    @tf.function(jit_compile=True)
    def f(a, b):
        return tf.matmul(a, b)

    a = np.ones((1024, 1024), np.float32)
    steps = {}
    for proportion in ("0.6", "0.05"):
        sched = _schedule(_configured({"availableMemoryProportion": proportion}), f, a, a)
        steps[proportion] = sched.step("k1_matmul")
        np.testing.assert_allclose(f(a, a).numpy(), a @ a)
    low, default = steps["0.05"], steps["0.6"]
    assert low.temp_bytes.max() < default.temp_bytes.max()
    assert low.cycles * low.passes > default.cycles * default.passes
    assert devices.system().devices[0].target.matmul_options == PlanOptions(0.05)


def test__convolution_options__apply_to_convolutions_and_their_gradients_only(fresh_ipu_system):
    x, w, m = np.ones((8, 16, 16, 64), np.float32), np.ones((3, 3, 64, 64), np.float32), np.ones((64, 64), np.float32)

    @tf.function(jit_compile=True)
    def f(x, w, m):
        with tf.GradientTape() as tape:
            tape.watch(w)
            y = tf.reduce_sum(tf.matmul(tf.reshape(tf.nn.conv2d(x, w, 1, "SAME"), [-1, 64]), m))
        return y, tape.gradient(y, w)

    program = traced(f.python_function, x, w, m).as_text()
    matmuls = [line.split()[1] for line in program.splitlines() if line.strip().startswith("matmul ")]
    convolutions = {line.split()[1] for line in program.splitlines() if line.strip().startswith("matmul ")
                    and " convolution" in line}
    assert len(convolutions) == 2 and len(matmuls) == 4, "a convolution and a matmul, and their gradients"
    default = _schedule(_configured(), f, x, w, m)
    low = _schedule(_configured(convolutions={"availableMemoryProportion": "0.01"}), f, x, w, m)

    def plan_notes(sched):
        return {name: [s.note for s in sched.steps if s.kind == "matmul" and s.name.split("/")[0] == name]
                for name in matmuls}

    before, after = plan_notes(default), plan_notes(low)
    for name in matmuls:
        assert (before[name] != after[name]) == (name in convolutions), name
    assert devices.system().devices[0].target.convolution_options == PlanOptions(0.01)
    assert devices.system().devices[0].target.matmul_options == PlanOptions()


def test__no_plan_fits__the_bound_doubles_until_one_fits(caplog):
    target = make_target()
    with caplog.at_level(logging.WARNING, logger="popjit"):
        plan = plan_matmul(1, 512, 512, 512, F32, target, options=PlanOptions(0.0001), name="tiny")
    retry = "Unable to meet the memory target of matmul tiny: retrying with a per-tile memory limit of "
    limits = [int(r.getMessage().split(retry)[1].split()[0]) for r in caplog.records if retry in r.getMessage()]
    bound = 0.0001 * target.bytes_per_tile
    assert len(limits) >= 2 and all(abs(got - bound * 2 ** i) <= 1 for i, got in enumerate(limits, 1))
    assert limits[-2] < plan.temp_bytes <= limits[-1]


def test__nothing_fits_twice_the_tile__the_least_memory_plan_is_taken(caplog):
    four_tiles = make_target("ipu2", 4)
    with caplog.at_level(logging.WARNING, logger="popjit"):
        plan = plan_matmul(1, 1024, 1024, 1024, F32, four_tiles, name="big")
    assert any("matmul big: optimising for minimum memory" in r.getMessage() for r in caplog.records)
    least = plan_matmul(1, 1024, 1024, 1024, F32, four_tiles, options=PlanOptions(0.0))
    assert plan.temp_bytes == least.temp_bytes > 2 * 0.6 * four_tiles.bytes_per_tile, "the last bound tried"


def test__proportion_zero__asks_for_the_least_memory_without_warnings(caplog):
    with caplog.at_level(logging.WARNING, logger="popjit"):
        plan_matmul(1, 300, 200, 100, F32, make_target(), options=PlanOptions(0.0))
    assert not caplog.records


def test__half_partials__halve_the_partials_of_half_matmuls_only():
    target = make_target()
    half = PlanOptions(half_partials=True)
    p16, h16 = plan_matmul(1, 64, 64, 8192, F16, target), plan_matmul(1, 64, 64, 8192, F16, target, options=half)
    assert (p16.partial_bytes, h16.partial_bytes) == (4, 2) and h16.half_partials
    assert plan_matmul(1, 64, 64, 8192, F32, target, options=half).partial_bytes == 4, "float products stay float"


def test__half_partials__name_the_half_codelets_in_the_schedule(fresh_ipu_system):
    @tf.function(jit_compile=True)
    def f(a, b):
        return tf.matmul(a, b)

    a, b = np.ones((64, 8192), np.float16), np.ones((8192, 64), np.float16)
    sched = _schedule(_configured({"partialsType": "half"}), f, a, b)
    codelets = {c for s in sched.steps for c in s.codelets}
    assert "poplin::ConvPartial1x1Out<half,half,16>" in codelets
    assert any(c.startswith("poplin::ReduceAdd<half,half>") for c in codelets)


def _matmul_notes(sched) -> dict[tuple[int, bool], list[str]]:
    """The plans of the matmul steps, by (IPU, backward)."""
    notes: dict[tuple[int, bool], list[str]] = {}
    for s in sched.steps:
        if s.kind == "matmul":
            notes.setdefault((s.ipu, s.backward), []).append(s.note)
    return notes


def test__pipeline_stage_options__plan_that_stage_and_pass_only(fresh_ipu_system):
    least = pipelining_ops.PipelineStageOptions(matmul_options={"availableMemoryProportion": "0"})
    default = _matmul_notes(pipelined(2, 4)[0])
    forward = _matmul_notes(pipelined(2, 4, forward_propagation_stages_poplar_options=[
        least, pipelining_ops.PipelineStageOptions()])[0])
    backward = _matmul_notes(pipelined(2, 4, backward_propagation_stages_poplar_options=[
        least, pipelining_ops.PipelineStageOptions()])[0])
    assert set(default) == {(0, False), (1, False), (0, True), (1, True)}
    changed = {key for key in default if forward[key] != default[key]}
    assert changed == {(0, False)}, "stage 0's forward matmul only"
    changed = {key for key in default if backward[key] != default[key]}
    assert changed == {(0, True)}, "stage 0's gradient matmul only"


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    ({"forward_propagation_stages_poplar_options": [PipelineStageOptions()]}, ValueError,
     "forward_propagation_stages_poplar_options must be a list or a tuple"),
    ({"backward_propagation_stages_poplar_options": [PipelineStageOptions(), {}]}, TypeError,
     "backward_propagation_stages_poplar_options to be of type PipelineStageOptions"),
    ({"weight_update_poplar_options": {"dead": "beaf"}}, TypeError,
     "weight_update_poplar_options to be of type PipelineStageOptions"),
])
def test__pipeline_stage_options__graphcores_checks(fresh_ipu_system, kwargs, error, message):
    with pytest.raises(error, match=message):
        pipelined(2, 4, **kwargs)


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    ({"matmul_options": {"availableMemoryProportion": "2"}}, InvalidArgumentError,
     r"PipelineStageOptions\(matmul_options\): availableMemoryProportion must be a number from 0 to 1"),
    ({"convolution_options": {"enableFastReduce": "true"}}, UnimplementedError, "'enableFastReduce'"),
    ({"slice_options": {"availableMemoryProportion": "0.1"}}, UnimplementedError, "it plans no slices"),
])
def test__pipeline_stage_options__refuse_what_popjit_does_not_plan(kwargs, error, message):
    with pytest.raises(error, match=message):
        PipelineStageOptions(**kwargs)


@pytest.mark.parametrize(("options", "error", "message"), [
    ({"use128BitConvUnitLoad": "true"}, UnimplementedError,
     "matmuls.poplar_options: the PopLibs option 'use128BitConvUnitLoad' is not implemented by popjit"),
    ({"availableMemoryProportion": "lots"}, InvalidArgumentError, "must be a number from 0 to 1, not 'lots'"),
    ({"availableMemoryProportion": "1.5"}, InvalidArgumentError, "must be a number from 0 to 1"),
    ({"partialsType": "double"}, InvalidArgumentError, "partialsType must be 'half' or 'float', not 'double'"),
])
def test__options_popjit_does_not_take__raise_and_leave_the_system_as_it_was(fresh_ipu_system, options, error,
                                                                             message):
    before = [d.target for d in devices.system().devices]
    cfg = ipu.config.IPUConfig()
    cfg.auto_select_ipus = 2
    cfg.matmuls.poplar_options = options
    with pytest.raises(error, match=message):
        cfg.configure_ipu_system()
    assert [d.target for d in devices.system().devices] == before


@given(m=st.integers(1, 40), n=st.integers(1, 300), k=st.integers(1, 200), g=st.integers(1, 3),
       ta=st.booleans(), tb=st.booleans())
def test__plan_layouts__map_every_element_once_either_orientation(m, n, k, g, ta, tb):
    target = make_target("ipu2", 64)
    plan = plan_matmul(g, m, n, k, F32, target)
    out = output_layout(plan).mapping(target.tiles)
    assert out.elements_per_tile.sum() == g * m * n and (out.tiles < target.tiles).all()
    for which, transposed in (("a", ta), ("b", tb)):
        mapping = operand_layout(plan, which, g, transposed).mapping(target.tiles)
        assert mapping.elements_per_tile.sum() == g * k * (m if which == "a" else n)


def test__few_rows_many_columns__the_planner_swaps_the_operands():
    plan = plan_matmul(1, 16, 1024, 4096, F32, make_target())
    assert plan.swapped and (plan.M, plan.N) == (1024, 16)
    assert not plan_matmul(1, 1024, 16, 4096, F32, make_target()).swapped
