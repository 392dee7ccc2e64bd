"""Loop IR: lowering and fusion shapes, the printer, dim collapsing and copy elision."""

from __future__ import annotations

import numpy as np

import popjit.tensorflow as tf
from popjit.frontend.control_flow import for_range
from popjit.ir.loop import Copy, Kernel, MatMul, Repeat, While
from popjit.loop.interchange import interchangeable
from popjit.loop.interpret import interpret
from popjit.pipeline import lower_graph, optimize_graph


def lowered(fn, *args):
    return lower_graph(optimize_graph(tf.function(fn).get_concrete_function(*args).graph))


def kernels(program) -> list[Kernel]:
    return [s for s in program.walk() if isinstance(s, Kernel)]


def test__elementwise_chain__one_flat_kernel():
    x = np.ones((4, 5, 6), np.float32)
    p = lowered(lambda a, b: tf.exp(a) * 2.0 + tf.sigmoid(b) - a / b, x, x)
    (k,) = kernels(p)
    assert k.domain == (120,), "same-shape element-wise code collapses to one flat loop"
    assert p.as_text().splitlines()[-1].strip().startswith("o0[i0] = sub(add(mul(exp(a0[i0])")


def test__broadcast__keeps_the_broadcast_dimension():
    p = lowered(lambda a, b: a + b, np.ones((4, 5, 6), np.float32), np.ones((6,), np.float32))
    (k,) = kernels(p)
    assert k.domain == (20, 6)
    assert "a1[i1]" in p.as_text()


def test__transpose_of_buffer__is_a_strided_load_not_a_copy():
    p = lowered(lambda a: tf.transpose(a) * 2.0, np.ones((3, 4), np.float32))
    (k,) = kernels(p)
    assert "a0[i0 + i1*4]" in p.as_text()
    assert k.domain == (4, 3)


def test__matmul_of_transposed_operand__uses_the_transpose_flag():
    p = lowered(lambda a, b: tf.matmul(tf.transpose(a), b), np.ones((3, 4), np.float32), np.ones((3, 5), np.float32))
    (mm,) = [s for s in p.walk() if isinstance(s, MatMul)]
    assert mm.ta and not mm.tb and (mm.m, mm.n, mm.k) == (4, 5, 3)
    assert not kernels(p), "no copy kernel for the transposed operand"


def test__reduction__fuses_its_elementwise_producer():
    p = lowered(lambda a: tf.reduce_sum(tf.square(a - 1.0), axis=1), np.ones((8, 16), np.float32))
    (k,) = kernels(p)
    assert k.reduce is not None and k.reduce.op == "sum" and k.reduce.rdomain == (16,)
    assert k.domain == (8,)


def test__loop_carried_update__is_written_in_place():
    def f(x):
        return for_range(0, 10, 1, lambda i, v: [v * 0.5 + 1.0], [x])[0]

    p = lowered(f, np.ones(16, np.float32))
    (rep,) = [s for s in p.body if isinstance(s, Repeat)]
    assert rep.count == 10
    assert not [s for s in rep.body if isinstance(s, Copy)], "the write-back copy was elided"
    (k,) = [s for s in rep.body if isinstance(s, Kernel) and s.domain == (16,)]
    (store,) = k.stores
    assert store.buf in {ld.buf for ld in store.value.loads()}, "reads and writes the carried buffer in place"


def test__swap_of_carried_values__keeps_both_copies_correct():
    def f(a, b):
        return for_range(0, 3, 1, lambda i, x, y: [y, x], [a, b])

    a, b = np.zeros(4, np.float32), np.ones(4, np.float32)
    p = lowered(f, a, b)
    outs, _ = interpret(p, [a, b])
    np.testing.assert_array_equal(outs[0], b)  # three swaps
    np.testing.assert_array_equal(outs[1], a)


def test__row_at_a_run_time_index_feeding_two_matmuls__gathered_once():
    # x = xs[i] is the operand of the forward matmul and of the weight gradient's: one copy, shared
    def step(xs, w, i):
        x = xs[i]
        y = x @ w
        return y, tf.matmul(x, y, transpose_a=True)

    p = lowered(step, np.ones((5, 4, 3), np.float32), np.ones((3, 2), np.float32), np.int32(2))
    gathers = [k for k in kernels(p) if "gather" in k.name]
    assert len(gathers) == 1 and gathers[0].domain == (12,)
    matmuls = [s for s in p.walk() if isinstance(s, MatMul)]
    assert len(matmuls) == 2
    xs, w = np.arange(60, dtype=np.float32).reshape(5, 4, 3), np.ones((3, 2), np.float32)
    y, g = tf.function(step, jit_compile=True)(xs, w, tf.constant(2))
    np.testing.assert_allclose(y.numpy(), xs[2] @ w)
    np.testing.assert_allclose(g.numpy(), xs[2].T @ (xs[2] @ w))


def test__dense_relu_under_a_tape__bias_add_fuses_into_the_relu():
    # relu's gradient mask reads its output, so the pre-activation has one use and is never stored
    def step(x, w, b):
        with tf.GradientTape() as tape:
            tape.watch([w, b])
            h = tf.nn.relu(x @ w + b)
            loss = tf.reduce_sum(h * h)
        return tape.gradient(loss, [w, b])

    x, b = np.ones((4, 3), np.float32), np.zeros(2, np.float32)
    w = np.linspace(-1, 1, 6, dtype=np.float32).reshape(3, 2)
    names = [k.name for k in kernels(lowered(step, x, w, b))]
    assert any("add_relu" in n for n in names) and not any(n.endswith("_add") for n in names), names
    gw, gb = tf.function(step, jit_compile=True)(x, w, b)
    h = np.maximum(x @ w + b, 0)
    np.testing.assert_allclose(gw.numpy(), x.T @ (2 * h))
    np.testing.assert_allclose(gb.numpy(), (2 * h).sum(0))


def test__sgd_update_of_a_matmul_product__folded_into_the_gemm():
    # w -= lr * x.T @ d: BLAS accumulates into w (alpha -lr, beta 1); no product buffer, no update pass
    w0 = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
    v, u = tf.Variable(w0), tf.Variable(w0)

    def step(x):
        for _ in tf.range(3):
            v.assign_sub(0.5 * tf.matmul(x, tf.tanh(x @ v), transpose_a=True))
            u.assign_add(tf.matmul(x, tf.tanh(x @ u), transpose_a=True) * 0.125)
        return v.read_value(), u.read_value()

    x = np.arange(8, dtype=np.float32).reshape(2, 4) / 8
    p = lowered(step, x)
    folded = sorted((m.alpha, m.beta) for m in p.walk() if isinstance(m, MatMul) and m.beta)
    assert folded == [(-0.5, 1.0), (0.125, 1.0)]
    assert not any(k.domain == (12,) for k in kernels(p)), "no separate update kernels"
    ev, eu = w0.astype(np.float64), w0.astype(np.float64)
    for _ in range(3):
        ev, eu = ev - 0.5 * x.T @ np.tanh(x @ ev), eu + 0.125 * x.T @ np.tanh(x @ eu)
    interpreted, _ = interpret(p, [x], {b.binding: w0 for b in p.variables})
    compiled = tf.function(step, jit_compile=True)(x)
    for got in (interpreted, [t.numpy() for t in compiled]):
        np.testing.assert_allclose(got[0], ev, rtol=1e-5)
        np.testing.assert_allclose(got[1], eu, rtol=1e-5)


def _variable_copies(program) -> list[Copy]:
    """The copies into and out of variables around the program's loops (not those inside them)."""
    return [c for c in program.body if isinstance(c, Copy) and {c.src.kind, c.dst.kind} & {"var"}]


def test__variables_updated_in_a_loop__are_its_state_without_copies_in_or_out():
    w0 = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
    v, u = tf.Variable(w0), tf.Variable(w0[:, 0] * 2.0)

    def step(x):
        for _ in tf.range(3):
            v.assign_sub(0.5 * tf.matmul(x, tf.tanh(x @ v), transpose_a=True))
            u.assign(u * 0.5 + tf.reduce_sum(v, axis=1))
        return tf.reduce_sum(x)

    x = np.arange(8, dtype=np.float32).reshape(2, 4) / 8
    p = lowered(step, x)
    assert not _variable_copies(p), "no copy into the loop's state before it, nor back after it"
    (rep,) = [s for s in p.body if isinstance(s, Repeat)]
    assert set(p.variables) <= {b for s in rep.body for t in s.walk() for b in t.writes()}, "updated in place"
    ev, eu = w0.astype(np.float64), w0[:, 0] * 2.0
    for _ in range(3):
        ev = ev - 0.5 * x.T @ np.tanh(x @ ev)
        eu = eu * 0.5 + ev.sum(axis=1)
    initial = {v_binding(p, (4, 3)): w0, v_binding(p, (4,)): w0[:, 0] * 2.0}
    _, interpreted = interpret(p, [x], initial)
    tf.function(step, jit_compile=True)(x)
    for got_v, got_u in ((interpreted[v_binding(p, (4, 3))], interpreted[v_binding(p, (4,))]), (v.numpy(), u.numpy())):
        np.testing.assert_allclose(got_v, ev, rtol=1e-5)
        np.testing.assert_allclose(got_u, eu, rtol=1e-5)


def v_binding(program, shape) -> int:
    """The binding of ``program``'s variable of ``shape``."""
    (binding,) = [b.binding for b in program.variables if b.shape == shape]
    return binding


def test__variable_read_before_its_loop__keeps_the_value_from_before():
    v = tf.Variable(np.arange(6, dtype=np.float32))

    def f(x):
        before = v * 1.0
        for _ in tf.range(4):
            v.assign(v * 0.5 + x)
        return before, v.read_value() + 0.0

    x = np.ones(6, np.float32)
    before, after = tf.function(f, jit_compile=True)(x)
    expected = np.arange(6, dtype=np.float64)
    np.testing.assert_array_equal(before.numpy(), expected)
    for _ in range(4):
        expected = expected * 0.5 + 1.0
    np.testing.assert_allclose(after.numpy(), expected, rtol=1e-6)
    np.testing.assert_allclose(v.numpy(), expected, rtol=1e-6)


def test__variable_in_a_loop_the_engine_runs_chunk_by_chunk__still_copied():
    """Such a loop may stop between chunks (Ctrl-C) with its elements at different iterations, so it
    must update only temporaries: the variable is copied in and back as before."""
    v = tf.Variable(np.ones(1 << 16, np.float32))

    def f():
        for _ in tf.range(5):
            v.assign(v * 0.5 + 1.0)
        return tf.constant(0.0)

    p = lowered(f)
    (rep,) = [s for s in p.body if isinstance(s, Repeat)]
    assert interchangeable(rep)
    assert len(_variable_copies(p)) == 2


def test__variable_carried_by_a_while_loop__in_place_with_its_trip_count():
    v = tf.Variable(np.float32(1.0))

    def f(limit):
        i = tf.constant(0)
        while v < limit:
            v.assign(v * 3.0)
            i += 1
        return i

    p = lowered(f, np.float32(100.0))
    assert [s for s in p.walk() if isinstance(s, While)] and not _variable_copies(p)
    assert int(tf.function(f, jit_compile=True)(np.float32(100.0)).numpy()) == 5
    assert v.numpy() == 243.0


def test__reshape_splitting_dims_of_a_computed_value__reads_it_in_place():
    """[6, 4] -> [2, 3, 4] of ``a + c.T`` (a value whose loads are not all at its flat index): one
    kernel reading through the split; merging dims of it, [6, 4] -> [24], needs a copy first."""
    a = np.arange(24, dtype=np.float32).reshape(6, 4)
    c = np.arange(24, dtype=np.float32).reshape(4, 6) * 10
    split = lowered(lambda a, c: tf.reshape(a + tf.transpose(c), [2, 3, 4]) * 2.0, a, c)
    assert len(kernels(split)) == 1 and not split.temps
    merged = lowered(lambda a, c: tf.reshape(a + tf.transpose(c), [24]) * 2.0, a, c)
    assert len(kernels(merged)) == 2, "a merge would need a quotient and remainder per element: copied"
    (out,), _ = interpret(split, [a, c])
    np.testing.assert_array_equal(out, ((a + c.T) * 2.0).reshape(2, 3, 4))
