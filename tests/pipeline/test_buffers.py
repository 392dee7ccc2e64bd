"""Every buffer popjit allocates for its engines starts on a cache line (:mod:`popjit.buffers`): variables,
a run's results and its temporaries. NumPy aligns to 16 bytes only, and a split product's pieces meeting
inside a line made the threads fight over it (W1's weights: 25% slower)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import popjit.tensorflow as tf
from popjit.buffers import CACHE_LINE, AlignedLayout, aligned_copy, aligned_empty, data_addresses, is_aligned
from popjit.runtime.replicas import ReplicaStore

DTYPES = st.sampled_from([np.float32, np.float64, np.float16, np.int32, np.int8, np.bool_, np.uint16])
SHAPES = st.lists(st.integers(0, 9), max_size=3).map(tuple)


@given(shape=SHAPES, dtype=DTYPES)
def test__aligned_empty__starts_on_a_cache_line_with_the_shape_and_dtype_asked(shape, dtype) -> None:
    array = aligned_empty(shape, dtype)
    assert array.size == 0 or array.ctypes.data % CACHE_LINE == 0
    assert is_aligned(array)
    assert (array.shape, array.dtype) == (shape, np.dtype(dtype))
    assert array.flags.c_contiguous and array.flags.writeable


@given(shape=SHAPES, dtype=DTYPES, data=st.data())
def test__aligned_copy__equals_its_source_and_is_its_own(shape, dtype, data) -> None:
    source = np.asarray(data.draw(st.lists(st.integers(0, 1), min_size=int(np.prod(shape)),
                                           max_size=int(np.prod(shape)))), dtype).reshape(shape)
    copy = aligned_copy(source.T)  # a non-contiguous view: the copy is C-ordered all the same
    assert is_aligned(copy) and copy.flags.c_contiguous
    np.testing.assert_array_equal(copy, source.T)
    if copy.size:
        copy.reshape(-1)[0] = 1 - copy.reshape(-1)[0]
        assert copy.reshape(-1)[0] != source.T.reshape(-1)[0], "the copy shares the source's memory"


@given(parts=st.lists(st.tuples(st.integers(0, 40), DTYPES), max_size=8))
def test__a_layout__gives_separate_aligned_buffers_of_the_sizes_asked(parts) -> None:
    layout = AlignedLayout([size for size, _ in parts], [dtype for _, dtype in parts])
    buffers, _ = layout.allocate()
    assert [(b.shape, b.dtype) for b in buffers] == [((size,), np.dtype(dtype)) for size, dtype in parts]
    assert all(is_aligned(b) and b.flags.writeable for b in buffers)
    for i, b in enumerate(buffers):
        b.view(np.uint8)[...] = i
    for i, b in enumerate(buffers):
        assert (b.view(np.uint8) == i).all(), f"buffer {i} overlaps a later one"
    again, _ = layout.allocate()
    assert all(a.size == 0 or not np.shares_memory(a, b) for a, b in zip(again, buffers)), "a run's buffers are new"


@given(parts=st.lists(st.tuples(st.integers(0, 40), DTYPES), max_size=8))
def test__a_layout_s_addresses__are_those_of_its_buffers(parts) -> None:
    """A run's temporaries give the engine addresses computed from their block's, not read one by one."""
    layout = AlignedLayout([size for size, _ in parts], [dtype for _, dtype in parts])
    buffers, addresses = layout.allocate()
    assert addresses.dtype == np.uintp and len(addresses) == len(buffers)
    filled = [i for i, b in enumerate(buffers) if b.size]  # why: NumPy places an empty view anywhere; none is read
    np.testing.assert_array_equal(addresses[filled], data_addresses([buffers[i] for i in filled]))


def test__a_variable__keeps_its_values_in_aligned_memory_through_assignments() -> None:
    for value in (np.float32(3.0), np.arange(7, dtype=np.float32), np.ones((5, 3), np.float64)):
        v = tf.Variable(value)
        buffer = v._buffer
        assert is_aligned(buffer)
        np.testing.assert_array_equal(v.numpy(), value)
        v.assign(value * 2)
        assert v._buffer is buffer, "assign replaced the buffer the engines update in place"


def test__the_other_replicas__get_aligned_copies_of_replica_0s_variables() -> None:
    first = {1: np.arange(12, dtype=np.float32).reshape(3, 4)[:, 1:], 2: np.ones(5, np.float64)}
    replicas = ReplicaStore().variables(first, {1: 0, 2: 0}, 4)
    assert replicas[0] is first
    for others in replicas[1:]:
        for vid, value in others.items():
            assert is_aligned(value) and value is not first[vid]
            np.testing.assert_array_equal(value, first[vid])


def test__an_engine__gets_aligned_results_and_temporaries() -> None:
    w = tf.Variable(np.full((13, 7), 0.5, np.float32))

    @tf.function(jit_compile=True)
    def step(x):
        for _ in tf.range(3):
            w.assign_sub(0.1 * tf.matmul(tf.nn.relu(x), w))
        return tf.reduce_sum(w, axis=0), tf.matmul(x, w)

    x = np.linspace(-1, 1, 13 * 13, dtype=np.float32).reshape(13, 13)
    executable = step.get_concrete_function(x).executable("cpu")
    engine, seen = executable.engine, []

    def recording(buffers, *args, **kwargs):
        seen.extend(buffers)
        return engine(buffers, *args, **kwargs)

    executable.engine = recording
    try:
        total, product = step(x)
    finally:
        executable.engine = engine
    temporaries = seen[-len(executable.program.temps):]
    assert len(executable.program.temps) > 0 and all(is_aligned(t) for t in temporaries)
    assert is_aligned(total.numpy()) and is_aligned(product.numpy())
    want = np.full((13, 7), 0.5)
    for _ in range(3):
        want = want - 0.1 * np.maximum(x, 0).astype(np.float64) @ want
    np.testing.assert_allclose(product.numpy(), x @ want, rtol=1e-4, atol=1e-5)


def _root(array: np.ndarray) -> np.ndarray:
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array


def test__a_run_s_results__are_separate_and_new_each_run() -> None:
    """A run's results are each an allocation of their own (a result the user keeps holds no other's memory),
    and a later run never writes into the results an earlier one returned."""

    @tf.function(jit_compile=True)
    def three(x):
        return x * 2.0, tf.reduce_sum(x), tf.cast(x > 0, tf.int32)

    x = np.linspace(-1, 1, 37, dtype=np.float32)
    first = [r.numpy() for r in three(x)]
    second = [r.numpy() for r in three(x + 1)]
    assert all(is_aligned(r) for r in first + second)
    for a, b in zip(first, second):
        assert not np.shares_memory(a, b), "a run wrote into an earlier run's result"
    for i, a in enumerate(first):
        assert not any(_root(a) is _root(b) for b in first[i + 1:]), "two results share an allocation"
    np.testing.assert_array_equal(first[0], x * 2)
    np.testing.assert_allclose(first[1], x.sum(), atol=1e-5)
    np.testing.assert_array_equal(first[2], (x > 0).astype(np.int32))
    np.testing.assert_array_equal(second[0], (x + 1) * 2)


def test__an_empty_layout__allocates_nothing() -> None:
    buffers, addresses = AlignedLayout([], []).allocate()
    assert buffers == [] and addresses.dtype == np.uintp and addresses.size == 0


def test__a_layout_lent_run_after_run__lends_the_same_buffers_and_runs_at_once_their_own() -> None:
    layout = AlignedLayout([100, 7], [np.float32, np.int64])
    # a run, and one at the same time (another replica's thread)
    with layout.lent() as (first, first_at), layout.lent() as (beside, beside_at):
        assert not any(np.shares_memory(a, b) for a in first for b in beside)
        assert not set(first_at) & set(beside_at)
    with layout.lent() as (again, again_at):  # one of the two sets is kept
        kept = [(first, first_at), (beside, beside_at)]
        assert any(all(a is b for a, b in zip(again, bufs)) and list(again_at) == list(at) for bufs, at in kept)
    with layout.lent() as (later, _):
        assert all(a is b for a, b in zip(later, again)), "run after run, the same buffers"
    with pytest.raises(ValueError), layout.lent() as (after_error, _):
        raise ValueError("a run that fails")
    with layout.lent() as (next_run, _):
        assert all(a is b for a, b in zip(next_run, after_error)), "a failed run gives its buffers back too"


def test__a_program_s_temporaries__are_the_same_memory_run_after_run_and_its_results_right() -> None:
    """The temporaries are lent to each run, not allocated afresh: large ones would be new pages from the
    system every run, which the kernel zeroes as the engine writes them."""
    w = tf.Variable(np.full((64, 64), 0.01, np.float32))

    @tf.function(jit_compile=True)
    def step(x):
        h = tf.nn.relu(tf.matmul(x, w))
        return tf.reduce_sum(tf.matmul(h, w) * h)

    x = np.linspace(-1, 1, 300 * 64, dtype=np.float32).reshape(300, 64)
    executable = step.get_concrete_function(x).executable("cpu")
    engine, seen = executable.engine, []

    def recording(buffers, *args, **kwargs):
        seen.append([t.ctypes.data for t in buffers[-len(executable.program.temps):]])
        return engine(buffers, *args, **kwargs)

    executable.engine = recording
    try:
        results = [float(step(x * scale)) for scale in (1.0, 2.0, 3.0)]
    finally:
        executable.engine = engine
    assert len(executable.program.temps) > 0 and seen[0] == seen[1] == seen[2]
    for scale, got in zip((1.0, 2.0, 3.0), results):
        h = np.maximum((x * scale).astype(np.float64) @ w.numpy(), 0)
        np.testing.assert_allclose(got, ((h @ w.numpy()) * h).sum(), rtol=1e-4)
