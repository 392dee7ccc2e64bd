"""The loop-IR functors: dispatch by node class, walking every part, rebuilding through the smart
constructors, and the IR queries built on them (atoms, loads, substitute, reads)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from popjit import dtypes
from popjit.ir.loop import (
    Apply,
    AtomCollector,
    Buffer,
    Const,
    Copy,
    ExprVisitor,
    IDiv,
    If,
    ILin,
    IndexValue,
    IValue,
    IVar,
    Kernel,
    Load,
    LoopFunctor,
    Repeat,
    Stmt,
    StmtMutator,
    StmtVisitor,
    Store,
    Substitute,
    While,
    imax,
    imin,
    ivalue,
    ivar,
)
from popjit.ir.loop_printer import format_index

F32, I32 = dtypes.float32, dtypes.int32
A = Buffer("a", [64], F32)
IDX = Buffer("idx", [8], I32)
OUT = Buffer("o", [64], F32)


def gathered_index() -> ILin:
    """``clamp(idx[i0 // 4]) * 8 + i1 % 8``: a gather inside a div inside a clamp."""
    row = ivalue(Load(IDX, ivar("i0") // 4))
    return imin(imax(row, 0), 7) * 8 + ivar("i1") % 8


def test__dispatch__calls_the_method_the_node_class_names():
    class Kinds(LoopFunctor):
        def visit_load(self, e):
            return "load"

        def visit_const(self, e):
            return "const"

    assert Kinds().expr(Load(A, ivar("i0"))) == "load"
    assert Kinds().expr(Const(1.0, F32)) == "const"


def test__dispatch__a_node_without_a_method_names_the_functor_and_the_node():
    class OnlyLoads(LoopFunctor):
        def visit_load(self, e):
            return e

    with pytest.raises(NotImplementedError, match="OnlyLoads has no visit_apply for Apply"):
        OnlyLoads().expr(Apply("exp", (Load(A, ivar("i0")),), F32))


def test__atoms__reach_inside_clamps_divisions_and_gathers():
    atoms = gathered_index().atoms()
    assert IVar("i0") in atoms and IVar("i1") in atoms
    assert any(isinstance(a, IValue) for a in atoms) and any(isinstance(a, IDiv) for a in atoms)


def test__linear_in__is_false_only_for_variables_under_a_nonlinear_atom():
    ix = gathered_index() + ivar("i2") * 3
    assert ix.linear_in(IVar("i2"))
    assert not ix.linear_in(IVar("i0")) and not ix.linear_in(IVar("i1"))
    assert AtomCollector().inside(IDiv(ivar("i0") + 1, 4)) == [IVar("i0")]


def test__loads__include_the_loads_of_gathered_values():
    value = Apply("add", (Load(A, gathered_index()), Const(1.0, F32)), F32)
    assert [ld.buf.name for ld in value.loads()] == ["a", "idx"]
    k = Kernel("k", (8, 8), [Store(OUT, gathered_index(), Const(0.0, F32))])
    assert k.reads() == {IDX}, "a store's scattered index reads the index buffer"


@given(st.integers(-5, 5), st.integers(1, 9), st.integers(0, 7))
def test__substitute__equals_evaluating_with_the_variable_replaced(scale, shift, i0):
    """``ix[i1 := scale*i0 + shift]`` printed and evaluated equals ``ix`` evaluated at that i1."""
    ix = (ivar("i1") * 3 + 1) // 2 + imin(ivar("i1"), ivar("i0") + 4) - ivar("i0") % 3
    sub = ix.substitute({IVar("i1"): ivar("i0") * scale + shift})
    assert not sub.uses(IVar("i1"))
    value = lambda e, env: eval(format_index(e), {}, env)  # noqa: E731
    assert value(sub, {"i0": i0}) == value(ix, {"i0": i0, "i1": scale * i0 + shift})


def test__substitute__reaches_indices_inside_gathered_values():
    e = Load(A, gathered_index())
    out = Substitute({IVar("i0"): ILin((), 12)}).expr(e)
    (inner,) = [a for a in out.index.atoms() if isinstance(a, IValue)]
    assert inner.expr.index.const == 3, "idx[12 // 4] folds to idx[3]"
    assert IVar("i0") not in out.index.atoms()


def test__expr_visitor__visits_every_index_value_once():
    class Count(ExprVisitor):
        n = 0

        def visit_index_value(self, e):
            self.n += 1
            super().visit_index_value(e)

    e = Apply("add", (IndexValue(ivar("i0"), F32), Apply("mul", (IndexValue(ivar("i0"), F32),) * 2, F32)), F32)
    c = Count()
    c.expr(e)
    assert c.n == 3


def program_body() -> list[Stmt]:
    k = Kernel("k", (64,), [Store(OUT, ivar("i0"), Load(A, ivar("i0")))])
    pred = Buffer("p", [1], dtypes.bool_)
    return [k, Repeat(3, [Copy(A, OUT), k]), While([k], pred, [If(pred, [k], [Copy(OUT, A)])])]


def test__stmt_visitor__enters_every_block():
    class Names(StmtVisitor):
        def __init__(self):
            self.seen = []

        def stmt(self, s):
            self.seen.append(type(s).__name__)
            return super().stmt(s)

    v = Names()
    v.block(program_body())
    assert v.seen == ["Kernel", "Repeat", "Copy", "Kernel", "While", "Kernel", "If", "Kernel", "Copy"]


def test__stmt_mutator__rebuilds_control_and_drops_what_returns_none():
    class DropCopies(StmtMutator):
        def visit_copy(self, s):
            return None

    body = program_body()
    out = DropCopies().block(body)
    kinds = [type(s).__name__ for s in out[0:1] + out[1].body + out[2].body[0].then + out[2].body[0].orelse]
    assert kinds == ["Kernel", "Kernel", "Kernel"]
    assert out[1] is not body[1] and out[0] is body[0], "control statements are rebuilt, kept kernels are the same"
