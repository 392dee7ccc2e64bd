"""``IPUConfig.floating_point_behaviour`` and ``ipu.utils.reset_ipu_seed``: stochastic rounding to float16
(unbiased, reproducible under a seed), NaN on float16 overflow, the inv/div0/oflo traps (Graphcore's
error, variables left as before the call), and random ops drawing from the device's generator.

The cases follow Graphcore's ``floating_point_control_bits_test.py`` and ``seed_control_test.py``."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import popjit.tensorflow as tf
from popjit.codegen.engine import render_engine
from popjit.codegen.numerics import DEFAULT, Numerics
from popjit.errors import InternalError, UnimplementedError
from popjit.pipeline import compile_cached
from popjit.pipeline.compiler import lower_graph, optimize_graph
from popjit.runtime import device as devices
from popjit.tensorflow.python import ipu

SR = ipu.config.StochasticRoundingBehaviour
TRAP = r"\[Poplar\]\[Execute engine\] application_runtime_error: \[Recovery action: IPU_RESET\] Tiles in excepted state"


@pytest.fixture
def configure(fresh_ipu_system):
    """``configure(**floating_point_behaviour)``: one IPU with those options; its strategy."""
    def apply(**options):
        cfg = ipu.config.IPUConfig()
        cfg.auto_select_ipus = 1
        for name, value in options.items():
            setattr(cfg.floating_point_behaviour, name, value)
        cfg.configure_ipu_system()
        return ipu.ipu_strategy.IPUStrategy()

    return apply


def _run(strategy, fn, *args):
    with strategy.scope():
        out = strategy.run(tf.function(fn, jit_compile=True), args=args)
    return [np.asarray(o) for o in out] if isinstance(out, (list, tuple)) else np.asarray(out)


def _add(x, y):
    return x + y


ONES = np.full(4096, 1.0, np.float16)
MILLI = np.full(4096, 1e-3, np.float16)  # 1 + 0.0010004 lies 2.4% of the way from 1.000977 to 1.001953


# -- stochastic rounding ----------------------------------------------------------------------------


def test__esr_off__rounds_to_nearest(configure) -> None:
    out = _run(configure(), _add, ONES, MILLI)
    assert set(out.tolist()) == {float(np.float16(1.0009765625))}


@pytest.mark.parametrize("esr", [SR.ON, SR.REPLICA_IDENTICAL_ONLY, True])
def test__esr__rounds_to_both_neighbours(configure, esr) -> None:
    out = _run(configure(esr=esr), _add, ONES, MILLI)
    values, counts = np.unique(out, return_counts=True)
    assert values.tolist() == [1.0009765625, 1.001953125]
    assert 0 < counts[1] < counts[0]


def test__esr__reproducible_after_reset_ipu_seed_and_new_otherwise(configure) -> None:
    strategy = configure(esr=SR.ON)
    x = np.full(1000, 0.1, np.float32)

    def cast(v):
        return tf.cast(v, tf.float16)

    runs = []
    for seed in (1, 1, 2, None):
        if seed is not None:
            ipu.utils.reset_ipu_seed(seed)
        runs.append(_run(strategy, cast, x))
    again = _run(strategy, cast, x)  # the generator moved on
    assert np.array_equal(runs[0], runs[1])
    assert not np.array_equal(runs[0], runs[2])
    assert not np.array_equal(runs[2], runs[3]) and not np.array_equal(runs[3], again)
    assert set(np.unique(runs[0]).tolist()) == {float(np.float16(0.0999755859375)), float(np.float16(0.1000366211))}


@pytest.mark.parametrize("seed", [0, 12345, -7])
def test__esr__mean_of_many_roundings_is_the_value(configure, seed: int) -> None:
    """For x between float16 neighbours lo < hi (p = (x - lo) / (hi - lo)), each stochastic rounding is hi
    with probability p: over N roundings the mean is within 6 standard deviations of x,
    ``6 * gap * sqrt(p (1 - p) / N)``. The draws are seeded, so the outcome is fixed, not flaky. Rounding to
    nearest misses by far more (all N round to lo)."""
    strategy = configure(esr=SR.ON)
    lo = np.float16(1.0)
    gap = float(np.spacing(lo))
    n = 1 << 16
    for p in (0.3, 0.71875):
        x = np.float32(1.0 + p * gap)
        ipu.utils.reset_ipu_seed(seed)
        out = _run(strategy, lambda v: tf.cast(v, tf.float16), np.full(n, x, np.float32)).astype(np.float64)
        bound = 6 * gap * np.sqrt(p * (1 - p) / n)
        assert abs(out.mean() - float(x)) < bound
        assert abs(float(np.float16(x)) - float(x)) > 10 * bound  # what the test would see without it


def test__esr__applies_to_products_reductions_and_fused_results(configure) -> None:
    strategy = configure(esr=SR.ON)
    a = np.full((512, 48), 0.1, np.float16)
    tenth = 0.0999755859375  # float16(0.1)

    def f(x):
        return tf.matmul(x, x, transpose_b=True), tf.reduce_sum(x, axis=1), tf.tanh(x) * 3.0

    ipu.utils.reset_ipu_seed(3)
    mm, total, fused = _run(strategy, f, a)
    for got, exact in ((mm, 48 * tenth**2), (total, 48 * tenth), (fused, np.tanh(tenth) * 3)):
        assert len(np.unique(got)) >= 2  # rounded both ways: every element was the same exact value
        assert abs(got.astype(np.float64).mean() - exact) < 0.1 * float(np.spacing(np.float16(exact)))


def test__esr__eager_ops_on_the_ipu_round_stochastically(configure) -> None:
    configure(esr=SR.ON)
    with tf.device("/device:IPU:0"):
        out = tf.cast(np.full(2048, 0.1, np.float32), tf.float16).numpy()
    assert len(np.unique(out)) == 2


def test__stochastic_rounding_scope__still_refused_naming_the_config_option() -> None:
    with pytest.raises(UnimplementedError, match=r"floating_point_behaviour\.esr"):
        ipu.scopes.stochastic_rounding(True)


# -- NaN on overflow ------------------------------------------------------------------------------------


def _mul(x, y):
    return x * y


BIG = np.float16([10000.0])


@pytest.mark.parametrize(("options", "check"), [({}, np.isposinf), ({"nanoo": True}, np.isnan),
                                                ({"nanoo": True, "esr": SR.ON}, np.isnan)])
def test__float16_overflow__inf_or_nan_with_nanoo(configure, options, check) -> None:
    out = _run(configure(**options), _mul, BIG, BIG)
    assert check(out).all()
    assert np.isposinf(_run(configure(**options), lambda x: x * np.float16(np.inf), BIG)).all()  # inf stays inf


# -- traps ------------------------------------------------------------------------------------------------


TRAPS = [
    ("div0", lambda x, y: x / y, [np.float16([10000.0]), np.float16([0.0])], "division by zero"),
    ("oflo", _mul, [BIG, BIG], "overflow"),
    ("oflo", lambda x: tf.reduce_sum(x), [np.full(16, 5000.0, np.float16)], "overflow"),
    ("oflo", lambda x, y: tf.matmul(x, y), [np.full((2, 3), 1e20, np.float32), np.full((3, 2), 1e20, np.float32)],
     "overflow"),
    ("inv", lambda x: tf.cast(x, tf.int32), [np.float16([np.nan])], "invalid operation"),
    ("inv", lambda x: tf.sqrt(x), [np.float32([-1.0])], "invalid operation"),
    ("inv", lambda x: x * 0.0, [np.float32([np.inf])], "invalid operation"),
]


@pytest.mark.parametrize(("option", "fn", "args", "kind"), TRAPS,
                         ids=[f"{t[0]}-{t[3]}-{i}" for i, t in enumerate(TRAPS)])
def test__trap__raises_graphcores_error_only_when_its_option_is_on(configure, option, fn, args, kind) -> None:
    quiet = _run(configure(), fn, *args)  # off: the IEEE result, as TensorFlow's
    assert not np.isfinite(quiet).all() or quiet.dtype == np.int32
    strategy = configure(**{option: True})
    with pytest.raises(InternalError, match=TRAP) as e:
        _run(strategy, fn, *args)
    assert f"floating-point exception ({kind})" in str(e.value)
    assert str(e.value).endswith("IPU will be reset the next time a program is executed.")
    others = {"inv", "div0", "oflo"} - {option}
    np.testing.assert_array_equal(_run(configure(**dict.fromkeys(others, True)), fn, *args), quiet)


PASS_THROUGH = [  # inf + 1 is exact, no overflow; max or sum with an inf is no overflow; copying a NaN is no arithmetic
    (lambda x: x + 1.0, np.float32([np.inf, 2.0])),
    (lambda x: tf.reduce_max(x), np.float32([np.inf, 2.0])),
    (lambda x: tf.reduce_sum(x), np.float16([np.inf, 2.0])),
    (lambda x: tf.reshape(x, [2, 1]), np.float32([np.nan, 2.0])),
]


@pytest.mark.parametrize(("fn", "x"), PASS_THROUGH, ids=["add", "max", "sum", "reshape"])
def test__traps__no_exception_for_values_that_pass_through(configure, fn, x) -> None:
    quiet = _run(configure(), fn, x)
    np.testing.assert_array_equal(_run(configure(inv=not np.isnan(x).any(), oflo=True, div0=True), fn, x), quiet)


def test__trap__stops_the_loop_and_leaves_variables_as_before_the_call(configure) -> None:
    strategy = configure(div0=True, inv=True, oflo=True)
    with strategy.scope():
        v = tf.Variable(np.float32([1.0, 2.0]))
        count = tf.Variable(0)

        @tf.function(jit_compile=True)
        def step(d):
            for _ in tf.range(4):
                count.assign_add(1)
                v.assign(v * 2.0)
            return v / d

        np.testing.assert_array_equal(strategy.run(step, args=(np.float32([1.0, 1.0]),)).numpy(), [16.0, 32.0])
        with pytest.raises(InternalError, match="division by zero"):
            strategy.run(step, args=(np.float32([1.0, 0.0]),))
    np.testing.assert_array_equal(v.numpy(), [16.0, 32.0])
    assert int(count.numpy()) == 4


def test__traps__chain_without_exceptions_gives_the_default_result(configure) -> None:
    def chain(x):
        for _ in tf.range(5):
            x = tf.tanh(0.7 * x + 0.1) * tf.sigmoid(x) - 0.5 * x
        return x

    # equal within float32 rounding: the checks change how LLVM contracts multiply-adds (fastmath 'contract')
    x = np.random.default_rng(0).uniform(-2, 2, 5000).astype(np.float32)
    np.testing.assert_allclose(_run(configure(inv=True, div0=True, oflo=True), chain, x), _run(configure(), chain, x),
                               rtol=1e-6, atol=1e-7)


def test__set_all__turns_every_behaviour_on(configure) -> None:
    strategy = configure(set_all=True)
    with pytest.raises(InternalError, match=r"invalid operation and overflow"):  # nanoo's NaN is invalid too
        _run(strategy, _mul, BIG, BIG)
    assert len(np.unique(_run(strategy, _add, ONES, MILLI))) == 2


# -- the compiled code -------------------------------------------------------------------------------------


def _chain(x):
    for _ in tf.range(3):
        x = tf.tanh(0.7 * x + 0.1) * tf.sigmoid(x) - 0.5 * x
    return x


def _chain_program():
    graph = tf.function(_chain).get_concrete_function(np.ones(64, np.float16)).graph
    return lower_graph(optimize_graph(graph.copy()))


def test__default_behaviour__generated_code_has_no_trace_of_the_options() -> None:
    program = _chain_program()
    default = render_engine(program)
    text = default.source + "".join(r.source for r in default.codelets.values())
    for marker in ("tinv", "kq.", "sk0", "R["):
        assert marker not in text
    assert render_engine(program, Numerics()).source == default.source
    rounded = render_engine(program, Numerics(sr=True, inv=True))
    assert "R[2] += 1" in rounded.source and "kq.f32_to_f16_sr" in "".join(r.source for r in rounded.codelets.values())
    assert rounded.name != default.name and Numerics() == DEFAULT


def test__options__are_part_of_the_compile_key() -> None:
    graph = tf.function(_chain).get_concrete_function(np.ones(64, np.float16)).graph
    target = devices.get_device(0).target
    default = compile_cached(graph, target, on_ipu=True)
    nanoo = compile_cached(graph, target, on_ipu=True, numerics=Numerics(nanoo=True))
    assert nanoo is not default and nanoo.engine_source.numerics == Numerics(nanoo=True)
    assert compile_cached(graph, target, on_ipu=True, numerics=Numerics(nanoo=True)) is nanoo
    assert compile_cached(graph, target, on_ipu=True, numerics=DEFAULT) is default


# -- random ops and reset_ipu_seed ----------------------------------------------------------------------


def _draws(strategy, fn, times: int = 2) -> list[np.ndarray]:
    with strategy.scope():
        return [np.asarray(strategy.run(fn)) for _ in range(times)]


def test__reset_ipu_seed__makes_unseeded_random_ops_reproducible(configure) -> None:
    strategy = configure()
    fn = tf.function(lambda: tf.random.uniform([8]) + tf.random.normal([8]), jit_compile=True)
    ipu.utils.reset_ipu_seed(5)
    first = _draws(strategy, fn)
    ipu.utils.reset_ipu_seed(5)
    again = _draws(strategy, fn)
    ipu.utils.reset_ipu_seed(6)
    other = _draws(strategy, fn)
    assert not np.array_equal(first[0], first[1])  # each execution draws new numbers
    np.testing.assert_array_equal(np.stack(first), np.stack(again))
    assert not np.array_equal(first[0], other[0])


def test__reset_ipu_seed__moves_seeded_ops_to_its_own_stream(configure) -> None:
    strategy = configure()
    tf.random.set_seed(3)
    fn = tf.function(lambda: tf.random.uniform([4], seed=1), jit_compile=True)
    before = _draws(strategy, fn, 1)[0]
    tf.random.set_seed(3)
    fn2 = tf.function(lambda: tf.random.uniform([4], seed=1), jit_compile=True)
    np.testing.assert_array_equal(_draws(strategy, fn2, 1)[0], before)  # tf.random.set_seed alone, as before
    ipu.utils.reset_ipu_seed(9)
    seeded = _draws(strategy, fn2, 1)[0]
    ipu.utils.reset_ipu_seed(9)
    np.testing.assert_array_equal(_draws(strategy, fn2, 1)[0], seeded)
    assert not np.array_equal(seeded, before)


def test__reset_ipu_seed__makes_keras_dropout_training_reproducible(configure) -> None:
    strategy = configure()
    rng = np.random.default_rng(2)
    x, y = rng.normal(size=(32, 4)).astype(np.float32), rng.normal(size=(32, 1)).astype(np.float32)

    def fit(seed: int) -> list[float]:
        ipu.utils.reset_ipu_seed(seed)
        with strategy.scope():
            layers = tf.keras.layers
            model = tf.keras.Sequential([layers.Dense(8, kernel_initializer="ones"), layers.Dropout(0.5),
                                         layers.Dense(1, kernel_initializer="ones")])
            model.compile(optimizer="sgd", loss="mse", steps_per_execution=4)
            return model.fit(x, y, epochs=2, batch_size=8, shuffle=False, verbose=0).history["loss"]

    first = fit(4)
    assert fit(4) == first
    assert fit(5) != first


_SCRIPT = """
import sys
import numpy as np
import popjit.tensorflow as tf
from popjit import ipu
cfg = ipu.config.IPUConfig(); cfg.auto_select_ipus = 1
cfg.floating_point_behaviour.esr = ipu.config.StochasticRoundingBehaviour.ON
cfg.configure_ipu_system()
if sys.argv[1] != "none":
    ipu.utils.reset_ipu_seed(int(sys.argv[1]))
s = ipu.ipu_strategy.IPUStrategy()
f = tf.function(lambda x: (tf.random.uniform([4]), tf.cast(x, tf.float16)), jit_compile=True)
with s.scope():
    r, c = s.run(f, args=(np.full(16, 0.1, np.float32),))
print(np.asarray(r).tolist(), np.asarray(c).view(np.uint16).tolist())
"""


@pytest.mark.slow
def test__reset_ipu_seed__same_numbers_in_another_process() -> None:
    def run(seed: str) -> str:
        out = subprocess.run([sys.executable, "-c", _SCRIPT, seed], capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr[-2000:]
        return out.stdout

    assert run("7") == run("7")
    assert run("none") != run("none")


def test__trap_check__of_a_value_computed_inside_the_loop_its_operand_is_outside_of(configure) -> None:
    """``x / where(i == k, 0, 1) * 0.25``: the division's check lives in the loop that computes it, even when
    its last operand's flag was computed outside (the check was once placed with that flag and did not compile)."""
    strategy = configure(div0=True)

    @tf.function(jit_compile=True)
    def f(x, n, fail_at):
        def step(i, x):
            return i + 1, x / tf.where(tf.equal(i, fail_at), 0.0, 1.0) * 0.25
        return tf.while_loop(lambda i, x: i < n, step, [0, x])[1]

    x = np.arange(3, dtype=np.float32)
    np.testing.assert_array_equal(strategy.run(f, args=(x, 3, 5)).numpy(), x * 0.25 ** 3)
    with pytest.raises(InternalError, match="division by zero"):
        strategy.run(f, args=(np.float32([1.0, 2.0, 3.0]), 3, 1))
