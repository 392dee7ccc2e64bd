"""The IPU estimate against the published figures (``../shared/spec/ipu_arch.md``; docs/estimates.md keeps
the table): a Keras Dense layer's PopVision profile, tessellate's AMP peak measurements and the size of
matmul one IPU holds. Each check allows the 25% the estimate promises."""

from __future__ import annotations

import numpy as np
import pytest

import popjit.tensorflow as tf
from popjit import dtypes
from popjit.errors import ResourceExhaustedError
from popjit.schedule import cost, make_target, schedule_program
from tests.helpers import device_of
from tests.schedule.helpers import traced

KIB, MIB = 1024, 1024 * 1024

# ipu_tensorflow_addons' single-layer PopVision test (Poplar 3.0): Keras Dense(4096 -> 1024), batch 16, fp32
DENSE_CYCLES = 8_700
DENSE_MEMORY = {"vertexCode": 3.4 * MIB, "internalExchangeCode": 360 * KIB, "vertexInstanceState": 178 * KIB,
                "controlCode": 100 * KIB, "variables": 16.1 * MIB}
DENSE_NOT_ALWAYS_LIVE = 9.8 * MIB
DENSE_TOTAL = 32.8 * MIB


def within(got: float, want: float, tolerance: float = 0.25) -> bool:
    return abs(got - want) <= tolerance * want


@pytest.fixture(scope="module")
def dense_schedule():
    """The Dense layer's program as it runs on one ipu2: its weights are the layer's variables."""
    strategy = device_of(1)
    with strategy.scope():
        layer = tf.keras.layers.Dense(1024)
        layer.build((16, 4096))

    @tf.function(jit_compile=True)
    def forward(x):
        return layer(x)

    x = np.random.default_rng(0).standard_normal((16, 4096)).astype(np.float32)
    got = strategy.run(forward, args=(x,)).numpy()
    np.testing.assert_allclose(got, x @ layer.kernel.numpy() + layer.bias.numpy(), rtol=1e-4, atol=1e-4)
    return forward.get_concrete_function(x).executable("/device:IPU:0").schedule


def test__dense_4096_to_1024__cycles_within_25_percent_of_popvision(dense_schedule):
    assert within(dense_schedule.total_cycles, DENSE_CYCLES), dense_schedule.total_cycles
    mm = dense_schedule.step("k1_matmul/Conv1x1")
    assert "operands swapped" in mm.note, "16 rows: PopLibs' swapOperands gives the AMP long rows"


@pytest.mark.parametrize("category", sorted(DENSE_MEMORY))
def test__dense_4096_to_1024__memory_category_within_25_percent_of_popvision(dense_schedule, category):
    got = int(dense_schedule.memory.by_category()[category].sum())
    assert within(got, DENSE_MEMORY[category]), (category, got)


def test__dense_4096_to_1024__not_always_live_and_total_within_25_percent(dense_schedule):
    report = dense_schedule.memory
    assert within(int(report.not_always_live_peak.sum()), DENSE_NOT_ALWAYS_LIVE)
    assert within(int(report.total.sum()), DENSE_TOTAL)


@pytest.mark.parametrize(("rows", "tflops"), [(16, 55), (128, 211), (512, 300), (2048, 335)])
def test__amp_peak__tessellate_conv_partial_on_every_bow_tile(rows, tflops):
    # tessellate's "IPU Peak Flops" notebook: fp16 [N,16] @ [16,16] on each of a Bow IPU's 1472 tiles
    bow = make_target("ipu21")
    cycles = int(cost.conv_partial_cycles(rows, 1, 1, 1, True, bow.conv_units(dtypes.float16),
                                          bow.amp_in_channels(dtypes.float16), bow.workers))
    got = 2 * rows * 16 * 16 * bow.tiles / (cycles / bow.clock_hz) / 1e12
    assert within(got, tflops), got


def _square_matmul(n: int):
    f32 = np.zeros((n, n), np.float32)
    return schedule_program(traced(lambda a, b: tf.matmul(a, b), f32, f32), make_target())


def test__square_fp32_matmul__7168_fits_one_ipu2_and_8192_does_not():
    # 8192^2 x 3 tensors are 805 MB of the 940 MB: 92 KB a tile is left, less than the partials and operand
    # blocks of one pass of any plan; 7168 leaves 38% of the chip for them
    fits = _square_matmul(7168)
    assert not fits.oom and fits.peak_tile_memory <= fits.target.bytes_per_tile
    assert any(step.passes > 1 for step in fits.steps), "it fits by serial passes"
    with pytest.raises(ResourceExhaustedError, match="Out of memory"):
        _square_matmul(8192)


def test__square_fp32_matmul__4096_fits_where_one_pass_plans_would_not():
    sched = _square_matmul(4096)
    conv = sched.step("k1_matmul/Conv1x1")
    assert conv.passes > 1 and not sched.oom
    assert sched.peak_tile_memory <= 0.6 * sched.target.bytes_per_tile + sched.memory.always_live_total.max()


@pytest.mark.parametrize(("fn", "published"), [
    (lambda a, b: a + b, 1_697),  # BinaryOp1D float ADD: 6 x (29 + 84 x 3) + 11
    (lambda a, b: tf.exp(a), 3_242),  # UnaryOp1D float EXP: 6 x (33 + 84 x 6) + 9 + 11
])
def test__elementwise_rates__1000_floats_on_one_tile_at_poplibs_rates(fn, published):
    x = np.zeros(1000, np.float32)
    sched = schedule_program(traced(fn, x, x), make_target("ipu2", 1))
    (step,) = sched.steps
    assert within(step.max_compute_cycles, published), step.max_compute_cycles
