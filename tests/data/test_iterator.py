"""The host iterator the infeed uses: get_next, get_next_n, exhaustion, the trace hook; the seed's pipeline."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import popjit.tensorflow as tf
from popjit.data import EndOfSequence, set_trace_hook
from popjit.errors import InvalidArgumentError

Dataset = tf.data.Dataset


def pipelines():
    x = np.arange(40, dtype=np.float64).reshape(20, 2)
    y = np.arange(20, dtype=np.uint8)
    base = Dataset.from_tensor_slices((x, y))
    cast = lambda d, l: (tf.cast(d, tf.float32), tf.cast(l, tf.int32))  # noqa: E731
    return {
        "slices": base,
        "batch drop repeat": base.batch(3, drop_remainder=True).map(cast).repeat(),
        "shuffle batch": base.shuffle(7, seed=3, reshuffle_each_iteration=False).batch(4, drop_remainder=True),
        "seed-like": base.shuffle(8, seed=1).batch(2, drop_remainder=True).map(cast).repeat(3).prefetch(4),
        "filter zip": Dataset.zip((base.filter(lambda d, l: l % 3 > 0), Dataset.range(100))),
        "dict take skip": Dataset.from_tensor_slices({"x": x, "y": y}).skip(2).take(15).batch(5),
    }


@pytest.mark.parametrize("name", sorted(pipelines()))
@given(sizes=st.lists(st.integers(1, 9), min_size=1, max_size=6))
def test_get_next_n_equals_repeated_get_next(name, sizes):
    a = pipelines()[name]._make_host_iterator()
    b = iter(pipelines()[name])  # built again: a seeded shuffle's passes repeat
    for n in sizes:
        try:
            block = a.get_next_n(n)
        except EndOfSequence:
            break
        singles = [b.get_next() for _ in range(n)]
        expected = tf.nest.map_structure(lambda *xs: np.stack(xs), *singles)
        for got, want in zip(tf.nest.flatten(block), tf.nest.flatten(expected)):
            assert got.shape == want.shape and got.dtype == want.dtype
            np.testing.assert_array_equal(got, want)


def test_get_next_n_at_the_end_raises_without_consuming():
    it = iter(Dataset.range(10).batch(3, drop_remainder=True))
    first = it.get_next_n(2)
    np.testing.assert_array_equal(first, [[0, 1, 2], [3, 4, 5]])
    with pytest.raises(EndOfSequence) as info:
        it.get_next_n(2)
    assert isinstance(info.value, StopIteration)
    assert (info.value.requested, info.value.available) == (2, 1)
    np.testing.assert_array_equal(it.get_next_n(1), [[6, 7, 8]])  # still there
    with pytest.raises(StopIteration):
        it.get_next()
    with pytest.raises(ValueError):
        it.get_next_n(0)


def test_get_next_returns_numpy_and_next_returns_tensors():
    it = iter(Dataset.from_tensor_slices((np.arange(3), np.ones((3, 2), np.float32))))
    a, b = it.get_next()
    assert isinstance(a, np.ndarray) and a.shape == () and isinstance(b, np.ndarray)
    t, _ = next(it)
    assert isinstance(t, tf.Tensor) and t.dtype == tf.int64 and int(t.numpy()) == 1
    assert it.element_spec == (tf.TensorSpec((), tf.int64), tf.TensorSpec((2,), tf.float32))
    rest = list(it)
    assert len(rest) == 1 and rest[0][0].numpy() == 2


def test_get_next_n_from_slices_and_batches_is_views_until_the_stack():
    x = np.arange(60.0).reshape(30, 2)
    it = iter(Dataset.from_tensor_slices(x).batch(5, drop_remainder=True))
    block = it.get_next_n(3)
    assert block.shape == (3, 5, 2) and np.shares_memory(block, x)
    np.testing.assert_array_equal(block.reshape(-1, 2), x[:15])


def test_next_inside_a_trace_calls_the_hook():
    it = iter(Dataset.range(5))

    @tf.function
    def step(iterator):
        return next(iterator) + 1

    with pytest.raises(InvalidArgumentError, match="IPUStrategy"):
        step.get_concrete_function(it)
    seen = []

    def hook(iterator):
        seen.append(iterator)
        return tf.constant(np.int64(41))

    set_trace_hook(hook)
    try:
        graph = tf.function(lambda i: next(i) + 1).get_concrete_function(it).graph
    finally:
        set_trace_hook(None)
    assert seen == [it] and "constant" in graph.as_text()
    assert int(next(it).numpy()) == 0  # the host iterator did not move


# -- the seed's pipeline ---------------------------------------------------------------------------------


def synthetic_mnist(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """uint8 images whose pixels encode the row index and label, so pairing can be checked."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 10, n).astype(np.uint8)
    x = rng.integers(0, 256, (n, 28, 28)).astype(np.uint8)
    x[:, 0, 0] = y * 25
    x[:, 0, 1], x[:, 0, 2] = np.arange(n) // 256, np.arange(n) % 256
    return x, y


def seed_dataset(x_train, y_train):
    x_train = x_train / 255.0
    train_ds = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(10000).batch(32, drop_remainder=True)
    train_ds = train_ds.map(lambda d, l: (tf.cast(d, tf.float32), tf.cast(l, tf.int32)))
    return train_ds.repeat().prefetch(16)


def test_the_seed_pipeline_on_synthetic_mnist():
    x, y = synthetic_mnist(2000)
    ds = seed_dataset(x, y)
    assert ds.element_spec == (tf.TensorSpec((32, 28, 28), tf.float32), tf.TensorSpec((32,), tf.int32))
    assert int(ds.cardinality().numpy()) == tf.data.INFINITE_CARDINALITY
    it = iter(ds)
    features, labels = next(it)
    assert features.shape == (32, 28, 28) and features.dtype == tf.float32 and labels.dtype == tf.int32
    epoch = 2000 // 32
    f, l = it.get_next_n(epoch - 1)  # the rest of the first epoch
    f = np.concatenate([features.numpy()[None], f])
    l = np.concatenate([labels.numpy()[None], l])
    assert f.shape == (epoch, 32, 28, 28) and f.dtype == np.float32 and l.dtype == np.int32
    pixels = np.rint(f * 255.0).astype(np.int64)
    np.testing.assert_array_equal(pixels[..., 0, 0], l * 25)  # images stay with their labels
    rows = pixels[..., 0, 1] * 256 + pixels[..., 0, 2]
    assert len(np.unique(rows)) == epoch * 32  # one epoch: no row twice
    np.testing.assert_allclose(f[0], (x[rows[0]] / 255.0).astype(np.float32))
    assert not np.array_equal(rows.reshape(-1), np.arange(epoch * 32))  # shuffled
    f2, _ = it.get_next_n(100)  # crosses into later epochs
    assert f2.shape == (100, 32, 28, 28)
    map_stats = ds._input._input._fn.stats
    assert map_stats["element_runs"] == 0 and map_stats["traces"] == 1
