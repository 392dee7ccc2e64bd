"""Shared Keras test fixtures: stock TensorFlow for the comparisons, and fresh layer names."""

from __future__ import annotations

import pytest

import popjit.tensorflow as pj


@pytest.fixture(scope="module")
def real_tf():
    """TensorFlow with its own Keras (installed by the test extras)."""
    return pytest.importorskip("tensorflow")


@pytest.fixture(autouse=True)
def _fresh_names():
    """Each test starts with popjit's layer-name counters reset (``dense``, ``dense_1``...)."""
    pj.keras.backend.clear_session()
