"""Infeeds and outfeeds: values, state across executions, modes, structures, and every error a user can
trigger (spec/ipu_api.md §1.5–1.7, §3.2)."""

from __future__ import annotations

import numpy as np
import pytest

import popjit.tensorflow as tf
from popjit import errors, ipu
from popjit.graph.interpret import interpret
from popjit.runtime.streams import InterpreterStreams

X = np.arange(40, dtype=np.float32).reshape(10, 4)


@pytest.fixture
def strategy():
    s = ipu.ipu_strategy.IPUStrategy()
    with s.scope():
        yield s


def rows(start: int, n: int) -> np.ndarray:
    return X[np.arange(start, start + n) % len(X)]


def test__infeed_and_outfeed__carry_state_across_executions(strategy):
    infeed = ipu.ipu_infeed_queue.IPUInfeedQueue(tf.data.Dataset.from_tensor_slices(X).repeat())
    outfeed = ipu.ipu_outfeed_queue.IPUOutfeedQueue()
    v = tf.Variable(np.zeros(4, np.float32))

    @tf.function(jit_compile=True)
    def loop(n):
        for _ in tf.range(n):
            e = infeed._dequeue()
            v.assign_add(e)
            outfeed.enqueue({"total": tf.reduce_sum(v), "element": e})
        return v.read_value()

    np.testing.assert_array_equal(strategy.run(loop, args=(15,)).numpy(), rows(0, 15).sum(0))
    out = outfeed.dequeue()
    assert out["element"].shape == (15, 4) and out["total"].shape == (15,)
    np.testing.assert_array_equal(out["element"], rows(0, 15))
    np.testing.assert_array_equal(out["total"], np.cumsum(rows(0, 15).sum(1)))
    np.testing.assert_array_equal(strategy.run(loop, args=(7,)).numpy(), rows(0, 22).sum(0))  # picks up at 15
    assert [float(x["total"]) for x in outfeed] == list(np.cumsum(rows(0, 22).sum(1))[15:])
    assert outfeed.dequeue()["total"].shape == (0,), "dequeue empties the outfeed"


def test__seed_style__iterator_in_scope_and_sum_of_outfeed(strategy):
    ds = tf.data.Dataset.from_tensor_slices((X, np.arange(10, dtype=np.int32))).batch(2, drop_remainder=True)
    iterator = iter(ds.repeat())
    assert isinstance(iterator, ipu.ipu_infeed_queue.IPUOwnedIterator)
    outfeed = ipu.ipu_outfeed_queue.IPUOutfeedQueue()

    @tf.function(jit_compile=True)
    def loop(it, steps, out):
        for _ in tf.range(steps):
            features, labels = next(it)
            out.enqueue(tf.reduce_sum(features) + tf.cast(tf.reduce_sum(labels), tf.float32))

    strategy.run(loop, args=(iterator, 5, outfeed))
    expected = X.sum() + np.arange(10).sum()
    assert sum(outfeed) == pytest.approx(expected)
    with pytest.raises(RuntimeError, match="can not be accessed in eager mode when inside 'IPUStrategy'"):
        next(iterator)


def test__exhausted_dataset__out_of_range_before_running(strategy):
    infeed = ipu.ipu_infeed_queue.IPUInfeedQueue(tf.data.Dataset.from_tensor_slices(X))
    v = tf.Variable(np.zeros(4, np.float32))

    @tf.function(jit_compile=True)
    def loop(n):
        for _ in tf.range(n):
            v.assign_add(infeed._dequeue())

    strategy.run(loop, args=(6,))
    after_six = v.numpy()
    with pytest.raises(errors.OutOfRangeError, match="fewer than the 6 elements"):
        strategy.run(loop, args=(6,))  # only 4 left
    np.testing.assert_array_equal(v.numpy(), after_six)
    strategy.run(loop, args=(4,))
    np.testing.assert_array_equal(v.numpy(), X.sum(0))


def test__outfeed_last_mode__keeps_the_final_value_as_numpy_scalars(strategy):
    outfeed = ipu.ipu_outfeed_queue.IPUOutfeedQueue(ipu.ipu_outfeed_queue.IPUOutfeedMode.LAST)

    @tf.function(jit_compile=True)
    def loop():
        for i in tf.range(5):
            outfeed.enqueue(tf.cast(i, tf.float32) * 2.0)

    strategy.run(loop)
    last = outfeed.dequeue()
    assert isinstance(last, np.float32) and last == 8.0
    with pytest.raises(errors.FailedPreconditionError, match="Trying to get the last value from an outfeed"):
        outfeed.dequeue()


def test__outfeed_errors():
    with pytest.raises(ValueError, match=r"An outfeed can only be enqueued once\."):
        outfeed = ipu.ipu_outfeed_queue.IPUOutfeedQueue()

        @tf.function(jit_compile=True)
        def twice(x):
            outfeed.enqueue(x)
            outfeed.enqueue(x * 2.0)

        twice(np.ones(2, np.float32))
    with pytest.raises(ValueError, match=r"Trying to dequeue an outfeed which has not been enqueued\."):
        ipu.ipu_outfeed_queue.IPUOutfeedQueue().dequeue()
    with pytest.raises(ValueError, match="Expected `outfeed_mode` value to be of"):
        ipu.ipu_outfeed_queue.IPUOutfeedQueue("all")
    with pytest.raises(ValueError, match="Outfeed buffer depth cannot be less than 1"):
        ipu.ipu_outfeed_queue.IPUOutfeedQueue(buffer_depth=0)
    with pytest.raises(ValueError, match="Device ordinal must be >= 0"):
        ipu.ipu_outfeed_queue.IPUOutfeedQueue(device_ordinal=-1)


def test__infeed_checks():
    ds = tf.data.Dataset.from_tensor_slices(X)
    with pytest.raises(ValueError, match=r"Output shape \((\?|None), 4\) is not fully defined. If using tf.Dataset"):
        ipu.ipu_infeed_queue.IPUInfeedQueue(ds.batch(3))
    ipu.ipu_infeed_queue.IPUInfeedQueue(ds.batch(3, drop_remainder=True))
    with pytest.raises(ValueError, match="prefetch_depth must be greater than zero, but it is 0"):
        ipu.ipu_infeed_queue.IPUInfeedQueue(ds, prefetch_depth=0)
    with pytest.raises(ValueError, match="prefetch_depth must be less than 256, but it is 256"):
        ipu.ipu_infeed_queue.IPUInfeedQueue(ds, prefetch_depth=256)
    with pytest.raises(ValueError, match="`get_next\\(\\)` is now obsolete"):
        ipu.ipu_infeed_queue.IPUInfeedQueue(ds).get_next()
    int64 = ipu.ipu_infeed_queue.IPUInfeedQueue(tf.data.Dataset.range(5))
    with pytest.raises(errors.FailedPreconditionError, match="Unsupported datatype int64 on index 0 of feed operation"):
        int64.initializer  # noqa: B018


def test__deleted_infeed__not_found(strategy):
    infeed = ipu.ipu_infeed_queue.IPUInfeedQueue(tf.data.Dataset.from_tensor_slices(X))

    @tf.function(jit_compile=True)
    def one():
        return infeed._dequeue()

    np.testing.assert_array_equal(strategy.run(one).numpy(), X[0])
    infeed.deleter  # noqa: B018
    with pytest.raises(errors.NotFoundError, match="Infeed with id="):
        strategy.run(one)
    infeed.initializer  # noqa: B018  (restarts the dataset)
    np.testing.assert_array_equal(strategy.run(one).numpy(), X[0])


def test__stream_in_a_dynamic_loop__refused_with_advice(strategy):
    infeed = ipu.ipu_infeed_queue.IPUInfeedQueue(tf.data.Dataset.from_tensor_slices(X).repeat())

    @tf.function(jit_compile=True)
    def loop(n):
        acc = tf.zeros([4])
        for _ in tf.range(n):
            acc += infeed._dequeue()
        return acc

    with pytest.raises(errors.UnimplementedError, match="trip count is only known at run time"):
        strategy.run(loop, args=(tf.constant(3),))


def test__loops_repeat__passes_tuple_elements_positionally(strategy):
    ds = tf.data.Dataset.from_tensor_slices((X, X * 10.0)).repeat()
    infeed = ipu.ipu_infeed_queue.IPUInfeedQueue(ds)

    @tf.function(jit_compile=True)
    def run():
        return ipu.loops.repeat(12, lambda acc, a, b: acc + a + b, [tf.zeros([4])], infeed)

    np.testing.assert_allclose(strategy.run(run).numpy(), rows(0, 12).sum(0) * 11.0)
    with pytest.raises(TypeError, match="Supplied loop body function cannot be called with the specified inputs"):
        strategy.run(tf.function(lambda: ipu.loops.repeat(2, lambda acc: acc, [tf.zeros([4])], infeed)))


def test__graph_interpreter__runs_the_same_streams():
    infeed = ipu.ipu_infeed_queue.IPUInfeedQueue(tf.data.Dataset.from_tensor_slices(X).repeat())
    outfeed = ipu.ipu_outfeed_queue.IPUOutfeedQueue()

    def loop():
        for _ in tf.range(3):
            outfeed.enqueue(infeed._dequeue() * 2.0)

    graph = tf.function(loop).get_concrete_function().graph
    interpret(graph, [], effects=InterpreterStreams())
    np.testing.assert_array_equal(outfeed.dequeue(), rows(0, 3) * 2.0)


def test_sdk1_keyword_arguments_of_feeds(caplog: pytest.LogCaptureFixture) -> None:
    ds = tf.data.Dataset.from_tensor_slices(np.zeros((4, 2), np.float32))
    with caplog.at_level("WARNING", logger="popjit"):
        infeed = ipu.ipu_infeed_queue.IPUInfeedQueue(ds, feed_name="data", data_to_prefetch=3)
    assert infeed._prefetch_depth == 3 and "feed_name argument is deprecated" in caplog.text
    with pytest.raises(ValueError, match="prefetch_depth must be less than 256"):
        ipu.ipu_infeed_queue.IPUInfeedQueue(ds, data_to_prefetch=300)
    with pytest.raises(ValueError, match=r"replication_factor must be a positive int"):
        ipu.ipu_infeed_queue.IPUInfeedQueue(ds, replication_factor=0)
    for_two = ipu.ipu_infeed_queue.IPUInfeedQueue(ds, replication_factor=2)

    @tf.function(jit_compile=True)
    def step():
        return for_two._dequeue()

    with pytest.raises(errors.InvalidArgumentError, match=r"created with replication_factor=2, but the program "
                                                          r"using it runs as 1 replica"):
        ipu.ipu_strategy.IPUStrategy().run(step)
    with pytest.raises(TypeError, match="unexpected keyword argument 'no_such'"):
        ipu.ipu_outfeed_queue.IPUOutfeedQueue(no_such=1)
    last = ipu.ipu_outfeed_queue.IPUOutfeedQueue(feed_name="out", outfeed_all=False, io_batch_size=2)
    assert last._mode is ipu.ipu_outfeed_queue.IPUOutfeedMode.LAST
