"""(f) TF1 Sessions: Graphcore's tutorial graph ``(a + b) + (a + c)`` (seed 004) over ``steps`` inputs.

- popjit: the tutorial's pattern: placeholders on the CPU, the graph under ``ipu_scope``, one
  ``Session.run`` with a ``feed_dict`` per step;
- popjit (infeed): the same graph as the body of ``ipu.loops.repeat(steps)``, fed by an
  ``IPUInfeedQueue`` and read through an outfeed, compiled with ``ipu_compiler.compile``: one
  ``Session.run`` for all the steps, then the outfeed's ``dequeue``;
- TF (feed_dict): stock TensorFlow's ``tf.compat.v1`` graph and ``Session``, one run per step, on the CPU;
- NumPy: the sums.

A call runs every step and returns the ``[steps, n]`` results, checked against NumPy; the rate is steps/s.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from benchmarks import core

TF1_SIZES: dict[str, dict[str, int]] = {"T1": {"n": 1024, "steps": 100}}


def tf1_label(n: int = 1024, steps: int = 100) -> str:
    return f"tf1 session (a+b)+(a+c) f32[{n}] x{steps}"


def tf1_inputs(n: int, steps: int, seed: int = 4) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a, b, c = (rng.uniform(-1, 1, size=(steps, n)).astype(np.float32) for _ in range(3))
    return a, b, c


def tf1_problem(n: int = 1024, steps: int = 100) -> core.Problem:
    """(f) ``steps`` evaluations of the tutorial graph on ``[n]`` vectors."""
    a, b, c = tf1_inputs(n, steps)
    expected = (a.astype(np.float64) + b) + (a.astype(np.float64) + c)
    return core.Problem("tf1", tf1_label(n, steps), (a, b, c), steps, expected, work=steps, unit="steps/s",
                        rtol=1e-6, atol=1e-6, scale=1.0, sizes={"n": n, "steps": steps})


def basic_graph(pa: Any, pb: Any, pc: Any) -> Any:
    """The tutorial's graph."""
    return (pa + pb) + (pa + pc)


def _feed_dict_call(tf1: Any, p: core.Problem, scope: Callable[[], Any]) -> Callable[[], np.ndarray]:
    """One ``Session.run`` with a ``feed_dict`` per step (the graph built under ``scope()``)."""
    a, b, c = p.inputs
    graph = tf1.Graph()
    with graph.as_default():
        with tf1.device("cpu"):
            pa, pb, pc = (tf1.placeholder(np.float32, [p.sizes["n"]], name=k) for k in "abc")
        with scope():
            result = basic_graph(pa, pb, pc)
    sess = tf1.Session(graph=graph)

    def call() -> np.ndarray:
        return np.stack([sess.run(result, {pa: a[k], pb: b[k], pc: c[k]}) for k in range(p.iters)])

    return call


def _popjit_feed_dict(p: core.Problem) -> tuple[Callable[[], Any], str]:
    core.popjit_strategy()  # a configured virtual IPU
    from popjit.ipu.scopes import ipu_scope
    from popjit.tensorflow.compat import v1 as tf1

    return _feed_dict_call(tf1, p, lambda: ipu_scope("/device:IPU:0")), "feed_dict, one Session.run per step"


def _popjit_infeed(p: core.Problem) -> tuple[Callable[[], Any], str]:
    core.popjit_strategy()
    from popjit.ipu import ipu_compiler, loops
    from popjit.ipu.ipu_infeed_queue import IPUInfeedQueue
    from popjit.ipu.ipu_outfeed_queue import IPUOutfeedQueue
    from popjit.ipu.scopes import ipu_scope
    from popjit.tensorflow.compat import v1 as tf1

    graph = tf1.Graph()
    with graph.as_default():
        infeed = IPUInfeedQueue(tf1.data.Dataset.from_tensor_slices(p.inputs).repeat())
        outfeed = IPUOutfeedQueue()
        with ipu_scope("/device:IPU:0"):
            run = ipu_compiler.compile(lambda: loops.repeat(p.iters, lambda *x: outfeed.enqueue(basic_graph(*x)),
                                                            [], infeed), [])
        dequeue = outfeed.dequeue()
        start = infeed.initializer
    sess = tf1.Session(graph=graph)
    sess.run(start)

    def call() -> np.ndarray:
        sess.run(run)
        return sess.run(dequeue)

    return call, f"infeed + loops.repeat({p.iters}) + outfeed, one Session.run"


def _tf_feed_dict(p: core.Problem) -> tuple[Callable[[], Any], str]:
    tf = core.import_peer("tensorflow")
    return _feed_dict_call(tf.compat.v1, p, lambda: tf.device("cpu")), "tf.compat.v1 Session, feed_dict per step"


def _numpy(p: core.Problem) -> tuple[Callable[[], Any], str]:
    a, b, c = p.inputs
    return lambda: np.stack([basic_graph(a[k], b[k], c[k]) for k in range(p.iters)]), "per step"


TF1_IMPLS: dict[str, Callable[[core.Problem], tuple[Callable[[], Any], str]]] = {
    "popjit": _popjit_feed_dict, "popjit-infeed": _popjit_infeed, "tensorflow": _tf_feed_dict, "numpy": _numpy,
}
