"""Graph IR: printer text, verifier negative tests, passes (DCE, CSE, constant folding), fusion plan."""

from __future__ import annotations

import numpy as np
import pytest

import popjit.tensorflow as tf
from popjit import dtypes
from popjit.errors import VerifyError
from popjit.graph.interpret import interpret
from popjit.graph.passes import const_fold, cse, dce, plan_fusion
from popjit.graph.verify import verify
from popjit.ir.graph import Aval, Binding, Graph, Node, Region, Value

F32 = dtypes.float32


def trace(fn, *args):
    return tf.function(fn).get_concrete_function(*args).graph


def ops_of(graph: Graph) -> list[str]:
    return [n.op for n in graph.walk()]


def test__printer__jaxpr_like_text():
    g = trace(lambda x, y: tf.matmul(x, y) + 1.0, np.ones((2, 3), np.float32), np.ones((3, 2), np.float32))
    assert g.as_text() == (
        "graph <lambda>(%0:f32[2,3] @arg:0, %1:f32[3,2] @arg:1) {\n"
        "  %2:f32[2,2] = matmul[transpose_a=False, transpose_b=False](%0, %1)\n"
        "  %3:f32[] = constant[value=[1.]]()\n"
        "  %4:f32[2,2] = add(%2, %3)\n"
        "  return %4 @out:0\n"
        "}"
    )


def test__fingerprint__depends_on_constant_contents_not_identity():
    a = trace(lambda x: x * 2.0, np.ones(3, np.float32))
    b = trace(lambda x: x * 2.0, np.ones(3, np.float32))
    c = trace(lambda x: x * 3.0, np.ones(3, np.float32))
    assert a.fingerprint() == b.fingerprint() != c.fingerprint()


def _tiny_graph() -> tuple[Graph, Node]:
    x = Value(Aval((3,), F32))
    node = Node("exp", [x], {}, [Aval((3,), F32)])
    g = Graph("g", Region([x], [node], [node.out]), [Binding("arg", 0)], [Binding("out", 0)])
    return g, node


def test__verifier__accepts_well_formed_graph():
    g, _ = _tiny_graph()
    assert verify(g) is g


def test__verifier__rejects_wrong_output_shape():
    g, node = _tiny_graph()
    node.outputs[0].aval = Aval((4,), F32)
    with pytest.raises(VerifyError, match=r"outputs \['f32\[4\]'\] but the op's rule gives \['f32\[3\]'\]"):
        verify(g)


def test__verifier__rejects_use_before_definition():
    g, node = _tiny_graph()
    stray = Value(Aval((3,), F32))
    node.inputs = [stray]
    with pytest.raises(VerifyError, match="used before it is defined"):
        verify(g)


def test__verifier__rejects_missing_binding():
    g, _ = _tiny_graph()
    g.result_bindings.clear()
    with pytest.raises(VerifyError, match="every result needs a binding"):
        verify(g)


def test__dce__removes_unused_pure_nodes_only():
    def f(x):
        _unused = tf.exp(x) * 3.0
        return x + 1.0

    g = dce(trace(f, np.ones(3, np.float32)))
    assert "exp" not in ops_of(g) and "mul" not in ops_of(g)
    assert ops_of(g).count("add") == 1


def test__cse__merges_identical_pure_subexpressions():
    def f(x, y):
        return tf.exp(x + y) * tf.exp(y + x)

    g = cse(trace(f, np.ones(3, np.float32), np.ones(3, np.float32)))
    assert ops_of(g).count("add") == 1  # add is commutative: x+y == y+x
    assert ops_of(g).count("exp") == 1
    x = np.arange(3, dtype=np.float32)
    (out,), _ = interpret(g, [x, x])
    np.testing.assert_allclose(out, np.exp(2 * x) ** 2, rtol=1e-6)


def test__cse__drops_multiplications_by_one_that_keep_the_shape():
    def f(x):
        ones = tf.reshape(tf.broadcast_to(tf.constant([[1.0]]), [2, 3]), [3, 2])
        kept = x * ones + ones * x  # both sides: x itself
        widened = tf.constant(np.ones((4, 3, 2), np.float32)) * x  # a broadcast: a real product
        return kept, widened, x * 2.0

    x = np.array([[np.nan, -0.0], [np.inf, -1.5], [3.0, 0.0]], np.float32)
    g = cse(trace(f, x))
    assert ops_of(g).count("mul") == 2, ops_of(g)
    kept, widened, doubled = interpret(g, [x])[0]
    np.testing.assert_array_equal(kept, x + x)
    assert np.signbit(kept[0, 1]), "-0 * 1 + 1 * -0 is -0"
    np.testing.assert_array_equal(widened, np.broadcast_to(x, (4, 3, 2)))
    np.testing.assert_array_equal(doubled, x * 2.0)


def test__const_fold__evaluates_constant_subgraphs():
    x = Value(Aval((), F32))
    c1 = Node("constant", [], {"value": np.array(2.0, np.float32)}, [Aval((), F32)])
    c2 = Node("constant", [], {"value": np.array(3.0, np.float32)}, [Aval((), F32)])
    mul = Node("mul", [c1.out, c2.out], {}, [Aval((), F32)])
    add = Node("add", [x, mul.out], {}, [Aval((), F32)])
    g = Graph("g", Region([x], [c1, c2, mul, add], [add.out]), [Binding("arg", 0)], [Binding("out", 0)])
    g = const_fold(g)
    assert ops_of(g) == ["constant", "add"]
    (out,), _ = interpret(g, [np.float32(1.0)])
    assert out == 7.0


def test__fusion_plan__chain_fuses_and_shared_value_materializes():
    def f(x):
        y = tf.exp(x) * 2.0  # used twice below: materialized
        return tf.tanh(y) + y, tf.sigmoid(x) - 1.0

    g = trace(f, np.ones(4, np.float32))
    plan = plan_fusion(g)
    reasons = sorted(plan.materialized.values())
    assert reasons == ["multiple uses", "result", "result"]
    assert "multiple uses" in plan.as_text()


def _conv_pool_conv_gradient(x, w1, w2):
    with tf.GradientTape() as tape:
        tape.watch(w1)
        h = tf.nn.relu(tf.nn.conv2d(x, w1, 1, "VALID"))
        h = tf.nn.max_pool2d(h, 2, 2, "VALID")
        loss = tf.reduce_sum(tf.nn.conv2d(h, w2, 1, "VALID") ** 2)
    return tape.gradient(loss, w1)


def test__fusion_plan__a_col2im_spread_over_pooling_windows_is_computed_once():
    """The gradient through conv -> max-pool -> conv: the second convolution's col2im (9 window entries
    per element) is read by each of the 2x2 pooling window's entries; it gets its own buffer at the
    pooled size rather than being summed again for every entry, with the same results."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 12, 12, 3)).astype(np.float32)
    w1 = rng.standard_normal((3, 3, 3, 4)).astype(np.float32)
    w2 = rng.standard_normal((3, 3, 4, 5)).astype(np.float32)
    fn = tf.function(_conv_pool_conv_gradient, jit_compile=True)
    g = fn.get_concrete_function(x, w1, w2).graph
    plan = plan_fusion(g)
    repeated = [v for v in (o for n in g.walk() for o in n.outputs) if plan.materialized.get(v.uid) ==
                "read repeatedly through a broadcast"]
    assert [v.aval.shape for v in repeated] == [(2, 5, 5, 4)], "the col2im at the pooled size"
    ((want,), _) = interpret(g, [x, w1, w2])
    np.testing.assert_allclose(fn(x, w1, w2).numpy(), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(("shape", "out", "outside"), [
    ((5, 1), (5, 4), False),  # only the innermost axis repeats: hoisted out of the inner loop
    ((), (3, 4), False),
    ((4,), (3, 4), True),  # a bias over rows
    ((2, 5, 1, 4), (2, 5, 3, 4), True),  # a pooled gradient over the window axis
    ((2, 1, 1), (2, 3, 4), False),
])
def test__fusion_plan__a_broadcast_repeats_inside_only_when_an_inner_axis_varies(shape, out, outside):
    from popjit.graph.passes.fusion import _broadcast_outside

    assert _broadcast_outside(shape, out) is outside


def test__fusion_plan__a_cheap_broadcast_value_stays_fused():
    def f(x, b):
        return tf.tanh(x + tf.exp(b) * 2.0)

    g = trace(f, np.ones((3, 4), np.float32), np.ones(4, np.float32))
    assert sorted(plan_fusion(g).materialized.values()) == ["result"]


def test__prune_loop_state__drops_an_unused_counter():
    from popjit.frontend.control_flow import for_range
    from popjit.graph.passes.loops import prune_loop_state

    def f(x):
        return for_range(0, 5, 1, lambda i, v: [v * 2.0], [x])[0]

    g = trace(f, np.ones(3, np.float32))
    (loop,) = [n for n in g.walk() if n.op == "while"]
    assert len(loop.outputs) == 2  # the counter and v
    g = prune_loop_state(g)
    (loop,) = [n for n in g.walk() if n.op == "while"]
    assert [v.aval.shape for v in loop.outputs] == [(3,)]
    assert "add" not in [n.op for n in loop.regions[1].nodes], "the counter increment is gone"
    verify(g)
    (out,), _ = interpret(g, [np.ones(3, np.float32)])
    np.testing.assert_array_equal(out, np.full(3, 32.0, np.float32))


def test__prune_loop_state__keeps_a_counter_the_body_reads():
    from popjit.frontend.control_flow import for_range
    from popjit.graph.passes.loops import prune_loop_state

    def f(x):
        return for_range(0, 4, 1, lambda i, v: [v + tf.cast(i, tf.float32)], [x])[0]

    g = prune_loop_state(trace(f, np.zeros(2, np.float32)))
    (loop,) = [n for n in g.walk() if n.op == "while"]
    assert len(loop.outputs) == 2
    (out,), _ = interpret(g, [np.zeros(2, np.float32)])
    np.testing.assert_array_equal(out, [6.0, 6.0])
