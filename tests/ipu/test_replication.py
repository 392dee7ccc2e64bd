"""Replication (spec §1.12): a device of N IPUs runs a program as N replicas, each with its own variables,
infeed elements, random generator and engine; collectives exchange values between them.

Every expected value is computed here in closed form or with NumPy from what each replica holds.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from popjit import ipu
from popjit import tensorflow as tf
from popjit.errors import InternalError, InvalidArgumentError, UnimplementedError
from popjit.runtime import device as devices
from tests.helpers import device_of

R = 4


@pytest.fixture
def replicated(fresh_ipu_system):
    """A device of ``R`` IPUs (R replicas of every one-IPU program), and its strategy."""
    return device_of(R)


def _per_replica(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """What replica r holds in the tests below: ``base * (r + 1) + r`` for a fixed ``base``."""
    base = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return np.stack([base * (r + 1) + r for r in range(R)])


def _replica_value(shape: tuple[int, ...], seed: int = 0) -> tf.Tensor:
    """Inside a program: this replica's value of :func:`_per_replica`."""
    base = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    r = tf.cast(ipu.replication_ops.replication_index(), tf.float32)
    return tf.constant(base) * (r + 1) + r


def test_replica_0_view_and_every_replica_index(replicated):
    @tf.function(jit_compile=True)
    def f():
        index = ipu.replication_ops.replication_index()
        return index, ipu.all_to_all_op.all_gather(index, R, name=None)

    index, gathered = replicated.run(f)
    assert index.dtype == tf.int32 and int(index) == 0  # strategy.run returns replica 0's view
    np.testing.assert_array_equal(gathered.numpy(), np.arange(R))


@pytest.mark.parametrize("group", [None, 1, 2, 4])
def test_cross_replica_sum_and_mean_per_group(replicated, group):
    @tf.function(jit_compile=True)
    def f():
        x = _replica_value((3, 2))
        return (ipu.cross_replica_ops.cross_replica_sum(x, group), ipu.cross_replica_ops.cross_replica_mean(x, group),
                ipu.all_to_all_op.all_gather(ipu.cross_replica_ops.cross_replica_sum(x, group), R, None))

    total, mean, every = replicated.run(f)
    values = _per_replica((3, 2))
    k = group or R
    expected = [values[r - r % k: r - r % k + k].sum(0) for r in range(R)]
    np.testing.assert_allclose(total.numpy(), expected[0], rtol=1e-6)
    np.testing.assert_allclose(mean.numpy(), expected[0] / k, rtol=1e-6)
    np.testing.assert_allclose(every.numpy(), np.stack(expected), rtol=1e-6)


def test_reduce_scatter_pads_and_scatters(replicated):
    @tf.function(jit_compile=True)
    def f():
        x = _replica_value((7,))
        part = ipu.reduce_scatter_op.reduce_scatter(x, R)
        return ipu.all_to_all_op.all_gather(part, R, None)

    parts = replicated.run(f).numpy()
    total = _per_replica((7,)).sum(0)
    assert parts.shape == (R, 2)  # ceil(7 / 4)
    np.testing.assert_allclose(parts.reshape(-1), np.concatenate([total, [0.0]]), rtol=1e-6)


def test_all_to_all_exchanges_parts(replicated):
    @tf.function(jit_compile=True)
    def f():
        x = _replica_value((R * 2, 3))
        return ipu.all_to_all_op.all_gather(ipu.all_to_all_op.all_to_all(x, 0, 1, R), R, None)

    got = replicated.run(f).numpy()
    values = _per_replica((R * 2, 3))
    for r in range(R):
        expected = np.concatenate([values[s][2 * r:2 * r + 2] for s in range(R)], axis=1)
        np.testing.assert_allclose(got[r], expected, rtol=1e-6, atol=1e-6)


def test_infeed_order_and_outfeed_replica_dimension(replicated):
    data = np.arange(24, dtype=np.float32).reshape(12, 2)
    infeed = ipu.ipu_infeed_queue.IPUInfeedQueue(tf.data.Dataset.from_tensor_slices(data))
    every = ipu.ipu_outfeed_queue.IPUOutfeedQueue()
    last = ipu.ipu_outfeed_queue.IPUOutfeedQueue(ipu.ipu_outfeed_queue.IPUOutfeedMode.LAST)

    def body(x):
        every.enqueue(x)
        last.enqueue(ipu.replication_ops.replication_index())

    @tf.function(jit_compile=True)
    def f():
        ipu.loops.repeat(3, body, infeed_queue=infeed)

    replicated.run(f)
    got = every.dequeue()
    assert got.shape == (3, R, 2)
    np.testing.assert_array_equal(got, data.reshape(3, R, 2))  # replica r, step i: element i*R + r
    np.testing.assert_array_equal(last.dequeue(), np.arange(R))
    empty = every.dequeue()
    assert empty.shape == (0, R, 2)


def test_sdk1_feeds_name_the_replication_factor(replicated):
    data = np.arange(8, dtype=np.float32)
    infeed = ipu.ipu_infeed_queue.IPUInfeedQueue(tf.data.Dataset.from_tensor_slices(data), feed_name="in",
                                                 replication_factor=R)
    outfeed = ipu.ipu_outfeed_queue.IPUOutfeedQueue(feed_name="out", replication_factor=R)

    @tf.function(jit_compile=True)
    def f():
        ipu.loops.repeat(2, lambda x: outfeed.enqueue(x), infeed_queue=infeed)

    replicated.run(f)
    np.testing.assert_array_equal(outfeed.dequeue(), data.reshape(2, R))


def test_a_dry_infeed_fails_before_any_replica_runs(replicated):
    infeed = ipu.ipu_infeed_queue.IPUInfeedQueue(tf.data.Dataset.from_tensor_slices(np.ones((6, 1), np.float32)))
    with replicated.scope():
        v = tf.Variable(0.0)

    def body(x):
        v.assign_add(tf.reduce_sum(x))

    @tf.function(jit_compile=True)
    def f():
        ipu.loops.repeat(2, body, infeed_queue=infeed)

    with pytest.raises(tf.errors.OutOfRangeError):
        replicated.run(f)  # needs 2 steps x 4 replicas = 8 elements
    assert float(v.numpy()) == 0.0


def test_each_replica_has_its_own_variables(replicated):
    with replicated.scope():
        v = tf.Variable(np.zeros(2, np.float32))

    @tf.function(jit_compile=True)
    def bump():
        v.assign_add(tf.fill([2], tf.cast(ipu.replication_ops.replication_index(), tf.float32) + 1))
        return ipu.all_to_all_op.all_gather(v.read_value(), R, None)

    replicated.run(bump)
    every = replicated.run(bump).numpy()
    np.testing.assert_array_equal(every[:, 0], 2 * (np.arange(R) + 1))  # each replica kept its own value
    np.testing.assert_array_equal(v.numpy(), [2.0, 2.0])  # the host reads replica 0
    v.assign([10.0, 10.0])  # the host's value reaches every replica
    every = replicated.run(bump).numpy()
    np.testing.assert_array_equal(every[:, 0], 10 + np.arange(R) + 1)


def test_replicated_training_equals_one_replica_on_the_whole_batch(fresh_ipu_system):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((R * 8, 5)).astype(np.float32)
    y = rng.standard_normal((R * 8, 1)).astype(np.float32)
    w0 = rng.standard_normal((5, 1)).astype(np.float32)

    def train(replicas: int) -> np.ndarray:
        cfg = ipu.config.IPUConfig()
        cfg.auto_select_ipus = replicas
        cfg.configure_ipu_system()
        strategy = ipu.ipu_strategy.IPUStrategy()
        batch = len(x) // replicas
        infeed = ipu.ipu_infeed_queue.IPUInfeedQueue(tf.data.Dataset.from_tensor_slices((x, y)).batch(
            batch, drop_remainder=True).repeat())
        with strategy.scope():
            w = tf.Variable(w0)

            def step(xb, yb):
                with tf.GradientTape() as tape:
                    loss = tf.reduce_mean((xb @ w - yb) ** 2)
                g = ipu.cross_replica_ops.cross_replica_mean(tape.gradient(loss, w))
                w.assign_sub(0.1 * g)

            @tf.function(jit_compile=True)
            def run():
                ipu.loops.repeat(5, step, infeed_queue=infeed)

            strategy.run(run)
        return w.numpy()

    np.testing.assert_allclose(train(R), train(1), rtol=2e-5, atol=1e-6)


def test_replicas_draw_different_random_numbers_unless_identical(replicated):
    @tf.function(jit_compile=True)
    def f():
        return ipu.all_to_all_op.all_gather(tf.random.uniform([8]), R, None)

    ipu.utils.reset_ipu_seed(5)
    draws = replicated.run(f).numpy()
    assert len({tuple(d) for d in draws}) == R
    ipu.utils.reset_ipu_seed(5, experimental_identical_replicas=True)
    same = replicated.run(f).numpy()
    assert all(np.array_equal(same[0], d) for d in same)
    np.testing.assert_array_equal(same[0], draws[0])  # replica 0 draws what it drew before


def test_a_group_that_does_not_divide_the_replicas_fails_to_compile(replicated):
    @tf.function(jit_compile=True)
    def f(x):
        return ipu.cross_replica_ops.cross_replica_sum(x, replica_group_size=3)

    with pytest.raises(InvalidArgumentError, match=r"groups of 3 replicas.*4 replicas"):
        replicated.run(f, args=(np.ones(2, np.float32),))


def test_collectives_do_not_run_on_the_host():
    @tf.function
    def f(x):
        return ipu.cross_replica_ops.cross_replica_sum(x)

    with pytest.raises(InvalidArgumentError, match="runs only in a program on an IPU device"):
        f(np.ones(2, np.float32))


def test_one_replica_is_a_group_of_one():
    strategy = ipu.ipu_strategy.IPUStrategy()

    @tf.function(jit_compile=True)
    def f(x):
        return (ipu.cross_replica_ops.cross_replica_sum(x), ipu.all_to_all_op.all_gather(x, 1, None),
                ipu.replication_ops.replication_index())

    total, gathered, index = strategy.run(f, args=(np.arange(3, dtype=np.float32),))
    np.testing.assert_array_equal(total.numpy(), np.arange(3))
    np.testing.assert_array_equal(gathered.numpy(), np.arange(3)[None])
    assert int(index) == 0


def test_collectives_take_float_and_int32_only(replicated):
    @tf.function(jit_compile=True)
    def f(x):
        return ipu.cross_replica_ops.cross_replica_sum(x)

    with pytest.raises(TypeError, match="bool"):
        replicated.run(f, args=(np.ones(2, bool),))


def test_a_failing_replica_stops_the_others(fresh_ipu_system):
    strategy = device_of(2, trap_div0=True)

    @tf.function(jit_compile=True)
    def f(x):
        r = tf.cast(ipu.replication_ops.replication_index(), tf.float32)
        y = x / r  # replica 0 divides by zero
        return ipu.cross_replica_ops.cross_replica_sum(ipu.cross_replica_ops.cross_replica_sum(y) * 2.0)

    threads_before = {t.name for t in threading.enumerate()}
    with pytest.raises(InternalError, match="floating-point exception"):
        strategy.run(f, args=(np.ones(4, np.float32),))
    np.testing.assert_array_equal(device_of(2).run(f, args=(np.ones(4, np.float32),)).numpy(), np.full(4, np.inf))
    new = {t.name for t in threading.enumerate()} - threads_before  # the replicas' pool, not stuck threads
    assert new <= {"popjit-replica_0", "popjit-replica_1", "popjit-interrupts"}, new


def test_collectives_are_ipu_link_steps_in_the_schedule(replicated):
    @tf.function(jit_compile=True)
    def f(x, y):
        return ipu.cross_replica_ops.cross_replica_sum(x), ipu.cross_replica_ops.cross_replica_sum(y)

    small, large = np.ones(256, np.float32), np.ones(256 * 64, np.float32)
    replicated.run(f, args=(small, large))
    schedule = f.get_concrete_function(small, large).executable("/device:IPU:0").schedule
    steps = [s for s in schedule.steps if s.program == "ReplicatedCollective"]
    assert len(steps) == 2
    cycles = sorted(s.link_cycles for s in steps)
    target = schedule.target
    assert target.replicas == R
    expected = [int(np.ceil(2 * (R - 1) / R * n * 4 / target.link_bytes_per_cycle)) + 2 * (R - 1) *
                target.link_latency_cycles for n in (small.size, large.size)]
    assert cycles == expected
    assert all(("link", s.link_cycles) in s.phases for s in steps)


@pytest.mark.parametrize("option, value", [
    ("floating_point_behaviour.esr", ipu.config.StochasticRoundingBehaviour.REPLICA_IDENTICAL_ONLY),
    ("experimental.enable_prng_stability", True),
])
def test_replica_identity_options_are_refused_on_replicated_devices(fresh_ipu_system, option, value):
    def config(ipus: int) -> ipu.config.IPUConfig:
        cfg = ipu.config.IPUConfig()
        cfg.auto_select_ipus = ipus
        category, name = option.split(".")
        setattr(getattr(cfg, category), name, value)
        return cfg

    config(1).configure_ipu_system()  # one replica: every value is replica identical
    with pytest.raises(UnimplementedError, match=option.split(".")[-1]):
        config(2).configure_ipu_system()
    assert devices.get_device(0).num_ipus == 1  # the system is as it was


def test_gradients_of_collectives_across_replicas(replicated):
    """Each replica's loss weighs a collective's result with its own weights ``c_r``; the gradient each
    replica gets for its input is what the other replicas' weights say (closed forms in NumPy)."""
    n = 6

    @tf.function(jit_compile=True)
    def grads():
        r = tf.cast(ipu.replication_ops.replication_index(), tf.float32)
        x = tf.fill([n], 1.0) * (r + 1.0)
        x2 = tf.fill([R, 2], 1.0) * (r + 1.0)
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(x)
            tape.watch(x2)
            c = tf.reshape(tf.range(R * n, dtype=tf.float32), [R, n]) * (r + 1.0)
            losses = {"sum": tf.reduce_sum(c[0] * ipu.cross_replica_ops.cross_replica_sum(x)),
                      "gather": tf.reduce_sum(c * ipu.all_to_all_op.all_gather(x, R, None)),
                      "scatter": tf.reduce_sum(tf.reshape(c, [-1])[:2] * ipu.reduce_scatter_op.reduce_scatter(x, R)),
                      "to_all": tf.reduce_sum(c[:, :2] * ipu.all_to_all_op.all_to_all(x2, 0, 0, R))}
        return {k: ipu.all_to_all_op.all_gather(tape.gradient(v, x2 if k == "to_all" else x), R, None)
                for k, v in losses.items()}

    got = {k: v.numpy() for k, v in replicated.run(grads).items()}
    c = [np.arange(R * n, dtype=np.float64).reshape(R, n) * (r + 1) for r in range(R)]
    np.testing.assert_allclose(got["sum"], np.tile(sum(cr[0] for cr in c), (R, 1)))  # d/dx_r sum_j c_j . sum(x)
    np.testing.assert_allclose(got["gather"], np.stack([sum(cr[r] for cr in c) for r in range(R)]))
    part = -(-n // R)  # reduce_scatter: replica q keeps elements [q*part, (q+1)*part) of the sum
    want = np.zeros((R, n))
    for q in range(R):
        weights = c[q].reshape(-1)[:2]
        for i in range(part):
            if q * part + i < n:
                want[:, q * part + i] = weights[i]
    np.testing.assert_allclose(got["scatter"], want)
    # all_to_all: row r of replica j's x2 goes to replica r (its row j): its gradient is c_r[j, :2]
    np.testing.assert_allclose(got["to_all"], np.stack([np.stack([c[r][j, :2] for r in range(R)]) for j in range(R)]))


def test_pre_compile_mode_gives_replicated_outfeeds_their_replica_axis(fresh_ipu_system):
    cfg = ipu.config.IPUConfig()
    cfg.auto_select_ipus = R
    cfg.device_connection.type = ipu.config.DeviceConnectionType.PRE_COMPILE
    cfg.device_connection.version = "ipu2"
    cfg.configure_ipu_system()
    infeed = ipu.ipu_infeed_queue.IPUInfeedQueue(tf.data.Dataset.from_tensor_slices(np.ones((8, 2), np.float32)))
    outfeed = ipu.ipu_outfeed_queue.IPUOutfeedQueue()

    @tf.function(jit_compile=True)
    def f():
        ipu.loops.repeat(2, lambda x: outfeed.enqueue(x * 2.0), infeed_queue=infeed)

    ipu.ipu_strategy.IPUStrategy().run(f)
    got = outfeed.dequeue()
    assert got.shape == (2, R, 2) and not got.any()  # zeros: nothing ran
