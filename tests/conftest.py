"""Shared test setup: a configured virtual IPU system and hypothesis profiles.

Numba compiles are the slow part of the suite; codelets depend on structure, not sizes, so
hypothesis examples with new shapes mostly reuse machine code. ``HYPOTHESIS_PROFILE=thorough``
runs more examples.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "default", max_examples=20, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
settings.register_profile("thorough", parent=settings.get_profile("default"), max_examples=200)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


@pytest.fixture(autouse=True, scope="session")
def ipu_system():
    """One configured IPU (the default ipu2 model) for the whole session."""
    from popjit.runtime import device as devices

    devices.configure([1])
    yield devices.system()


@pytest.fixture
def fresh_ipu_system():
    """Reconfigure the system for one test and restore the default afterwards."""
    from popjit.runtime import device as devices

    yield devices
    devices.configure([1])
