"""Keras tests start with fresh layer names (stock TensorFlow, ``real_tf``, is in tests/conftest.py)."""

from __future__ import annotations

import pytest

import popjit.tensorflow as pj


@pytest.fixture(autouse=True)
def _fresh_names():
    """Each test starts with popjit's layer-name counters reset (``dense``, ``dense_1``...)."""
    pj.keras.backend.clear_session()
