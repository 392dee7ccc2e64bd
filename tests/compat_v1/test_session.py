"""TF1 graphs and Sessions: feeds, nested fetches, variable semantics, control dependencies and the
errors a user can trigger (popjit against NumPy and against stock TensorFlow's graph mode)."""

from __future__ import annotations

import collections
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from popjit.errors import FailedPreconditionError, InvalidArgumentError, UnimplementedError
from popjit.tensorflow.compat import v1 as tf1

Pair = collections.namedtuple("Pair", "total product")


def test__run__feeds_placeholders_and_keeps_the_fetch_structure(graph: Any) -> None:
    a = tf1.placeholder(np.float32, [2], name="a")
    b = tf1.placeholder(np.float32, [2], name="b")
    s = tf1.reduce_sum(a * b)
    with tf1.Session() as sess:
        out = sess.run({"pair": Pair(a + b, a * b), "list": [s, (a,)]}, feed_dict={a: [1, 2], b: [3, 4]})
    assert isinstance(out["pair"], Pair)
    np.testing.assert_array_equal(out["pair"].total, [4, 6])
    np.testing.assert_array_equal(out["pair"].product, [3, 8])
    assert isinstance(out["list"][0], np.float32) and out["list"][0] == 11  # a scalar comes back as a NumPy scalar
    np.testing.assert_array_equal(out["list"][1][0], [1, 2])
    assert a.name == "a:0"


@given(x=hnp.arrays(np.float32, (3, 4), elements=st.floats(-10, 10, width=32)),
       y=hnp.arrays(np.float32, (4,), elements=st.floats(-10, 10, width=32)))
def test__run__elementwise_graph_matches_numpy(x: np.ndarray, y: np.ndarray) -> None:
    with tf1.Graph().as_default():
        px = tf1.placeholder(np.float32, [3, 4])
        py = tf1.placeholder(np.float32, [4])
        out = tf1.maximum(px * py - px, py) / (1.0 + tf1.abs(px))
        with tf1.Session() as sess:
            got = sess.run(out, {px: x, py: y})
    want = np.maximum(x * y - x, y) / (np.float32(1) + np.abs(x))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test__run__compiles_once_per_set_of_fetches_and_feeds(graph: Any) -> None:
    a = tf1.placeholder(np.float32, [3])
    out = tf1.exp(a)
    with tf1.Session() as sess:
        for k in range(3):
            np.testing.assert_allclose(sess.run(out, {a: np.full(3, k, np.float32)}), np.exp(np.full(3, k)), rtol=1e-6)
        sess.run([out, a], {a: np.zeros(3, np.float32)})
    assert len(graph._trace.plans) == 2


def _counter_graph(tf: Any) -> tuple[Any, Any, Any]:
    x = tf.placeholder(tf.float32, [2])
    with tf.variable_scope("v", use_resource=True):
        w = tf.get_variable("w", [2], initializer=tf.constant_initializer(1.0))
    update = tf.assign_add(w, x)
    read_after = w * 10.0  # built after the assignment: still reads the value the run starts with
    return x, update, read_after


def test__variables__reads_see_the_value_a_run_starts_with_as_in_stock_tensorflow(graph: Any, real_tf1: Any) -> None:
    def runs(tf: Any, session: Any) -> list[Any]:
        x, update, read_after = _counter_graph(tf)
        with session() as sess:
            sess.run(tf.global_variables_initializer())
            return [sess.run(read_after), sess.run(update, {x: [1, 2]}), sess.run(read_after),
                    sess.run(update, {x: [0.5, 0.5]})]

    ours = runs(tf1, tf1.Session)
    with real_tf1.Graph().as_default():
        theirs = runs(real_tf1, real_tf1.Session)
    for got, want in zip(ours, theirs):
        np.testing.assert_allclose(got, want)
    np.testing.assert_allclose(ours[2], [20, 30])


def test__control_dependencies__run_their_operations_first(graph: Any) -> None:
    v = tf1.get_variable("v", [], initializer=tf1.zeros_initializer(), use_resource=True)
    step = tf1.assign_add(v, 1.0)
    with tf1.control_dependencies([step]):
        marker = tf1.identity(tf1.constant(7.0))
    both = tf1.group(step, marker)
    with tf1.Session() as sess:
        sess.run(tf1.global_variables_initializer())
        assert sess.run(marker) == 7.0
        assert sess.run(v) == 1.0
        assert sess.run(both) is None
        assert sess.run(v) == 2.0
        assert sess.run(tf1.no_op()) is None and sess.run(v) == 2.0


def test__variables__uninitialized_read_fails_and_leaves_them_intact(graph: Any) -> None:
    v = tf1.get_variable("w", [2], initializer=tf1.constant_initializer(3.0), use_resource=True)
    other = tf1.get_variable("o", [2], initializer=tf1.constant_initializer(5.0), use_resource=True)
    with tf1.Session() as sess:
        with pytest.raises(FailedPreconditionError, match=r"resource variable w .*uninitialized.*"
                                                          r"global_variables_initializer"):
            sess.run(v * 2)
        assert tf1.report_uninitialized_variables() == ["w", "o"]
        sess.run(v.initializer)
        np.testing.assert_array_equal(sess.run(v * 2), [6, 6])
        with pytest.raises(FailedPreconditionError, match="resource variable o"):
            sess.run(other)
        sess.run(tf1.global_variables_initializer())
        np.testing.assert_array_equal(sess.run([v, other]), [[3, 3], [5, 5]])


def test__errors__feeds_fetches_and_sessions(graph: Any) -> None:
    a = tf1.placeholder(np.float32, [2], name="a")
    b = tf1.placeholder(np.float32, [2], name="b")
    sess = tf1.Session()
    with pytest.raises(ValueError, match=r"Cannot feed value of shape \(3,\) for Tensor 'a:0', which has shape "
                                         r"'\(2,\)'"):
        sess.run(a + b, {a: [1, 2, 3], b: [1, 2]})
    with pytest.raises(InvalidArgumentError, match="You must feed a value for placeholder tensor 'b' with dtype "
                                                   r"float32 and shape \[2\]"):
        sess.run(a + b, {a: [1, 2]})
    with pytest.raises(TypeError, match="Fetch argument 3 has invalid type"):
        sess.run(3)
    with pytest.raises(UnimplementedError, match="fetching by name"):
        sess.run("a:0")
    with pytest.raises(UnimplementedError, match=r"placeholder\(shape=\[None, 2\]\).*static shapes"):
        tf1.placeholder(np.float32, [None, 2])
    np.testing.assert_array_equal(sess.run(a + b, {a: [1, 2], b: [3, 4]}), [4, 6])  # still usable after errors
    sess.close()
    with pytest.raises(RuntimeError, match="Attempted to use a closed Session"):
        sess.run(a, {a: [1, 2]})


def test__default_session__eval_and_run(graph: Any) -> None:
    a = tf1.placeholder(np.float32, [2])
    v = tf1.get_variable("v", [2], initializer=tf1.ones_initializer(), use_resource=True)
    with pytest.raises(ValueError, match="No default session is registered"):
        (a * 2).eval({a: [1, 2]})
    with tf1.Session() as sess:
        tf1.global_variables_initializer().run()
        np.testing.assert_array_equal((a * v).eval({a: [1, 2]}), [1, 2])
        np.testing.assert_array_equal(v.eval(), [1, 1])
        assert tf1.get_default_session() is sess
    assert tf1.get_default_session() is None


def test__gradients__match_central_differences(graph: Any) -> None:
    x = tf1.placeholder(np.float32, [3])
    y = tf1.reduce_sum(tf1.tanh(x) * x * x)
    (g,) = tf1.gradients(y, [x])
    point = np.array([0.3, -1.2, 0.7], np.float32)
    with tf1.Session() as sess:
        grad = sess.run(g, {x: point})
        eps = np.float32(1e-2)
        numeric = [(sess.run(y, {x: point + eps * e}) - sess.run(y, {x: point - eps * e})) / (2 * eps)
                   for e in np.eye(3, dtype=np.float32)]
    np.testing.assert_allclose(grad, numeric, rtol=2e-3, atol=2e-3)


def test__config_and_run_metadata(graph: Any) -> None:
    a = tf1.placeholder(np.float32, [2])
    config = tf1.ConfigProto(allow_soft_placement=True)
    with pytest.raises(UnimplementedError, match="log_device_placement"):
        tf1.ConfigProto(log_device_placement=True)
    with pytest.raises(ValueError, match='ConfigProto has no "no_such" field'):
        tf1.ConfigProto(no_such=1)
    metadata = tf1.RunMetadata()
    with tf1.Session(config=config) as sess:
        out = sess.run(a * 3, {a: [1, 2]}, options=tf1.RunOptions(trace_level=tf1.RunOptions.FULL_TRACE),
                       run_metadata=metadata)
    np.testing.assert_array_equal(out, [3, 6])
    phases = [n.node_name for d in metadata.step_stats.dev_stats for n in d.node_stats]
    assert phases == ["host_actions", graph._trace.name, "host_fetches"]
    assert all(n.all_end_rel_micros >= 0 for d in metadata.step_stats.dev_stats for n in d.node_stats)


def test__name_scope__prefixes_placeholders_and_v1_variables(graph: Any, real_tf1: Any) -> None:
    def names(tf: Any) -> list[str]:
        with tf.name_scope("outer"):
            with tf.name_scope("inner") as scope:
                p = tf.placeholder(tf.float32, [1], name="p")
            v = tf.Variable(np.zeros(1, np.float32), name="v", use_resource=True)
            g = tf.get_variable("g", [1], use_resource=True)  # follows the variable scope, not the name scope
        return [scope, p.name, v.name, g.name]

    ours = names(tf1)
    with real_tf1.Graph().as_default():
        assert ours == names(real_tf1) == ["outer/inner/", "outer/inner/p:0", "outer/v:0", "g:0"]


def test__random_ops__draw_anew_each_run(graph: Any) -> None:
    noise = tf1.random.normal([4], seed=3)
    mask = tf1.nn.dropout(tf1.ones([64]), rate=0.5)
    with tf1.Session() as sess:
        first, second = sess.run(noise), sess.run(noise)
        masks = [sess.run(mask) for _ in range(2)]
    assert not np.array_equal(first, second)
    assert not np.array_equal(masks[0], masks[1]) and set(np.unique(masks[0])) <= {0.0, 2.0}


def test__feeding_an_intermediate_tensor__replaces_what_computes_it(graph: Any) -> None:
    a = tf1.placeholder(np.float32, [2])
    hidden = tf1.exp(a)
    out = hidden * 2.0
    with tf1.Session() as sess:
        np.testing.assert_allclose(sess.run(out, {hidden: [1, 3]}), [2, 6])  # `a` need not be fed
        np.testing.assert_allclose(sess.run(out, {a: [0, 0]}), [2, 2])


def test__finalized_graph__refuses_new_ops_and_still_runs(graph: Any) -> None:
    a = tf1.placeholder(np.float32, [2])
    v = tf1.get_variable("v", [2], initializer=tf1.ones_initializer(), use_resource=True)
    out = a + v
    init = tf1.global_variables_initializer()
    graph.finalize()
    assert graph.finalized
    with pytest.raises(RuntimeError, match="Graph is finalized and cannot be modified"):
        out * 2.0
    with pytest.raises(RuntimeError, match="Graph is finalized and cannot be modified"):
        tf1.placeholder(np.float32, [2])
    with tf1.Session() as sess:
        sess.run(init)
        np.testing.assert_array_equal(sess.run([out, v], {a: [1, 2]}), [[2, 3], [1, 1]])
