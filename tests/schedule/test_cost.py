"""Cycle estimators: the worked examples of docs/ipu_hardware.md §3 and their use in compute sets."""

from __future__ import annotations

import numpy as np
import pytest

from popjit import dtypes
from popjit.schedule import cost, make_target, schedule_program
from popjit.schedule.matmul_plan import plan_matmul
from tests.schedule.helpers import apply, buf, kernel, load, program


def test__float_add_1000_elements_one_tile__is_1697_cycles():
    # ceil(1000/6) = 167 -> 84 loops x (1 + 2) = 252 -> 6 x (29 + 252) + 11
    assert int(cost.binary_op_1d(1000, "add", dtypes.float32)) == 1697


def test__float_add_1000_elements__as_a_compute_set_on_a_one_tile_ipu():
    target = make_target("ipu2", 1)
    x, y, o = buf("x", (1000,), "arg"), buf("y", (1000,), "arg"), buf("o", (1000,), "out")
    sched = schedule_program(program([kernel("add", o, apply("add", load(x), load(y)))], [x, y], [o]), target)
    (cs,) = sched.compute_sets
    assert list(cs.codelets) == ["popops::BinaryOp1D<ADD,float>"]
    assert int(cs.compute_cycles[0]) == 1697
    assert cs.cycles == target.sync_cycles + 1697, "no exchange: one sync, then compute"
    assert sched.total_cycles == cs.cycles


def test__half_add__uses_the_half_vector_width():
    # half: 26 entry; ceil(167/4) = 42 loops x 3 -> 6 x (26 + 126) + 11
    assert int(cost.binary_op_1d(1000, "add", dtypes.float16)) == 6 * (26 + 42 * 3) + 11


def test__unary_exp_1000_floats__uses_the_unary_1d_formula():
    target = make_target("ipu2", 1)
    x, o = buf("x", (1000,), "arg"), buf("o", (1000,), "out")
    sched = schedule_program(program([kernel("exp", o, apply("exp", load(x)))], [x], [o]), target)
    # UnaryOp1D: W x [33 (EXP) + ceil(167 / 2) x 6] + 9 + 11
    assert int(sched.compute_sets[0].compute_cycles[0]) == 6 * (33 + 84 * 6) + 20


def test__fused_chain__costs_less_than_its_ops_one_by_one():
    n = np.array([1000])
    c = cost.DEFAULT_COST
    ops = [cost.OpUse("mul", "binary", "float", c), cost.OpUse("add", "binary", "float", c),
           cost.OpUse("tanh", "unary", "float", c)]
    fused = int(cost.elementwise_1d_cycles(ops, n)[0])
    apart = sum(int(cost.elementwise_1d_cycles([op], n)[0]) for op in ops)
    assert fused < apart


def test__conv_partial_illustration__hh16_96_rows_is_679_cycles():
    # docs/ipu_hardware.md §3.6: worker 37 + 13 x 4 - 7 = 82 -> 6 x 82 + 14 = 506 inner; outer 50 + 42 + 13 + 11
    # + 18 + 7 + 32 (loads) + 506
    got = cost.conv_partial_cycles(96, 1, 1, 1, True, conv_units=16, in_chans=16)
    assert int(got) == 50 + 42 + 13 + 11 + 18 + 7 + 32 + 506


def test__ipu1_and_ipu2__amp_and_clock_figures():
    ipu1, ipu2 = make_target("ipu1"), make_target("ipu2")
    assert (ipu1.tiles, ipu1.bytes_per_tile, ipu1.clock_hz) == (1216, 262_144, 1.6e9)
    assert (ipu2.tiles, ipu2.bytes_per_tile, ipu2.clock_hz) == (1472, 638_976, 1.33e9)
    assert ipu2.conv_units(dtypes.float16) == 16 and ipu1.conv_units(dtypes.float16) == 8
    assert ipu2.conv_units(dtypes.float32) == 16 and ipu1.conv_units(dtypes.float32) == 8


@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float16])
def test__matmul_plan__ipu1_is_slower_per_cycle_than_ipu2(dtype):
    p1 = plan_matmul(1, 1024, 1024, 1024, dtype, make_target("ipu1"))
    p2 = plan_matmul(1, 1024, 1024, 1024, dtype, make_target("ipu2"))
    assert p1.tiles <= 1216 and p2.tiles <= 1472
    assert p1.cycles > p2.cycles


def test__matmul_plan__respects_the_temporary_memory_bound():
    target = make_target("ipu2")
    plan = plan_matmul(1, 1024, 1024, 1024, dtypes.float32, target)
    assert plan.temp_bytes <= target.matmul_options.available_memory_proportion * target.bytes_per_tile
    assert plan.serial == 1


def test__matmul_plan__makes_serial_passes_when_no_single_pass_fits():
    # 2048^3 float needs >= 3 x 180^2 x 4 B ~ 389 KB per tile in one pass (> 0.6 x 624 KiB): the
    # planner splits each tile's output columns into serial passes, as poplin's serial splits do
    target = make_target("ipu2")
    plan = plan_matmul(1, 2048, 2048, 2048, dtypes.float32, target)
    assert plan.serial > 1 and plan.n_pass < plan.n
    assert plan.temp_bytes <= target.matmul_options.available_memory_proportion * target.bytes_per_tile


def test__reduce_estimates__sum_of_one_output_and_many():
    # single output: 17 + n/2 + n%2 for float; many outputs: 12 per output plus the loops
    assert int(cost.reduce_thread_cycles("sum", "float", 100, 1)) == 17 + 50
    many = int(cost.reduce_thread_cycles("sum", "float", 100, 10))
    assert many == 10 * 5 + 12 * 10 + 17
