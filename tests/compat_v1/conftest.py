"""Fixtures of the TF1 tests: a fresh popjit graph made the default for one test, and stock TensorFlow's."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from popjit.tensorflow.compat import v1 as tf1


@pytest.fixture
def graph() -> Iterator[Any]:
    """A new popjit TF1 graph, the default inside the test (the process stays eager outside it)."""
    g = tf1.Graph()
    with g.as_default():
        yield g


@pytest.fixture
def real_tf1(real_tf: Any) -> Any:
    """Stock ``tf.compat.v1``; build its graphs inside ``real_tf1.Graph().as_default()``."""
    return real_tf.compat.v1


@pytest.fixture(autouse=True)
def stays_eager() -> Iterator[None]:
    """The TF1 tests build their graphs inside ``Graph().as_default()``: none may switch this process to graph
    mode (the tests that do run in their own processes, through ``popjit run``)."""
    from popjit.frontend import graph_mode

    yield
    if not graph_mode.eager_enabled():
        graph_mode.enable_eager_execution()
        pytest.fail("the test switched the process to TF1 graph mode")
