"""Tests for tf.random: the Philox generator, TensorFlow's seed semantics, distributions, fusion.

Statistical checks use fixed seeds and bounds of several standard errors on large samples, so
they are deterministic: they fail when the generator or a transform is broken, never by chance.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import popjit.tensorflow as tf
from popjit import dtypes
from popjit.errors import InvalidArgumentError
from popjit.ir.loop import Kernel
from popjit.kernels import random as kr
from popjit.ops import random as rops
from tests.ops.strategies import check_paths, run_all, run_path


@pytest.fixture(autouse=True)
def _fresh_seed_state():
    """Each test starts without a global seed (and leaves none behind)."""
    tf.random.set_seed(None)
    yield
    tf.random.set_seed(None)


# ----------------------------------------------------------------------------------------------
# The generator: Philox-4x32-10 known answers (Random123's kat_vectors), NumPy twin == codelets

KAT = [  # key, counter (4 words), words 0 and 1 of the output
    ((0, 0), (0, 0, 0, 0), (0x6627E8D5, 0xE169C58D)),
    ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF,) * 4, (0x408F276D, 0x41C83B0E)),
    ((0xA4093822, 0x299F31D0), (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xD16CFE09, 0x94FDCCEB)),
]


def _flat(counter: tuple[int, ...]) -> int:
    v = (counter[1] << 32) | counter[0]
    return v - (1 << 64) if v >= 1 << 63 else v


@pytest.mark.parametrize(("key", "counter", "expected"), KAT)
def test__philox__known_answers__numpy_and_codelet(key: tuple, counter: tuple, expected: tuple) -> None:
    args = (key[0], key[1], _flat(counter), counter[2], counter[3])
    assert tuple(int(w) for w in rops.philox(*args)) == expected
    assert tuple(int(w) for w in kr.philox(*args)) == expected


@given(k0=st.integers(-(2**31), 2**31 - 1), k1=st.integers(-(2**31), 2**31 - 1), flat=st.integers(0, 2**40),
       call=st.integers(0, 2**31 - 1))
def test__philox__codelet_scalars__equal_numpy_twin(k0: int, k1: int, flat: int, call: int) -> None:
    f32 = rops.sample("uniform", k0, k1, flat, call, dtypes.float32)
    f16 = rops.sample("uniform", k0, k1, flat, call, dtypes.float16)
    i32 = rops.sample("int", k0, k1, flat, call, dtypes.int32, -7, 13)
    z = rops.sample("normal", k0, k1, flat, call, dtypes.float64)
    assert np.float32(kr.uniform_f32(k0, k1, flat, call)) == f32
    assert np.float16(kr.uniform_f16(k0, k1, flat, call)) == f16
    assert kr.uniform_int(k0, k1, flat, call, -7, 13) == i32
    assert kr.normal(k0, k1, flat, call) == pytest.approx(float(z), rel=1e-12, abs=1e-12)


# ----------------------------------------------------------------------------------------------
# Stateless ops: a pure function of the seed, identical on every path and call


@given(shape=st.lists(st.integers(1, 5), max_size=3).map(tuple), seed=st.tuples(st.integers(-100, 100),
       st.integers(0, 2**31 - 1)), kind=st.sampled_from(["uniform", "uniform16", "int", "normal", "truncated"]))
def test__stateless__same_seed__bit_identical_on_every_path(shape: tuple, seed: tuple, kind: str) -> None:
    s = np.array(seed, np.int32)
    fn = {
        "uniform": lambda s: tf.random.stateless_uniform(shape, s, minval=-2.0, maxval=3.0),
        "uniform16": lambda s: tf.random.stateless_uniform(shape, s, dtype=tf.float16),
        "int": lambda s: tf.random.stateless_uniform(shape, s, minval=-5, maxval=9, dtype=tf.int32),
        "normal": lambda s: tf.random.stateless_normal(shape, s, mean=1.0, stddev=0.5),
        "truncated": lambda s: tf.random.stateless_truncated_normal(shape, s),
    }[kind]
    first = run_path("cpu", fn, s)
    check_paths(run_all(fn, s), first, tol={"rtol": 1e-6, "atol": 1e-6}, what=f"stateless {kind}")
    np.testing.assert_array_equal(run_path("cpu", fn, s), first)


def test__stateless__different_seeds__differ_and_ignore_global_seed() -> None:
    a = tf.random.stateless_uniform([64], seed=[1, 2]).numpy()
    tf.random.set_seed(5)
    b = tf.random.stateless_uniform([64], seed=[1, 2]).numpy()
    np.testing.assert_array_equal(a, b)
    for other in ([2, 1], [1, 3], [0, 2]):
        assert not np.any(tf.random.stateless_uniform([64], seed=other).numpy() == a)


def test__stateless__seed_can_be_computed_in_the_function() -> None:
    f = tf.function(lambda s: tf.random.stateless_normal([5], seed=s * 2), jit_compile=True)
    np.testing.assert_allclose(f(np.array([3, 4], np.int32)).numpy(),
                               tf.random.stateless_normal([5], seed=[6, 8]).numpy(), rtol=1e-6)


# ----------------------------------------------------------------------------------------------
# Stateful ops: TensorFlow's seed semantics


def test__stateful__eager__global_seed_reproduces_sequence() -> None:
    tf.random.set_seed(1234)
    first = [tf.random.uniform([4]).numpy(), tf.random.uniform([4]).numpy(), tf.random.normal([4], seed=7).numpy()]
    assert not np.array_equal(first[0], first[1])
    tf.random.set_seed(1234)
    again = [tf.random.uniform([4]).numpy(), tf.random.uniform([4]).numpy(), tf.random.normal([4], seed=7).numpy()]
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)


def test__stateful__eager__op_seed_gives_new_values_each_call_until_reset() -> None:
    tf.random.set_seed(3)
    a1, a2 = tf.random.uniform([8], seed=1).numpy(), tf.random.uniform([8], seed=1).numpy()
    assert not np.any(a1 == a2)
    tf.random.set_seed(3)
    np.testing.assert_array_equal(tf.random.uniform([8], seed=1).numpy(), a1)
    np.testing.assert_array_equal(tf.random.uniform([8], seed=1).numpy(), a2)


def test__stateful__no_seed__differs_between_calls() -> None:
    assert not np.array_equal(tf.random.uniform([16]).numpy(), tf.random.uniform([16]).numpy())


def test__stateful__eager_on_ipu__follows_the_same_sequence_as_cpu() -> None:
    tf.random.set_seed(11)
    cpu = [tf.random.uniform([6], seed=2).numpy() for _ in range(2)]
    tf.random.set_seed(11)
    with tf.device("/device:IPU:0"):
        ipu = [tf.random.uniform([6], seed=2).numpy() for _ in range(2)]
    for a, b in zip(cpu, ipu):
        np.testing.assert_array_equal(a, b)


def _two_draws() -> Any:
    def f():
        a = tf.random.uniform([3], seed=1)
        b = tf.random.uniform([3], seed=1)
        c = tf.random.normal([3])
        return a, b, c

    return tf.function(f, jit_compile=True)


def test__stateful__compiled__new_values_each_execution_and_reproducible() -> None:
    tf.random.set_seed(42)
    f = _two_draws()
    (a1, b1, c1), (a2, b2, c2) = [tuple(t.numpy() for t in f()) for _ in range(2)]
    np.testing.assert_array_equal(a1, b1)  # same op seed in one function: same numbers (as TensorFlow)
    assert not np.any(a1 == a2) and not np.any(c1 == c2)  # each execution draws new numbers
    tf.random.set_seed(42)
    g = _two_draws()  # a fresh trace of the same program replays the sequence
    for got, want in zip([t.numpy() for t in g()] + [t.numpy() for t in g()], [a1, b1, c1, a2, b2, c2]):
        np.testing.assert_array_equal(got, want)


def test__stateful__compiled_on_ipu_strategy__advances_counter_in_device_state() -> None:
    tf.random.set_seed(9)

    @tf.function(jit_compile=True)
    def f(x):
        return x + tf.random.uniform([4], seed=5)

    with tf.device("/device:IPU:0"):
        runs = [f(np.zeros(4, np.float32)).numpy() for _ in range(3)]
    assert len({r.tobytes() for r in runs}) == 3


def test__stateful__in_loop__each_iteration_draws_new_numbers() -> None:
    def f():
        out = tf.zeros([3, 4])
        for i in tf.range(3):
            row = tf.random.uniform([4], seed=3)
            out = out + tf.one_hot(i, 3)[:, None] * row[None, :]
        return out

    tf.random.set_seed(0)
    rows = tf.function(f, jit_compile=True)().numpy()
    assert len({r.tobytes() for r in rows}) == 3


# ----------------------------------------------------------------------------------------------
# Distributions: ranges and moments on large samples (fixed seeds: deterministic bounds)

N = 200_000


def _stats_sample(fn: Any) -> np.ndarray:
    return tf.function(fn, jit_compile=True)().numpy().astype(np.float64).reshape(-1)


def test__uniform__range_and_moments() -> None:
    x = _stats_sample(lambda: tf.random.stateless_uniform([N], seed=[7, 1], minval=-1.0, maxval=3.0))
    assert x.min() >= -1.0 and x.max() < 3.0
    assert abs(x.mean() - 1.0) < 5 * 4 / math.sqrt(12 * N)
    assert abs(x.var() - 16 / 12) < 0.02
    counts = np.histogram(x, bins=16, range=(-1, 3))[0]  # chi-square over 16 equal bins
    chi2 = ((counts - N / 16) ** 2 / (N / 16)).sum()
    assert chi2 < 60, chi2
    assert abs(np.corrcoef(x[:-1], x[1:])[0, 1]) < 0.02  # neighbouring elements independent


def test__uniform__float16_in_unit_interval_and_int_buckets() -> None:
    h = tf.function(lambda: tf.random.stateless_uniform([N], seed=[3, 3], dtype=tf.float16), jit_compile=True)()
    h = h.numpy()
    assert h.dtype == np.float16 and h.min() >= 0 and h.max() < 1 and len(np.unique(h)) > 1000
    k = tf.function(lambda: tf.random.stateless_uniform([N], seed=[3, 4], minval=-3, maxval=4, dtype=tf.int32),
                    jit_compile=True)().numpy()
    counts = np.bincount(k + 3, minlength=7)
    assert k.min() == -3 and k.max() == 3
    assert ((counts - N / 7) ** 2 / (N / 7)).sum() < 40


def test__normal__moments_and_tails() -> None:
    z = _stats_sample(lambda: tf.random.stateless_normal([N], seed=[5, 6], mean=2.0, stddev=3.0))
    z = (z - 2.0) / 3.0
    se = 1 / math.sqrt(N)
    assert abs(z.mean()) < 5 * se and abs(z.std() - 1) < 5 * se * math.sqrt(0.5) * 1.5
    assert abs(np.mean(z**3)) < 5 * math.sqrt(15 / N) and abs(np.mean(z**4) - 3) < 5 * math.sqrt(96 / N)
    assert abs(np.mean(np.abs(z) > 2) - 0.0455) < 0.003  # the two-sigma tail mass


def test__truncated_normal__within_two_sigma_with_right_spread() -> None:
    z = _stats_sample(lambda: tf.random.stateless_truncated_normal([N], seed=[1, 9]))
    assert np.abs(z).max() <= 2.0
    assert abs(z.mean()) < 0.01 and abs(z.std() - 0.8796) < 0.01


def test__stateful_calls__are_independent_streams() -> None:
    tf.random.set_seed(2)
    f = tf.function(lambda: tf.random.normal([N // 4]), jit_compile=True)
    a, b = f().numpy(), f().numpy()
    assert abs(np.corrcoef(a, b)[0, 1]) < 0.02


# ----------------------------------------------------------------------------------------------
# Fusion and errors


def test__random__fuses_with_elementwise_into_one_kernel() -> None:
    def fn(x):
        return tf.exp(tf.random.stateless_uniform([4, 5], seed=[1, 2]) * x) + 1.0

    x = np.full((4, 5), 0.5, np.float32)
    cf = tf.function(fn, jit_compile=True).get_concrete_function(x)
    kernels = [s for s in cf.executable("cpu").program.walk() if isinstance(s, Kernel)]
    assert len(kernels) == 1
    u = tf.random.stateless_uniform([4, 5], seed=[1, 2]).numpy()
    check_paths(run_all(fn, x), (np.exp(u.astype(np.float64) * 0.5) + 1).astype(np.float32), what="fused random")


def test__errors__bad_seed_shape_and_ranges() -> None:
    with pytest.raises(InvalidArgumentError, match="seed"):
        tf.random.stateless_uniform([2], seed=[1, 2, 3])
    with pytest.raises(ValueError, match="maxval"):
        tf.random.uniform([2], dtype=tf.int32)
    with pytest.raises(InvalidArgumentError, match="minval < maxval"):
        tf.random.uniform([2], minval=5, maxval=5, dtype=tf.int32)
    with pytest.raises(InvalidArgumentError, match="does not support"):
        tf.random.normal([2], dtype=tf.int32)
