"""The reduction table: one row per way of combining is all the loop interpreter, the code
generator and the schedule need. A new row (bitwise OR, which popjit does not ship) runs through
all three with no other change."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from popjit import dtypes
from popjit.codegen.compile import load_engine
from popjit.codegen.engine import render_engine
from popjit.ir.loop import Buffer, Kernel, Load, Program, Reduce, Store, ivar
from popjit.loop.interpret import interpret
from popjit.ops import all_ops
from popjit.ops.reduce import REDUCTIONS, Reduction
from popjit.schedule import make_target, schedule_program

I32 = dtypes.int32
BITWISE_OR = Reduction("bitwise_or", "BITWISE_OR", lambda x, a, k: np.bitwise_or.reduce(x, axis=a, keepdims=k),
                       lambda d: 0, ("{acc} | {v}", "{acc} | {v}"), cost="logical")


def reduce_rows(op: str, rows: int, cols: int) -> Program:
    """``out[i] = op over j of x[i, j]`` as one loop-IR kernel."""
    x, out = Buffer("x", (rows, cols), I32, "arg", binding=0), Buffer("o", (rows,), I32, "out", binding=0)
    value = Load(x, ivar("i0") * cols + ivar("r0"))
    k = Kernel("k", (rows,), [Store(out, ivar("i0"), value)], Reduce(op, (cols,)), (op,))
    return Program("p", [k], [x], [out])


@pytest.fixture(scope="module", autouse=True)
def bitwise_or_row():
    """The new row, present only while this module's tests run."""
    REDUCTIONS["bitwise_or"] = BITWISE_OR
    yield
    del REDUCTIONS["bitwise_or"]


@given(st.integers(1, 9), st.integers(1, 17), st.randoms(use_true_random=False))
def test__a_new_row__is_interpreted_compiled_and_scheduled(rows, cols, rnd):
    x = np.array([[rnd.randrange(0, 1 << 20) for _ in range(cols)] for _ in range(rows)], np.int32)
    want = np.bitwise_or.reduce(x, axis=1)
    program = reduce_rows("bitwise_or", rows, cols)
    (interpreted,), _ = interpret(program, [x])
    np.testing.assert_array_equal(interpreted, want)

    src = render_engine(program)
    (codelet,) = src.codelets.values()
    assert " | v0" in codelet.source, "the row's combine step is the codelet's"
    out = np.zeros(rows, np.int32)
    load_engine(src)([x.reshape(-1), out], src.ints, src.floats, np.zeros(1, np.int64))
    np.testing.assert_array_equal(out, want)

    sched = schedule_program(program, make_target("ipu2", 4))
    assert any("popops::Reduce<BITWISE_OR,int>" in cs.codelets for cs in sched.steps)


def test__every_reduce_op__names_a_row_of_the_table():
    rows = {op.extra["reduce"] for op in all_ops().values() if "reduce" in op.extra}
    assert rows and rows <= set(REDUCTIONS) - {"bitwise_or"}


@pytest.mark.parametrize("name", ["sum", "prod", "max", "min", "any", "all", "argmax", "argmin"])
def test__row_identity__is_neutral_for_its_combine(name):
    """``numpy(identity appended)`` equals ``numpy`` alone: the identity changes no result."""
    row = REDUCTIONS[name]
    dtype = dtypes.bool_ if row.cost == "logical" else dtypes.float32
    x = np.array([[True, False, True]]) if dtype.is_bool else np.array([[1.5, -2.0, 4.0]], np.float32)
    with_identity = np.concatenate([x, np.full((1, 1), row.identity(dtype), x.dtype)], axis=1)
    got, want = row.numpy(with_identity, (1,), False), row.numpy(x, (1,), False)
    np.testing.assert_array_equal(got, want)
