"""TF1 programs on the IPU: Graphcore's tutorial scripts under ``popjit run``, ``ipu_compiler.compile``,
and on-device loops fed by an infeed and read through an outfeed's ``dequeue`` op."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from popjit import ipu
from popjit.errors import UnimplementedError
from popjit.ipu import ipu_compiler, loops
from popjit.ipu.ipu_infeed_queue import IPUInfeedQueue
from popjit.ipu.ipu_outfeed_queue import IPUOutfeedQueue
from popjit.ipu.scopes import ipu_scope
from popjit.tensorflow import data
from popjit.tensorflow.compat import v1 as tf1
from tests.compat_v1.test_train import BATCHES, W0
from tests.test_run import ROOT, popjit_run

#: Graphcore's TF1 tutorial scripts (seed 004), as in the guide, and what each prints.
TUTORIALS = {"tf1_basic_graph.py": "[3. 8.]", "tf1_ipu_compiler.py": "[array([3., 8.], dtype=float32)]",
             "tf1_sharding.py": "[array([ 4., 14.], dtype=float32)]"}


@pytest.mark.parametrize("name", list(TUTORIALS))
def test__tutorial_script__prints_what_the_guide_shows(tmp_path: Path, name: str) -> None:
    result = popjit_run([str(ROOT / "examples" / name)], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == TUTORIALS[name]


def test__compile__returns_a_list_and_runs_as_one_program(graph: Any) -> None:
    a = tf1.placeholder(np.float32, [2])
    with ipu_scope("/device:IPU:0"):
        v = tf1.get_variable("v", [2], initializer=tf1.zeros_initializer())
        out = ipu_compiler.compile(lambda x: [x * 2.0, tf1.assign_add(v, x)], [a])
        only_ops = ipu_compiler.compile(lambda: tf1.group(tf1.assign_add(v, tf1.ones([2]))), [])
    assert isinstance(out, list) and len(out) == 2
    with tf1.Session() as sess:
        sess.run(tf1.global_variables_initializer())
        doubled, total = sess.run(out, {a: [1, 2]})
        np.testing.assert_array_equal(doubled, [2, 4])
        np.testing.assert_array_equal(total, [1, 2])
        assert sess.run(only_ops) is None
        np.testing.assert_array_equal(sess.run(v), [2, 3])


def test__compile__errors_of_graphcores_compiler(graph: Any) -> None:
    a = tf1.placeholder(np.float32, [2])
    with pytest.raises(Exception, match="A computation has been compiled, however it was not placed on an IPU "
                                        "device"):
        ipu_compiler.compile(lambda x: x + 1, [a])

    class EstimatorSpec:
        pass

    with ipu_scope("/device:IPU:0"), pytest.raises(ValueError, match="contains an EstimatorSpec or IPUEstimatorSpec"):
        ipu_compiler.compile(lambda: EstimatorSpec(), [])


def test__infeed_loop__closed_form_values_across_runs(graph: Any) -> None:
    xs = np.arange(16, dtype=np.float32).reshape(8, 2)
    infeed = IPUInfeedQueue(data.Dataset.from_tensor_slices(xs))
    outfeed = IPUOutfeedQueue()

    def body(x: Any) -> Any:
        acc = tf1.get_variable("acc", [2], initializer=tf1.zeros_initializer())
        total = tf1.assign_add(acc, x)
        return outfeed.enqueue({"total": total, "x": x})

    with ipu_scope("/device:IPU:0"):
        run = ipu_compiler.compile(lambda: loops.repeat(4, body, [], infeed), [])
    dequeue = outfeed.dequeue()
    init = infeed.initializer
    with pytest.raises(ValueError, match=r"The IPUInfeedQueue `initializer` function can only be accessed once\."):
        infeed.initializer  # noqa: B018
    with tf1.Session() as sess:
        sess.run([init, tf1.global_variables_initializer()])
        sess.run(run)
        first = sess.run(dequeue)
        sess.run(run)
        second = sess.run(dequeue)
    np.testing.assert_array_equal(first["x"], xs[:4])
    np.testing.assert_array_equal(first["total"], np.cumsum(xs[:4], axis=0))
    np.testing.assert_array_equal(second["total"], np.cumsum(xs, axis=0)[4:])


def test__infeed_loop_training__equals_stock_tensorflows_feed_dict_steps(graph: Any, real_tf1: Any) -> None:
    xs = np.stack([b[0] for b in BATCHES])
    ys = np.stack([b[1] for b in BATCHES])
    infeed = IPUInfeedQueue(data.Dataset.from_tensor_slices((xs, ys)))
    outfeed = IPUOutfeedQueue()

    def model(tf: Any, x: Any, y: Any) -> tuple[Any, Any]:
        with tf.variable_scope("model", reuse=tf.AUTO_REUSE, use_resource=True):
            w = tf.get_variable("w", initializer=tf.constant(W0))
        loss = tf.reduce_mean(tf.square(tf.tanh(tf.matmul(x, w)) - y))
        return loss, tf.train.MomentumOptimizer(0.05, 0.9).minimize(loss)

    def body(x: Any, y: Any) -> Any:
        loss, train = model(tf1, x, y)
        return outfeed.enqueue(loss), train

    with ipu_scope("/device:IPU:0"):
        run = ipu_compiler.compile(lambda: loops.repeat(len(BATCHES), body, [], infeed), [])
    with tf1.Session() as sess:
        sess.run([infeed.initializer, tf1.global_variables_initializer()])
        sess.run(run)
        ours = sess.run(outfeed.dequeue())

    with real_tf1.Graph().as_default():
        x = real_tf1.placeholder(real_tf1.float32, [4, 3])
        y = real_tf1.placeholder(real_tf1.float32, [4, 2])
        loss, train = model(real_tf1, x, y)
        with real_tf1.Session() as sess:
            sess.run(real_tf1.global_variables_initializer())
            theirs = [sess.run([loss, train], {x: bx, y: by})[0] for bx, by in BATCHES]
    np.testing.assert_allclose(ours, theirs, rtol=2e-5, atol=1e-6)


def test__sdk1_event_trace__is_empty_without_event_recording(graph: Any) -> None:
    from popjit.tensorflow.compiler.plugin.poplar.ops import gen_ipu_ops

    with tf1.device("cpu"):
        report = gen_ipu_ops.ipu_event_trace()
    with tf1.Session() as sess:
        events = sess.run(report)
    assert events.shape == (0,)
    assert ipu.utils.extract_all_strings_from_event_trace(events) == ""
    assert ipu.utils.extract_compile_reports(events) == [] and ipu.utils.extract_execute_reports(events) == []
    with pytest.raises(UnimplementedError, match="cannot read IPU trace events"):
        ipu.utils.extract_all_events(np.array([b"an event"], dtype=object))
