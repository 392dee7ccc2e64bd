"""Dataset.map / filter: traced once, run vectorised on whole chunks, or per element when they must."""

from __future__ import annotations

import collections

import numpy as np
import pytest

import popjit.tensorflow as tf
from popjit.data import mapping
from tests.data.helpers import as_list, spec

Dataset = tf.data.Dataset
Pair = collections.namedtuple("Pair", "a b")


def seed_map(d, l):
    return tf.cast(d, tf.float32), tf.cast(l, tf.int32)


def test_the_seeds_map_is_traced_once_and_runs_vectorised():
    calls = []

    def fn(d, l):
        calls.append(1)
        return seed_map(d, l)

    x = np.random.default_rng(0).random((1000, 4, 4))
    y = np.arange(1000, dtype=np.uint8)
    ds = Dataset.from_tensor_slices((x, y)).map(fn)
    out = as_list(ds)
    stats = ds._fn.stats
    assert len(calls) == 1 and stats["traces"] == 1
    assert stats["element_runs"] == 0
    assert stats["vectorised_runs"] <= 12  # chunks grow 1, 2, 4, ... 256: a handful of runs for 1000 elements
    assert len(out) == 1000 and out[3][0].dtype == np.float32 and out[3][1].dtype == np.int32
    np.testing.assert_array_equal(out[999][0], x[999].astype(np.float32))
    assert out[999][1] == 999 % 256


def test_a_chunk_request_maps_in_one_run():
    ds = Dataset.from_tensor_slices(np.arange(1000.0)).map(lambda v: v * 2.0)
    block = iter(ds).get_next_n(1000)
    assert ds._fn.stats["vectorised_runs"] == 1
    np.testing.assert_array_equal(block, np.arange(1000.0) * 2.0)


def test_map_keeps_tensorflow_dtype_rules():
    ds = Dataset.from_tensor_slices(np.arange(4.0)).map(lambda v: (tf.cast(v, tf.float32), v * 2.0, 1, 0.5))
    assert ds.element_spec == (spec((), tf.float32), spec((), tf.float64), spec((), tf.int32), spec((), tf.float32))
    a, b, c, d = as_list(ds)[3]
    assert (a.dtype, b.dtype, c.dtype, d.dtype) == (np.float32, np.float64, np.int32, np.float32)
    assert (a, b, c, d) == (3.0, 6.0, 1, 0.5)


def test_map_unpacks_tuples_but_not_dicts_or_namedtuples():
    t = Dataset.from_tensor_slices((np.arange(3), np.arange(3) * 10)).map(lambda a, b: a + b)
    assert [int(v) for v in as_list(t)] == [0, 11, 22]
    d = Dataset.from_tensor_slices({"a": np.arange(3), "b": np.ones(3)}).map(lambda e: e["a"] * 2)
    assert [int(v) for v in as_list(d)] == [0, 2, 4]
    n = Dataset.from_tensor_slices(Pair(np.arange(3), np.arange(3))).map(lambda p: p.a - p.b)
    assert [int(v) for v in as_list(n)] == [0, 0, 0]


def test_map_outputs_lists_as_tuples_and_dicts():
    ds = Dataset.range(3).map(lambda x: [x, {"double": x * 2}])
    assert ds.element_spec == (spec((), tf.int64), {"double": spec((), tf.int64)})
    assert as_list(ds)[2] == (2, {"double": 4})


def test_map_after_an_uneven_batch_has_unknown_dims():
    ds = Dataset.range(7).batch(3).map(lambda b: (b * 2, tf.reduce_sum(b), tf.reshape(b, [-1, 1])))
    assert ds.element_spec == (spec((None,), tf.int64), spec((), tf.int64), spec((None, 1), tf.int64))
    out = as_list(ds)
    assert [o[1] for o in out] == [3, 12, 6]
    assert out[2][2].shape == (1, 1)


def _vectorisable_functions():
    """Functions over a (x: f32[3, 4], n: i32[]) element using ops that have batching rules."""
    table = np.arange(20, dtype=np.float32).reshape(5, 4)
    return {
        "elementwise": lambda x, n: (tf.nn.relu(x - 1.0) * 2.0, n + 1),
        "broadcast const": lambda x, n: x + tf.constant([[1.0], [2.0], [3.0]]),
        "cast and where": lambda x, n: tf.where(x > 5.0, tf.cast(n, tf.float32), x),
        "reduce": lambda x, n: (tf.reduce_sum(x, axis=1), tf.reduce_max(x), tf.reduce_mean(x, axis=0, keepdims=True)),
        "reshape transpose": lambda x, n: tf.transpose(tf.reshape(x, [2, 6])),
        "slice concat": lambda x, n: tf.concat([x[1:, ::2], x[:2, 1::2]], axis=0),
        "expand tile": lambda x, n: tf.tile(tf.expand_dims(x, 0), [2, 1, 1]),
        "one hot": lambda x, n: tf.one_hot(n % 4, 4),
        "argmax": lambda x, n: tf.argmax(x, axis=1),
        "gather table": lambda x, n: tf.gather(table, n % 5),
        "broadcast_to": lambda x, n: tf.broadcast_to(tf.reduce_sum(x, axis=0), [2, 4]),
        "pad split": lambda x, n: tf.split(tf.pad(x, [[1, 0], [0, 0]]), 2, axis=0),
    }


@pytest.mark.parametrize("name", sorted(_vectorisable_functions()))
def test_vectorised_and_per_element_paths_agree(name, monkeypatch):
    fn = _vectorisable_functions()[name]
    rng = np.random.default_rng(1)
    data = (rng.standard_normal((9, 3, 4)).astype(np.float32) * 5, np.arange(9, dtype=np.int32))
    fast = Dataset.from_tensor_slices(data).map(fn)
    got_fast = iter(fast).get_next_n(9)
    assert fast._fn.stats["element_runs"] == 0, fast._fn.trace(((3, 4), ())).why_per_element
    monkeypatch.setattr(mapping, "unsafe_reason", lambda graph: "forced by the test")
    slow = Dataset.from_tensor_slices(data).map(fn)
    got_slow = iter(slow).get_next_n(9)
    assert slow._fn.stats["vectorised_runs"] == 0 and slow._fn.stats["element_runs"] == 9
    for a, b in zip(tf.nest.flatten(got_fast), tf.nest.flatten(got_slow)):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)


def test_control_flow_runs_per_element():
    def fn(x):
        if x > 2:
            y = x * 10
        else:
            y = x - 1
        return y

    ds = Dataset.range(6).map(fn)
    assert [int(v) for v in as_list(ds)] == [-1, 0, 1, 30, 40, 50]
    assert ds._fn.stats["element_runs"] == 6 and ds._fn.stats["vectorised_runs"] == 0
    assert "control flow" in ds._fn.trace(((),)).why_per_element


def test_random_ops_draw_per_element():
    ds = Dataset.range(5).map(lambda x: tf.random.uniform([2], seed=11))
    rows = np.stack(as_list(ds))
    assert len({tuple(r) for r in rows.tolist()}) == 5  # every element got its own numbers
    assert ds._fn.stats["vectorised_runs"] == 0


def test_map_reads_variables_and_assignments_persist():
    scale = tf.Variable(3.0)
    ds = Dataset.from_tensor_slices(np.arange(3, dtype=np.float32)).map(lambda v: v * scale)
    assert [float(v) for v in as_list(ds)] == [0.0, 3.0, 6.0]
    assert ds._fn.stats["element_runs"] == 0
    counter = tf.Variable(0)

    def count(v):
        counter.assign_add(1)
        return v

    as_list(Dataset.range(4).map(count))
    assert int(counter.numpy()) == 4


def test_errors_in_the_function_surface_when_map_is_called():
    with pytest.raises(TypeError, match="None"):
        Dataset.range(3).map(lambda x: None)
    with pytest.raises(Exception, match="reshape"):
        Dataset.range(3).map(lambda x: tf.reshape(x, [2]))
    with pytest.raises(TypeError, match="callable"):
        Dataset.range(3).map(3)


def test_filter_runs_vectorised_or_per_element():
    fast = Dataset.range(100).filter(lambda x: x % 7 == 0)
    assert [int(v) for v in as_list(fast)] == list(range(0, 100, 7))
    assert fast._fn.stats["element_runs"] == 0

    def odd_branch(x):
        keep = x > 1000
        if x % 2 == 1:
            keep = x > 5
        return keep

    slow = Dataset.range(12).filter(odd_branch)
    assert [int(v) for v in as_list(slow)] == [7, 9, 11]
    assert slow._fn.stats["element_runs"] == 12
