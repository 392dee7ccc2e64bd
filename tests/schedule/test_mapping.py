"""Tile mapping by Poplar's rules: the worked examples of docs/ipu_hardware.md §2.3, rotation, following inputs."""

from __future__ import annotations

import numpy as np

from popjit import dtypes
from popjit.ir.loop import Const
from popjit.schedule import make_target, schedule_program
from popjit.schedule.computesets import Builder
from popjit.schedule.mapping import LinearAllocator, linear_mapping, single_tile_mapping
from tests.schedule.helpers import F32, apply, buf, kernel, load, program


def _sizes(m) -> np.ndarray:
    per = m.elements_per_tile
    return per[per > 0]


def test__float1000__maps_onto_30_tiles_of_32_or_34_elements():
    m = linear_mapping(1000, dtypes.float32, make_target())
    sizes = _sizes(m)
    assert sizes.size == 30
    assert set(sizes.tolist()) == {32, 34}
    assert sizes.sum() == 1000


def test__half_1024x1024__maps_onto_1465_tiles_of_712_to_716_elements():
    m = linear_mapping(1024 * 1024, dtypes.float16, make_target())
    sizes = _sizes(m)
    assert sizes.size == 1465
    assert sizes.min() == 712 and sizes.max() == 716
    assert np.all(sizes % 4 == 0), "every tile holds whole grains of 4 halves"


def test__ipu1__half_1024x1024__uses_its_1216_tiles_worth_of_grains():
    # 262,144 grains over 1216 tiles: ceil(262144/1216) = 216 grains per tile, so 1214 partitions
    m = linear_mapping(1024 * 1024, dtypes.float16, make_target("ipu1"))
    sizes = _sizes(m)
    assert sizes.size == 1214
    assert sizes.max() == 216 * 4


def test__linear_mapping__keeps_128_bytes_per_tile():
    m = linear_mapping(64, dtypes.float32, make_target())  # 256 bytes: 2 tiles of 128
    assert _sizes(m).tolist() == [32, 32]


def test__successive_tensors__start_on_rotated_tiles():
    alloc = LinearAllocator(make_target("ipu2", 16))
    first, second = alloc(64, F32), alloc(64, F32)
    assert first.tiles.tolist() == [0, 1]
    assert second.tiles.tolist() == [2, 3]


def test__tensor_spanning_every_tile__is_not_rotated():
    alloc = LinearAllocator(make_target("ipu2", 4))
    alloc(64, F32)
    big = alloc(4096, F32)
    assert big.tiles.tolist() == [0, 1, 2, 3]


def test__elementwise_output__follows_the_best_mapped_input():
    # x sits on one tile, y is spread linearly: the output clones y (smaller maximum per tile),
    # so compute runs where y lives and only x's elements move.
    target = make_target("ipu2", 4)
    x, y, o = buf("x", (4096,), "arg"), buf("y", (4096,), "arg"), buf("o", (4096,), "out")
    builder = Builder(target)
    builder.assign(x, single_tile_mapping(4096, 3, 4), "test")
    builder.assign(y, linear_mapping(4096, F32, target), "test")
    (cs,) = builder.kernel(kernel("k", o, apply("add", load(x), load(y))))
    assert builder.mappings[o.uid] is builder.mappings[y.uid]
    assert builder.origin[o.uid] == "follows y"
    # tiles 0..2 receive their quarter of x (1024 floats each); tile 3 already holds its part
    assert cs.exchange_in.bytes_in.tolist() == [4096, 4096, 4096, 0]
    assert cs.exchange_in.bytes_out.tolist() == [0, 0, 0, 3 * 4096]


def test__elementwise_output__with_no_same_shape_input__is_mapped_linearly():
    target = make_target("ipu2", 4)
    o = buf("o", (4096,), "out")
    sched = schedule_program(program([kernel("fill", o, Const(1.0, F32))], [], [o]), target)
    assert sched.origin[o.uid] == "linear"
    assert _sizes(sched.mapping_of(o)).tolist() == [1024] * 4
