"""tf.data transformations against plain-Python models of the same pipelines."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import popjit.tensorflow as tf
from popjit.data.core import INFINITE, UNKNOWN
from popjit.errors import InvalidArgumentError

Dataset = tf.data.Dataset


def as_list(ds):
    return [np.asarray(x).tolist() for x in ds.as_numpy_iterator()]


def spec(shape, dtype):
    return tf.TensorSpec(shape, dtype)


# -- a Python model of batch / take / skip / repeat / shard -----------------------------------------------------


class RaggedBatch(Exception):
    """The model's pipeline stacks elements of different lengths: tf.data refuses that batch."""


def model(items: list, ops: list[tuple]) -> list:
    for op, arg, *rest in ops:
        if op == "batch":
            drop = rest[0]
            chunks = [items[i:i + arg] for i in range(0, len(items), arg)]
            items = [c for c in chunks if len(c) == arg or not drop]
            if any(len({len(x) for x in c if isinstance(x, list)}) > 1 for c in items):
                raise RaggedBatch
        elif op == "take":
            items = items if arg < 0 else items[:arg]
        elif op == "skip":
            items = [] if arg < 0 else items[arg:]
        elif op == "repeat":
            items = items * arg
        elif op == "shard":
            items = items[rest[0]::arg]
    return items


def build(ds, ops):
    for op, arg, *rest in ops:
        ds = ds.batch(arg, drop_remainder=rest[0]) if op == "batch" else getattr(ds, op)(arg, *rest)
    return ds


def model_cardinality(n: int, ops: list[tuple]) -> int:
    for op, arg, *rest in ops:
        if op == "batch":
            n = n // arg if rest[0] else -(-n // arg)
        elif op == "take":
            n = n if arg < 0 else min(n, arg)
        elif op == "skip":
            n = 0 if arg < 0 else max(n - arg, 0)
        elif op == "repeat":
            n = n * arg
        elif op == "shard":
            n = max(-(-(n - rest[0]) // arg), 0)
    return n


op_strategy = st.one_of(
    st.tuples(st.just("batch"), st.integers(1, 5), st.booleans()),
    st.tuples(st.just("take"), st.integers(-1, 12)),
    st.tuples(st.just("skip"), st.integers(-1, 12)),
    st.tuples(st.just("repeat"), st.integers(0, 3)),
    st.integers(1, 4).flatmap(lambda k: st.tuples(st.just("shard"), st.just(k), st.integers(0, k - 1))),
)


@given(st.integers(0, 20), st.lists(op_strategy, max_size=4), st.booleans())
def test_batch_take_skip_repeat_shard_match_python(n, ops, through_filter):
    source = Dataset.range(n)
    if through_filter:  # the same pipeline without random access
        source = source.filter(lambda x: x >= 0)
    ds = build(source, ops)
    try:
        expected = model(list(range(n)), ops)
    except RaggedBatch:
        with pytest.raises(InvalidArgumentError, match="Cannot batch tensors with different shapes"):
            as_list(ds)
        return
    assert as_list(ds) == expected
    if not through_filter:
        assert int(ds.cardinality().numpy()) == model_cardinality(n, ops)


def test_batch_specs_and_drop_remainder():
    ds = Dataset.from_tensor_slices((np.zeros((10, 3), np.float32), np.arange(10))).batch(4)
    assert ds.element_spec == (spec((None, 3), tf.float32), spec((None,), tf.int64))
    assert [b[1].tolist() for b in ds.as_numpy_iterator()] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    dropped = Dataset.range(10).batch(4, drop_remainder=True)
    assert dropped.element_spec == spec((4,), tf.int64)
    assert as_list(dropped) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert len(dropped) == 2 and len(Dataset.range(10).batch(4)) == 3


def test_batch_of_batches_and_unbatch():
    ds = Dataset.range(12).batch(2).batch(3)
    assert ds.element_spec == spec((None, None), tf.int64)
    assert as_list(ds)[1] == [[6, 7], [8, 9], [10, 11]]
    assert as_list(ds.unbatch().unbatch()) == list(range(12))
    assert ds.unbatch().element_spec == spec((None,), tf.int64)


def test_batch_rejects_bad_sizes_and_mixed_shapes():
    with pytest.raises(InvalidArgumentError, match="greater than zero"):
        Dataset.range(3).batch(0)
    ragged = Dataset.range(5).batch(2).batch(3)  # [[0,1],[2,3],[4]]: shapes differ inside one batch
    with pytest.raises(InvalidArgumentError, match="different shapes"):
        as_list(ragged)


def test_shard_checks_its_arguments_and_reads_infinite_data():
    with pytest.raises(InvalidArgumentError, match="num_shards must be > 0"):
        Dataset.range(4).shard(0, 0)
    with pytest.raises(InvalidArgumentError, match=r"index must be in \[0, 2\)"):
        Dataset.range(4).shard(2, 2)
    assert as_list(Dataset.range(3).repeat().shard(2, 1).take(4)) == [1, 0, 2, 1]
    assert int(Dataset.range(3).repeat().shard(2, 1).cardinality().numpy()) == INFINITE


def test_repeat_forever_and_empty_input():
    it = iter(Dataset.range(3).repeat())
    assert [int(next(it).numpy()) for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    assert as_list(Dataset.range(0).repeat()) == []
    assert int(Dataset.range(0).repeat().cardinality().numpy()) == 0


def test_repeat_take_skip_compose_on_infinite_data():
    ds = Dataset.range(4).repeat().skip(3).take(6)
    assert as_list(ds) == [3, 0, 1, 2, 3, 0]
    assert len(ds) == 6
    assert int(Dataset.range(4).repeat().skip(3).cardinality().numpy()) == INFINITE


def test_zip_tuples_dicts_and_shortest_length():
    a, b = Dataset.range(5), Dataset.from_tensor_slices(np.arange(3.0) * 10)
    ds = Dataset.zip((a, b))
    assert ds.element_spec == (spec((), tf.int64), spec((), tf.float64))
    assert as_list(ds) == [[0, 0.0], [1, 10.0], [2, 20.0]]
    assert len(ds) == 3
    d = Dataset.zip({"y": a, "x": (b, a)})
    assert d.element_spec == {"x": (spec((), tf.float64), spec((), tf.int64)), "y": spec((), tf.int64)}
    assert list(d.as_numpy_iterator())[2] == {"x": (20.0, 2), "y": 2}
    assert as_list(Dataset.zip(a, b)) == as_list(ds)
    with pytest.raises(TypeError, match="Dataset"):
        Dataset.zip((a, [1, 2]))


def test_zip_without_random_access_keeps_pairs_aligned():
    evens = Dataset.range(20).filter(lambda x: x % 2 == 0)
    ds = Dataset.zip((evens, Dataset.range(100).batch(3)))
    out = list(ds.as_numpy_iterator())
    assert [int(e) for e, _ in out] == list(range(0, 20, 2))
    assert [b.tolist() for _, b in out][:2] == [[0, 1, 2], [3, 4, 5]]
    assert int(ds.cardinality().numpy()) == UNKNOWN


def test_enumerate_is_an_int64_counter():
    ds = Dataset.from_tensor_slices([7, 8, 9]).enumerate(start=5)
    assert ds.element_spec == (spec((), tf.int64), spec((), tf.int32))
    assert as_list(ds) == [[5, 7], [6, 8], [7, 9]]
    assert as_list(Dataset.range(3).filter(lambda x: x > 0).enumerate()) == [[0, 1], [1, 2]]
    assert int(Dataset.range(3).repeat().enumerate().cardinality().numpy()) == INFINITE
    assert len(Dataset.range(3).enumerate()) == 3


def test_missing_methods_raise_unimplemented():
    with pytest.raises(tf.errors.UnimplementedError, match="padded_batch"):
        Dataset.range(3).padded_batch(2)


def test_cache_replays_the_first_complete_pass():
    calls = []
    ds = Dataset.range(5).map(lambda x: x * 3)
    gen = Dataset.from_generator(lambda: (calls.append(1) or iter([1, 2, 3])),
                                 output_signature=spec((), tf.int64)).cache()
    assert as_list(gen) == [1, 2, 3] and as_list(gen) == [1, 2, 3]
    assert len(calls) == 1  # the second pass came from the cache
    cached = ds.cache()
    it = iter(cached)
    next(it)  # a partial pass does not fill the cache
    assert cached._cached is None
    assert as_list(cached) == [0, 3, 6, 9, 12] and cached._cached is not None
    assert as_list(cached.shuffle(5, seed=1)) != [] and sorted(as_list(cached.shuffle(5, seed=1))) == [0, 3, 6, 9, 12]


def test_cache_to_a_file_warns_and_caches_in_memory():
    with pytest.warns(UserWarning, match="in memory"):
        ds = Dataset.range(3).cache("/tmp/never-written")
    assert as_list(ds) == [0, 1, 2]


def test_concatenate_and_prefetch():
    ds = Dataset.range(3).concatenate(Dataset.range(10, 12)).prefetch(tf.data.AUTOTUNE)
    assert as_list(ds) == [0, 1, 2, 10, 11] and len(ds) == 5
    mixed = Dataset.range(3).batch(2, drop_remainder=True).concatenate(Dataset.range(3).batch(3))
    assert mixed.element_spec == spec((None,), tf.int64)
    with pytest.raises(TypeError, match="Incompatible"):
        Dataset.range(3).concatenate(Dataset.from_tensor_slices([1.0]))


def test_filter_and_take_while():
    assert as_list(Dataset.range(10).filter(lambda x: x % 3 == 0)) == [0, 3, 6, 9]
    assert as_list(Dataset.range(10).take_while(lambda x: x < 4)) == [0, 1, 2, 3]
    pairs = Dataset.from_tensor_slices((np.arange(6), np.arange(6) % 2 == 0)).filter(lambda x, keep: keep)
    assert [int(x) for x, _ in pairs.as_numpy_iterator()] == [0, 2, 4]
    with pytest.raises(ValueError, match="scalar boolean"):
        Dataset.range(3).filter(lambda x: x)


def test_apply_and_element_spec_survive_every_stage():
    ds = Dataset.range(8).apply(lambda d: d.batch(2, drop_remainder=True)).shuffle(3, seed=0).repeat(2).prefetch(1)
    assert ds.element_spec == spec((2,), tf.int64)
    assert len(ds) == 8


def test_dropped_partial_batch_of_ragged_elements_is_not_stacked():
    # [0, 1], [2] are two elements of different shapes; a batch of 3 with drop_remainder drops them
    assert as_list(Dataset.range(3).batch(2).batch(3, drop_remainder=True)) == []
    with pytest.raises(InvalidArgumentError, match="Cannot batch tensors with different shapes"):
        as_list(Dataset.range(3).batch(2).batch(3))
