"""tf.data sources: from_tensor_slices, from_tensors, range, from_generator; structures, specs, iteration."""

from __future__ import annotations

import collections

import numpy as np
import pytest

import popjit.tensorflow as tf
from popjit.errors import InvalidArgumentError
from tests.data.helpers import as_list, spec

Dataset = tf.data.Dataset
Point = collections.namedtuple("Point", "x y")


# -- from_tensor_slices -----------------------------------------------------------------------------


def test_slices_of_an_array_keep_dtype_and_rows():
    x = np.arange(12, dtype=np.float64).reshape(4, 3)
    ds = Dataset.from_tensor_slices(x)
    assert ds.element_spec == spec((3,), tf.float64)
    rows = as_list(ds)
    assert len(rows) == 4 and all(r.dtype == np.float64 for r in rows)
    np.testing.assert_array_equal(np.stack(rows), x)


def test_slices_of_python_lists_follow_tensorflow_dtypes():
    assert Dataset.from_tensor_slices([1, 2, 3]).element_spec == spec((), tf.int32)
    assert Dataset.from_tensor_slices([1.0, 2.0]).element_spec == spec((), tf.float32)
    assert Dataset.from_tensor_slices([[1, 2], [3, 4]]).element_spec == spec((2,), tf.int32)
    assert Dataset.from_tensor_slices([True, False]).element_spec == spec((), tf.bool)


def test_slices_of_tensors_tuples_dicts_and_nests():
    ds = Dataset.from_tensor_slices((tf.constant([[1.0, 2.0], [3.0, 4.0]]), {"b": np.array([5, 6]),
                                                                              "a": np.array([7.5, 8.5])}))
    assert ds.element_spec == (spec((2,), tf.float32), {"a": spec((), tf.float64), "b": spec((), tf.int64)})
    first = as_list(ds)[0]
    assert isinstance(first, tuple) and isinstance(first[1], dict)
    np.testing.assert_array_equal(first[0], [1.0, 2.0])
    assert first[1] == {"a": 7.5, "b": 5}


def test_slices_of_a_namedtuple_keep_its_type():
    ds = Dataset.from_tensor_slices(Point(np.arange(3), np.arange(3.0)))
    out = as_list(ds)
    assert all(isinstance(p, Point) for p in out)
    assert [p.x for p in out] == [0, 1, 2]


def test_slices_need_rows_of_equal_count_and_rank_one():
    with pytest.raises(InvalidArgumentError, match="Dimensions 3 and 2 are not compatible"):
        Dataset.from_tensor_slices((np.zeros(3), np.zeros(2)))
    with pytest.raises(InvalidArgumentError, match="rank >= 1"):
        Dataset.from_tensor_slices(np.float32(1.0))


def test_slices_are_read_only_views_of_the_source():
    x = np.arange(6.0).reshape(3, 2)
    row = next(Dataset.from_tensor_slices(x).as_numpy_iterator())
    assert np.shares_memory(row, x)
    with pytest.raises(ValueError):
        row[0] = 100.0
    assert x[0, 0] == 0.0


# -- from_tensors, range --------------------------------------------------------------------------------


def test_from_tensors_is_one_element():
    ds = Dataset.from_tensors(([1, 2, 3], 4.0))
    assert ds.element_spec == (spec((3,), tf.int32), spec((), tf.float32))
    assert len(ds) == 1
    (a, b), = as_list(ds)
    np.testing.assert_array_equal(a, [1, 2, 3])
    assert b == np.float32(4.0)


@pytest.mark.parametrize("args", [(5,), (2, 9), (2, 9, 3), (9, 2, -2), (3, 3), (0,), (5, 1)])
def test_range_matches_python_range_as_int64(args):
    ds = Dataset.range(*args)
    assert ds.element_spec == spec((), tf.int64)
    out = as_list(ds)
    assert out == list(range(*args))
    assert all(type(v) is np.int64 for v in out)
    assert len(ds) == len(range(*args))


def test_range_output_type_and_bad_step():
    assert as_list(Dataset.range(3, output_type=tf.int32))[2].dtype == np.int32
    with pytest.raises(InvalidArgumentError, match="step"):
        Dataset.range(0, 5, 0)


# -- from_generator --------------------------------------------------------------------------------------


def test_from_generator_with_signature_and_unknown_dims():
    def gen():
        yield np.array([1, 2]), 0.5
        yield np.array([3]), 1.5

    ds = Dataset.from_generator(gen, output_signature=(spec((None,), tf.int32), spec((), tf.float32)))
    assert ds.element_spec == (spec((None,), tf.int32), spec((), tf.float32))
    out = as_list(ds)
    np.testing.assert_array_equal(out[0][0], [1, 2])
    assert out[1][0].dtype == np.int32 and out[1][1] == np.float32(1.5)
    assert as_list(ds)[1][1] == np.float32(1.5)  # a second pass calls the generator again
    assert ds.cardinality().numpy() == tf.data.UNKNOWN_CARDINALITY


def test_from_generator_checks_shapes():
    ds = Dataset.from_generator(lambda: iter([[1, 2, 3]]), output_signature=spec((2,), tf.int32))
    with pytest.raises(InvalidArgumentError, match="shape"):
        as_list(ds)


# -- iteration, specs, cardinality -----------------------------------------------------------------------


def test_python_iteration_yields_host_tensors_in_the_structure():
    ds = Dataset.from_tensor_slices({"x": np.arange(2.0), "n": np.arange(2)})
    elems = list(ds)
    assert len(elems) == 2
    e = elems[1]
    assert set(e) == {"x", "n"} and isinstance(e["x"], tf.Tensor)
    assert e["x"].dtype == tf.float64 and e["n"].dtype == tf.int64
    assert "CPU" in e["x"].device
    assert e["x"].numpy() == 1.0


def test_len_cardinality_and_infinite():
    ds = Dataset.range(10)
    assert len(ds) == 10 and int(ds.cardinality().numpy()) == 10
    assert ds.cardinality().dtype == tf.int64
    inf = ds.repeat()
    assert int(inf.cardinality().numpy()) == tf.data.INFINITE_CARDINALITY == -1
    with pytest.raises(TypeError, match="infinite"):
        len(inf)
    unknown = ds.filter(lambda x: x > 3)
    assert int(tf.data.experimental.cardinality(unknown).numpy()) == tf.data.UNKNOWN_CARDINALITY == -2
    with pytest.raises(TypeError, match="unknown"):
        len(unknown)


def test_namespace_constants_and_options():
    assert tf.data.AUTOTUNE == tf.data.experimental.AUTOTUNE == -1
    opts = tf.data.Options()
    opts.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    opts.experimental_deterministic = False
    ds = Dataset.range(3).with_options(opts)
    assert ds.options().experimental_deterministic is False
    assert as_list(ds) == [0, 1, 2]
    with pytest.raises(AttributeError):
        opts.no_such_option = 1
    with pytest.raises(AttributeError):
        tf.data.NoSuchThing  # noqa: B018


def test_repr_names_the_stage_and_spec():
    assert repr(Dataset.range(3).prefetch(2)) == \
        "<PrefetchDataset element_spec=TensorSpec(shape=(), dtype=tf.int64, name=None)>"
