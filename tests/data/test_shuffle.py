"""Dataset.shuffle: TensorFlow's buffer rule, seeds, reshuffling, and both buffer representations."""

from __future__ import annotations

import collections
import itertools

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import popjit.tensorflow as tf
from popjit.data.shuffle import draw_slots, steady_step

Dataset = tf.data.Dataset


def as_list(ds):
    return [np.asarray(x).tolist() for x in ds.as_numpy_iterator()]


def sequential(store: list, incoming: list, draws: list) -> list:
    """TensorFlow's rule one step at a time: output the drawn slot, refill it with the next input."""
    out = []
    for slot, new in zip(draws, incoming):
        out.append(store[slot])
        store[slot] = new
    return out


@given(st.integers(1, 8), st.data())
def test_vectorised_step_equals_the_sequential_rule(cap, data):
    s = data.draw(st.integers(1, 30))
    draws = np.array(data.draw(st.lists(st.integers(0, cap - 1), min_size=s, max_size=s)), dtype=np.int64)
    store = np.arange(cap, dtype=np.int64) + 1000
    incoming = np.arange(s, dtype=np.int64)
    expect_store = store.tolist()
    expected = sequential(expect_store, incoming.tolist(), draws.tolist())
    out = steady_step([store], [incoming], draws)
    assert out[0].tolist() == expected
    assert store.tolist() == expect_store


@given(st.integers(1, 40), st.integers(1, 50), st.integers(0, 2**31))
def test_shuffle_is_a_permutation_within_the_buffer_bound(n, buffer, seed):
    out = as_list(Dataset.range(n).shuffle(buffer, seed=seed))
    assert sorted(out) == list(range(n))
    for pos, value in enumerate(out):
        # element i enters the buffer after i - buffer outputs, so it cannot come out earlier
        assert pos >= value - (buffer - 1)


def test_a_buffer_of_one_keeps_the_order():
    assert as_list(Dataset.range(20).shuffle(1)) == list(range(20))


def test_seeded_shuffle_is_reproducible_and_reshuffles_each_pass():
    make = lambda: Dataset.range(50).shuffle(50, seed=42)  # noqa: E731
    a, b = make(), make()
    first_a, second_a = as_list(a), as_list(a)
    assert first_a == as_list(b) and second_a == as_list(b)  # the same sequence of passes
    assert first_a != second_a  # each pass is a new order
    assert first_a != list(range(50))


def test_reshuffle_each_iteration_false_repeats_the_order():
    ds = Dataset.range(30).shuffle(30, seed=5, reshuffle_each_iteration=False)
    orders = [as_list(ds) for _ in range(3)]
    assert orders[0] == orders[1] == orders[2] != list(range(30))
    epochs = as_list(ds.repeat(2))
    assert epochs[:30] == epochs[30:] == orders[0]


def test_epochs_of_repeat_differ_after_shuffle():
    epochs = as_list(Dataset.range(30).shuffle(30, seed=9).repeat(3))
    parts = [epochs[i * 30:(i + 1) * 30] for i in range(3)]
    assert all(sorted(p) == list(range(30)) for p in parts)
    assert parts[0] != parts[1] != parts[2]


def test_global_seed_makes_unseeded_shuffles_reproducible():
    tf.random.set_seed(3)
    a = as_list(Dataset.range(40).shuffle(40))
    tf.random.set_seed(3)
    b = as_list(Dataset.range(40).shuffle(40))
    tf.random.set_seed(None)
    assert a == b


def test_the_order_does_not_depend_on_how_elements_are_requested():
    ds = Dataset.range(100).shuffle(16, seed=1, reshuffle_each_iteration=False)
    one_by_one = as_list(ds)
    it = iter(ds)
    blocks = [it.get_next_n(n).tolist() for n in (1, 7, 30, 2, 60)]
    assert list(itertools.chain.from_iterable(blocks)) == one_by_one


def test_element_buffer_and_position_buffer_give_the_same_order():
    direct = Dataset.range(64).shuffle(10, seed=7)  # random-access input: positions in the buffer
    filtered = Dataset.range(64).filter(lambda x: x >= 0).shuffle(10, seed=7)  # elements in the buffer
    assert as_list(direct) == as_list(filtered)


def test_shuffled_structures_stay_paired():
    x = np.arange(100)
    ds = Dataset.from_tensor_slices({"x": x, "y": x * 2.0}).shuffle(100, seed=2)
    out = list(ds.as_numpy_iterator())
    assert all(e["y"] == e["x"] * 2.0 for e in out)
    assert sorted(int(e["x"]) for e in out) == list(range(100))


def test_shuffling_batches_of_different_sizes():
    ds = Dataset.range(10).batch(3).shuffle(4, seed=0)  # the short last batch has another shape
    batches = as_list(ds)
    assert sorted(batches) == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]


def test_shuffle_after_repeat_mixes_epochs():
    out = as_list(Dataset.range(5).repeat().shuffle(8, seed=4).take(25))
    assert len(out) == 25 and set(out) == set(range(5))
    assert out != [k % 5 for k in range(25)]


def test_full_buffer_orders_are_roughly_uniform():
    counts = collections.Counter(tuple(as_list(Dataset.range(3).shuffle(3, seed=s))) for s in range(600))
    assert len(counts) == 6
    assert all(60 <= c <= 140 for c in counts.values()), counts


def test_draws_are_in_range():
    rng = np.random.default_rng(0)
    d = draw_slots(rng, 7, 10000)
    assert d.min() == 0 and d.max() == 6
