"""Shared test setup: a configured virtual IPU system, hypothesis profiles, and a cache directory
of the session's own.

Numba compiles are the slow part of the suite; codelets depend on structure, not sizes, so
hypothesis examples with new shapes mostly reuse machine code. ``HYPOTHESIS_PROFILE=thorough``
runs more examples. The generated modules and machine code go to a temporary ``POPJIT_CACHE_DIR``
shared by the xdist workers (never ``~/.cache/popjit``), and ``KERAS_HOME`` (which stock Keras writes
to when the cross-checks import TensorFlow) and ``MPLCONFIGDIR`` (matplotlib's font cache, for
``popjit report --png``) to temporary directories too; all are removed when the session ends.
``POPJIT_NUM_THREADS`` is pinned to the cores the tests may use, so engines run on the pool whatever
the other test workers do (unpinned, popjit runs them on one thread while other processes need the
cores; the tests of that unpin it). Variables the caller set are used as they are.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "default", max_examples=20, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
settings.register_profile("thorough", parent=settings.get_profile("default"), max_examples=200)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

_OWN_CACHE = "_POPJIT_TEST_CACHE_DIR"


def pytest_configure(config: pytest.Config) -> None:
    """Before any test module imports popjit (and before xdist starts its workers, which inherit it)."""
    if _OWN_CACHE in os.environ:  # an xdist worker: the controller made the directories
        return
    own = os.environ[_OWN_CACHE] = tempfile.mkdtemp(prefix="popjit-tests-")
    from popjit.kernels.threads import available_cores

    os.environ.setdefault("POPJIT_NUM_THREADS", str(available_cores()))
    os.environ.setdefault("POPJIT_CACHE_DIR", os.path.join(own, "cache"))
    os.environ.setdefault("KERAS_HOME", os.path.join(own, "keras"))
    os.environ.setdefault("MPLCONFIGDIR", os.path.join(own, "matplotlib"))


def pytest_unconfigure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput") and _OWN_CACHE in os.environ:  # the controller, once
        shutil.rmtree(os.environ.pop(_OWN_CACHE), ignore_errors=True)


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


@pytest.fixture(scope="module")
def real_tf():
    """TensorFlow with its own Keras (installed by the test extras), for comparisons with stock behaviour."""
    return pytest.importorskip("tensorflow")
