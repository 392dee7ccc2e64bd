"""Optional cross-checks against TensorFlow itself (skipped when it is not installed)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import popjit.tensorflow as ptf
from tests.data.test_transforms import build, op_strategy

real_tf = pytest.importorskip("tensorflow")


def contents(ds) -> list | str:
    """The elements, or "error" when the pipeline refuses them (batching elements of different shapes)."""
    try:
        return [np.asarray(x).tolist() for x in ds.as_numpy_iterator()]
    except (ptf.errors.InvalidArgumentError, real_tf.errors.InvalidArgumentError):
        return "error"


def spec_text(spec) -> list:
    return [(tuple(s.shape), s.dtype.name) for s in real_tf.nest.flatten(spec)]


@settings(max_examples=25)
@given(st.integers(0, 15), st.lists(op_strategy, max_size=4))
def test_pipelines_match_tensorflow(n, ops):
    ours = build(ptf.data.Dataset.range(n), ops)
    theirs = build(real_tf.data.Dataset.range(n), ops)
    assert contents(ours) == contents(theirs)
    assert int(ours.cardinality().numpy()) == int(theirs.cardinality().numpy())
    assert spec_text(ours.element_spec) == spec_text(theirs.element_spec)


def test_specs_and_dtypes_of_a_mapped_structure_match_tensorflow():
    x = np.arange(24, dtype=np.float64).reshape(6, 2, 2)
    y = np.arange(6, dtype=np.uint8)

    def pipeline(tf):
        ds = tf.data.Dataset.from_tensor_slices((x, {"label": y, "flag": [True] * 6}))
        ds = ds.map(lambda d, e: (tf.cast(d, tf.float32) * 2.0, e["label"], 1, 2.5)).batch(4).enumerate()
        return ds

    ours, theirs = pipeline(ptf), pipeline(real_tf)
    assert spec_text(ours.element_spec) == spec_text(theirs.element_spec)
    for a, b in zip(ours.as_numpy_iterator(), theirs.as_numpy_iterator()):
        for u, v in zip(real_tf.nest.flatten(a), real_tf.nest.flatten(b)):
            assert np.asarray(u).dtype == np.asarray(v).dtype
            np.testing.assert_array_equal(u, v)
