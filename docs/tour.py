"""A runnable tour of popjit's pipeline: one small function through every stage.

    python docs/tour.py

Each stage is an object that prints itself as text; the same text is what ``POPJIT_DEBUG``
levels dump (see docs/env_vars.md).
"""

from __future__ import annotations

import numpy as np

import popjit.tensorflow as tf
from popjit.graph.interpret import interpret as run_graph
from popjit.loop.interpret import interpret as run_loop
from popjit.pipeline import compile_cached, lower_graph, optimize_graph
from popjit.schedule import make_target


def layer(x, w, b):
    """A dense layer with a tanh, then a softmax-style normalisation."""
    h = tf.tanh(tf.matmul(x, w) + b)
    e = tf.exp(h - tf.reduce_max(h, axis=1, keepdims=True))
    return e / tf.reduce_sum(e, axis=1, keepdims=True)


def banner(title: str) -> None:
    print(f"\n{'=' * 20} {title} {'=' * (60 - len(title))}")


def main() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((32, 64)).astype(np.float32)
    w = rng.standard_normal((64, 16)).astype(np.float32)
    b = rng.standard_normal(16).astype(np.float32)

    banner("1. trace: Python -> graph IR (SSA ops with static shapes)")
    graph = tf.function(layer).get_concrete_function(x, w, b).graph
    print(graph.as_text())

    banner("2. graph passes: verify, const_fold, cse, dce")
    graph = optimize_graph(graph)
    print(graph.as_text())

    banner("3. lower: graph IR -> loop IR (element-wise chains fused into one loop nest)")
    program = lower_graph(graph)
    print(program.as_text())

    banner("4. schedule: the loop IR on a virtual ipu2 (tiles, compute sets, memory, cycles)")
    exe = compile_cached(graph, make_target("ipu2"))
    print(exe.as_text("schedule"))

    banner("5. codegen: size-independent Numba codelets and one engine function")
    print(exe.as_text("codelets"))
    print(exe.as_text("engine"))

    banner("6. run: the engine natively, checked against both interpreters")
    (native,) = exe.run([x, w, b], {})
    (by_graph,), _ = run_graph(graph, [x, w, b])
    (by_loop,), _ = run_loop(program, [x, w, b])
    print("rows sum to 1:", np.allclose(native.sum(axis=1), 1.0, atol=1e-5))
    print("native == graph interpreter:", np.allclose(native, by_graph, atol=1e-5))
    print("native == loop interpreter:", np.allclose(native, by_loop, atol=1e-5))


if __name__ == "__main__":
    main()
