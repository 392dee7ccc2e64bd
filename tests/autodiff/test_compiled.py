"""Gradients computed inside ``tf.function(jit_compile=True)`` agree with the eager ones.

Inside a trace the tape records graph nodes and the backward pass becomes part of the same program,
lowered, scheduled and compiled to Numba codelets with the forward pass. Each row of the rule table
runs a couple of hypothesis cases in float32 both ways (codelets are keyed by structure, so a new
shape mostly reuses machine code).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.autodiff.rules import (
    ROWS,
    Row,
    as_float32,
    compiled_gradients,
    cotangents_for,
    outputs_of,
    tape_gradients,
    tensors,
)

JIT_ROWS = [r for r in ROWS if r.jit]


@pytest.mark.parametrize("row", JIT_ROWS, ids=[r.name for r in JIT_ROWS])
@settings(max_examples=2)
@given(data=st.data())
def test__compiled_gradient__agrees_with_eager(row: Row, data: Any) -> None:
    case = data.draw(row.cases, label="case")
    args = as_float32(case.args)
    cts = cotangents_for(outputs_of(case.fn(*tensors(args))))
    eager = tape_gradients(case, args, cts)
    compiled = compiled_gradients(case, args, cts)
    assert len(compiled) == len(eager)
    for i, e, c in zip(case.wrt, eager, compiled):
        assert e is not None, f"{row.name}: no eager gradient for argument {i}"
        assert c.shape == e.shape and c.dtype == np.float32, (c.shape, c.dtype)
        scale = max(1.0, float(np.max(np.abs(e), initial=0.0)))
        np.testing.assert_allclose(c, e, rtol=1e-4, atol=1e-4 * scale, err_msg=f"{row.name}, argument {i}")
