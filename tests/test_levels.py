"""Each IR level agrees with the interpreter of the level above on the same programs:
graph interpreter (NumPy references) == loop-IR interpreter == compiled engine."""

from __future__ import annotations

import numpy as np
import pytest

import popjit.tensorflow as tf
from popjit.frontend.control_flow import cond, for_range, while_loop
from popjit.graph.interpret import interpret as run_graph
from popjit.loop.interpret import interpret as run_loop
from popjit.pipeline import compile_graph, lower_graph, optimize_graph
from popjit.schedule import make_target
from tests.helpers import assert_close

rng = np.random.default_rng(0)


def _f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def chain(x, y):
    return tf.tanh(x * 2.0 + y) * tf.sigmoid(x) - 0.5 * x


def reductions(x):
    return tf.reduce_sum(x * x, axis=1), tf.reduce_max(x, axis=0), tf.reduce_mean(tf.exp(x))


def batched_matmul(a, b):
    return tf.matmul(a, b, transpose_b=True) + 1.0


def counted_loop(x):
    def body(i, acc):
        return [acc * 0.5 + tf.cast(i, tf.float32) * x]

    return for_range(0, 7, 1, body, [tf.zeros_like(x)])[0]


def nested_loops(x):
    def outer(i, acc):
        def inner(j, a):
            return [a + tf.cast(i * j, tf.float32)]

        return for_range(0, 3, 1, inner, [acc * x])

    return for_range(0, 4, 1, outer, [tf.ones_like(x)])[0]


def if_in_while(x):
    def body(i, acc):
        acc = cond(tf.equal(i % 2, 0), lambda: acc + x, lambda: acc * 2.0)
        return i + 1, acc

    return while_loop(lambda i, acc: i < 5, body, [tf.constant(0), x])[1]


PROGRAMS = [
    (chain, (_f32(4, 5), _f32(5))),
    (reductions, (_f32(3, 6),)),
    (batched_matmul, (_f32(2, 3, 4), _f32(5, 4))),
    (counted_loop, (_f32(6),)),
    (nested_loops, (_f32(3),)),
    (if_in_while, (_f32(2, 2),)),
]


@pytest.mark.parametrize(("fn", "args"), PROGRAMS, ids=[p[0].__name__ for p in PROGRAMS])
def test__levels__same_program__agree(fn, args):
    graph = tf.function(fn).get_concrete_function(*args).graph
    reference, _ = run_graph(graph, list(args))
    optimized = optimize_graph(graph)
    via_graph_passes, _ = run_graph(optimized, list(args))
    program = lower_graph(optimized)
    via_loop_ir, _ = run_loop(program, list(args))
    compiled = compile_graph(optimized, make_target()).run(list(args), {})
    assert len(reference) == len(via_loop_ir) == len(compiled)
    for ref, a, b, c in zip(reference, via_graph_passes, via_loop_ir, compiled):
        assert_close(a, ref)
        assert_close(b, ref)
        assert_close(c, ref)


def test__levels__variables__updated_identically():
    v = tf.Variable(np.arange(4, dtype=np.float32))

    def step(x):
        def body(i, acc):
            v.assign(v * 0.5 + x)
            return [acc + tf.reduce_sum(v)]

        return for_range(0, 3, 1, body, [tf.constant(0.0)])[0]

    x = _f32(4)
    graph = tf.function(step).get_concrete_function(x).graph
    start = {v.ref.id: v.numpy()}
    (ref,), ref_vars = run_graph(graph, [x], dict(start))
    program = lower_graph(optimize_graph(graph))
    (loop_out,), loop_vars = run_loop(program, [x], dict(start))
    buffers = {v.ref.id: v.numpy()}
    (compiled,) = compile_graph(graph, make_target()).run([x], buffers)
    assert_close(loop_out, ref)
    assert_close(compiled, ref)
    assert_close(loop_vars[v.ref.id], ref_vars[v.ref.id])
    assert_close(buffers[v.ref.id], ref_vars[v.ref.id])
