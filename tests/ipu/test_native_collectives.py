"""Collectives between the replicas of one process run in native code (popjit.codegen.collective): a barrier on an
atomic counter and each replica's result computed from the others' buffers, without the GIL.

Every op, dtype and replica group over 2 and 4 real replicas gives exactly NumPy's values
(``collective_result``, bit for bit: signed zeros, infinities, NaN positions, int32 wrap-around and floor
division); the barrier holds with more replicas than cores, through long waits; a failing replica stops the
others; a debug log line says which path ran.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from popjit import config, ipu
from popjit import tensorflow as tf
from popjit.codegen.collective import BLOCK
from popjit.errors import InternalError
from popjit.frontend.replication import COLLECTIVE_OPS
from popjit.ops.collectives import REDUCTIONS, collective_result
from tests.helpers import device_of, run_program, sigint_as_at_a_terminal

NATIVE = "collectives in native code"
SCATTER = {op: name for name, op in COLLECTIVE_OPS.items()}
#: all_to_all's (split, concat) axes tried on the rank-2 operand.
AXES = ((0, 1), (1, 0), (1, 1))


def _groups(replicas: int) -> list[int]:
    return [g for g in (1, 2, 4) if replicas % g == 0]


def _program(replicas: int, outfeed: object):
    """Every collective of every group of ``replicas``: each replica takes row ``r`` of each table."""

    @tf.function(jit_compile=True)
    def f(xs, zs, ys):
        r = ipu.replication_ops.replication_index()
        y = tf.gather(ys, r)
        out = {}
        for name, table in (("x", xs), ("z", zs)):
            x = tf.gather(table, r)
            out[f"{name}_sum_all"] = ipu.cross_replica_ops.cross_replica_sum(x)
            for g in _groups(replicas):
                out[f"{name}_sum_{g}"] = ipu.cross_replica_ops.cross_replica_sum(x, g)
                out[f"{name}_mean_{g}"] = ipu.cross_replica_ops.cross_replica_mean(x, g)
                for op in REDUCTIONS:
                    out[f"{name}_scatter_{op}_{g}"] = ipu.reduce_scatter_op.reduce_scatter(x, g, SCATTER[op])
        for g in _groups(replicas):
            out[f"gather_{g}"] = ipu.all_to_all_op.all_gather(y, g, None)
            for split, concat in AXES:
                out[f"all_to_all_{split}{concat}_{g}"] = ipu.all_to_all_op.all_to_all(y, split, concat, g)
        outfeed.enqueue(out)

    return f


def _expected(xs: np.ndarray, zs: np.ndarray, ys: np.ndarray, replicas: int) -> dict[str, np.ndarray]:
    """What each replica receives, by NumPy (stacked by replica, as the outfeed gives them)."""
    def every(op: str, table: np.ndarray, group: int, **attrs: object) -> np.ndarray:
        return np.stack([collective_result(op, list(table[r - r % group:r - r % group + group]), r % group, **attrs)
                         for r in range(replicas)])

    out = {}
    for name, table in (("x", xs), ("z", zs)):
        out[f"{name}_sum_all"] = every("sum", table, replicas)
        for g in _groups(replicas):
            out[f"{name}_sum_{g}"], out[f"{name}_mean_{g}"] = every("sum", table, g), every("mean", table, g)
            for op in REDUCTIONS:
                out[f"{name}_scatter_{op}_{g}"] = every("reduce_scatter", table, g, reduce=op)
    for g in _groups(replicas):
        out[f"gather_{g}"] = every("gather", ys, g)
        for split, concat in AXES:
            out[f"all_to_all_{split}{concat}_{g}"] = every("all_to_all", ys, g, split_axis=split, concat_axis=concat)
    return out


def assert_same_values(got: np.ndarray, want: np.ndarray, what: str) -> None:
    """The same dtype, shape and values bit for bit, except that any NaN matches any NaN."""
    assert got.dtype == want.dtype and got.shape == want.shape, (what, got.dtype, got.shape, want.dtype, want.shape)
    if got.dtype.kind == "f":
        nan = np.isnan(want)
        np.testing.assert_array_equal(np.isnan(got), nan, err_msg=what)
        got, want = got[~nan], want[~nan]
        bits = np.dtype(f"u{got.dtype.itemsize}")
        got, want = got.view(bits), want.view(bits)
    np.testing.assert_array_equal(got, want, err_msg=what)


def _elements(dtype: np.dtype) -> st.SearchStrategy:
    if dtype.kind == "f":
        return st.one_of(hnp.from_dtype(dtype), st.sampled_from([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0]))
    return st.one_of(hnp.from_dtype(dtype), st.integers(-7, 7))


@st.composite
def _long(draw: st.DrawFn, dtype: np.dtype, shape: tuple[int, int]) -> np.ndarray:
    """Random values of ``dtype`` with some of hypothesis' values at some of its positions."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    if dtype.kind == "f":
        values = (rng.standard_normal(shape) * 10.0 ** rng.integers(-3, 4, shape)).astype(dtype)
    else:
        values = rng.integers(np.iinfo(dtype).min, np.iinfo(dtype).max, shape, dtype=dtype, endpoint=True)
    for row, column, value in draw(st.lists(st.tuples(st.integers(0, shape[0] - 1), st.integers(0, shape[1] - 1),
                                                      _elements(dtype)), max_size=20)):
        values[row, column] = value
    return values


def _tables(replicas: int, dtype: np.dtype) -> st.SearchStrategy:
    """Each replica's operands: a short rank-1 ``x`` (reduce-scatter pads it), a long one ``z`` (reduced in
    blocks, and shared out in parts) and a 4x4 ``y``."""
    xs = st.integers(5, 9).flatmap(lambda n: hnp.arrays(dtype, (replicas, n), elements=_elements(dtype)))
    return st.tuples(xs, _long(dtype, (replicas, 2 * BLOCK + 3)),
                     hnp.arrays(dtype, (replicas, 4, 4), elements=_elements(dtype)))


@pytest.mark.parametrize("replicas", [2, 4])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32], ids=["f32", "f16", "i32"])
@settings(max_examples=4, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_every_collective_equals_numpy(fresh_ipu_system, caplog, replicas, dtype, data):
    strategy = device_of(replicas)
    tables = data.draw(_tables(replicas, np.dtype(dtype)))
    outfeed = ipu.ipu_outfeed_queue.IPUOutfeedQueue(ipu.ipu_outfeed_queue.IPUOutfeedMode.LAST)
    with caplog.at_level(logging.DEBUG, logger="popjit"), np.errstate(all="ignore"):
        strategy.run(_program(replicas, outfeed), args=tables)
        want = _expected(*tables, replicas)
    assert NATIVE in caplog.text
    got = outfeed.dequeue()
    assert sorted(got) == sorted(want)
    for name, value in want.items():
        assert_same_values(np.asarray(got[name]), value, name)


STRESS = textwrap.dedent("""
    import logging
    import os
    os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:2])  # every thread of this process on 2 cores at most
    import numpy as np
    import popjit.tensorflow as tf
    from popjit import ipu

    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("popjit").setLevel(logging.DEBUG)
    cfg = ipu.config.IPUConfig()
    cfg.auto_select_ipus = {replicas}
    cfg.configure_ipu_system()

    @tf.function(jit_compile=True)
    def f(x, n, work):
        r = ipu.replication_ops.replication_index()
        # replica 0 works long before its first collective: the others wait past spinning and yielding, into naps
        work = work * tf.cast(tf.equal(r, 0), tf.int32)
        _, busy = tf.while_loop(lambda i, b: i < work, lambda i, b: (i + 1, b * 0.5 + 1.0), [0, tf.zeros([1024])])
        step = lambda i, x: (i + 1, ipu.cross_replica_ops.cross_replica_mean(x) + tf.cast(r, tf.float32))
        _, x = tf.while_loop(lambda i, x: i < n, step, [0, x])
        return ipu.all_to_all_op.all_gather(x, {replicas}, None), busy

    every, busy = ipu.ipu_strategy.IPUStrategy().run(f, args=(np.ones(3, np.float32), {steps}, {work}))
    print("result", every.numpy().tolist())
""")


@pytest.mark.parametrize("replicas", [2, 4])  # 2: they spin, and back off after spinning in vain; 4: they never spin
def test_the_barrier_holds_on_two_cores_through_long_waits(tmp_path, replicas):
    steps = 3000
    out = run_program(STRESS.format(replicas=replicas, steps=steps, work=400_000),
                      Path(os.environ.get("POPJIT_CACHE_DIR", tmp_path)))
    assert f"as {replicas} replicas: {NATIVE}" in out.stderr
    result = np.array(json.loads(out.stdout.split("result ", 1)[1]))
    # every step: the replicas' mean, plus the replica's index (the mean of 0..R-1 more each step)
    want = 1.0 + (replicas - 1) / 2 * (steps - 1) + np.arange(replicas)[:, None] * np.ones(3)
    np.testing.assert_array_equal(result, want)


def test_a_failing_replica_stops_the_others_waiting_at_the_native_barrier(fresh_ipu_system, caplog):
    strategy = device_of(4, trap_div0=True)

    @tf.function(jit_compile=True)
    def f(x, n, fail_at):
        r = ipu.replication_ops.replication_index()
        for i in tf.range(n):
            fails = tf.logical_and(tf.equal(r, 3), tf.equal(i, fail_at))  # replica 3 divides by zero there
            x = ipu.cross_replica_ops.cross_replica_mean(x / (1.0 - tf.cast(fails, tf.float32)))
        return ipu.all_to_all_op.all_gather(x, 4, None)

    x = np.arange(3, dtype=np.float32)
    with caplog.at_level(logging.DEBUG, logger="popjit"):
        with pytest.raises(InternalError, match="floating-point exception"):
            strategy.run(f, args=(x, 200, 150))
        every = strategy.run(f, args=(x, 200, 500))  # the replicas' threads were not left waiting
    assert f"as 4 replicas: {NATIVE}" in caplog.text
    np.testing.assert_array_equal(every.numpy(), np.tile(x, (4, 1)))


def test_a_run_without_numba_says_it_takes_the_python_path(fresh_ipu_system, caplog):
    strategy = device_of(2)

    @tf.function(jit_compile=True)
    def f(x):
        return ipu.all_to_all_op.all_gather(x * 2.0, 2, None)

    with caplog.at_level(logging.DEBUG, logger="popjit"), config.context(DISABLE_NUMBA=True):
        every = strategy.run(f, args=(np.arange(3, dtype=np.float32),))
    assert "as 2 replicas: collectives by the Python host function (POPJIT_DISABLE_NUMBA is set)" in caplog.text
    np.testing.assert_array_equal(every.numpy(), np.tile(np.arange(3) * 2.0, (2, 1)))


INTERRUPTED = textwrap.dedent("""
    import logging
    import numpy as np
    import popjit.tensorflow as tf
    from popjit import ipu

    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("popjit").setLevel(logging.DEBUG)
    cfg = ipu.config.IPUConfig()
    cfg.auto_select_ipus = 2
    cfg.configure_ipu_system()
    strategy = ipu.ipu_strategy.IPUStrategy()

    @tf.function(jit_compile=True)
    def f(x, work):
        r = ipu.replication_ops.replication_index()
        # replica 0 works for minutes before the collective, replica 1 waits for it at the barrier
        work = work * tf.cast(tf.equal(r, 0), tf.int32)
        _, busy = tf.while_loop(lambda i, b: i < work, lambda i, b: (i + 1, b * 0.5 + 1.0), [0, tf.zeros([64])])
        return ipu.all_to_all_op.all_gather(x + tf.cast(r, tf.float32), 2, None), busy

    x = np.arange(3, dtype=np.float32)
    strategy.run(f, args=(x, 3))  # compiled (the long run reuses its machine code)
    print("ready", flush=True)
    try:
        strategy.run(f, args=(x, 2_000_000_000))
        print("finished", flush=True)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
    every, _ = strategy.run(f, args=(x, 5))
    print("next call", every.numpy().tolist(), flush=True)
""")


def test_ctrl_c_stops_replicas_waiting_at_the_native_barrier(tmp_path):
    env = {**os.environ, "POPJIT_CACHE_DIR": os.environ.get("POPJIT_CACHE_DIR", str(tmp_path)),
           "PYTHONFAULTHANDLER": "1"}
    child = subprocess.Popen([sys.executable, "-c", INTERRUPTED], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=env, preexec_fn=sigint_as_at_a_terminal)
    try:
        assert child.stdout.readline().strip() == "ready", child.stderr.read()
        time.sleep(1.0)  # replica 1 is at the barrier by now, long past spinning
        child.send_signal(signal.SIGINT)
        first = child.stdout.readline().strip()
        rest, err = child.communicate(timeout=120)
    finally:
        child.kill()
    assert first == "interrupted", err[-2000:]
    assert f"as 2 replicas: {NATIVE}" in err
    assert json.loads(rest.strip().removeprefix("next call ")) == [[0.0, 1.0, 2.0], [1.0, 2.0, 3.0]]
    assert child.returncode == 0
