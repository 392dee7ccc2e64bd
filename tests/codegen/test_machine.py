"""A program library is compiled in parts on several threads (``popjit/codegen/machine.py``)."""

from __future__ import annotations

import threading

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import popjit.tensorflow as tf
from popjit import config
from popjit.codegen import compile as compile_module
from popjit.codegen import machine
from popjit.codegen.compile import load_engine
from popjit.codegen.library import PARTS_PER_THREAD, balanced_parts
from popjit.pipeline import cache as executable_cache


@given(st.lists(st.integers(0, 10_000), min_size=1, max_size=60), st.integers(1, 8))
def test__balanced_parts__every_item_in_a_part_none_empty_none_far_over_the_mean(weights: list[int],
                                                                                 parts: int) -> None:
    part_of = balanced_parts(weights, parts)
    count = min(parts, len(weights))
    assert len(part_of) == len(weights)
    assert sorted(set(part_of)) == list(range(count)), "every part gets at least one item"
    totals = [sum(w for w, p in zip(weights, part_of) if p == i) for i in range(count)]
    # heaviest first to the lightest part: no part exceeds the mean by more than one item
    assert max(totals) <= sum(weights) / count + max(weights)


def _program(x, y):
    h = x
    for k in range(6):  # distinct codelets: tanh, relu (a scalar kernel call), exp, reductions
        h = tf.nn.relu(tf.tanh(h * float(k + 1)) - y) + tf.exp(-h * h) * float(k)
        h = h - tf.reduce_mean(h, axis=0, keepdims=True)
    return h, tf.reduce_sum(h * h)


def _run_and_parts(threads: int) -> tuple[list[np.ndarray], int, set[str]]:
    names: set[str] = set()
    compile_part = machine._compile

    def recorded(part: machine.Part, assembly: bool) -> machine.ObjectCode:
        names.add(threading.current_thread().name)
        return compile_part(part, assembly)

    x = np.random.default_rng(3).standard_normal((33, 17)).astype(np.float32)
    y = np.linspace(-1, 1, 17, dtype=np.float32)
    machine._compile = recorded
    executable_cache.clear()  # why: compile and link again, not reuse the other run's program
    compile_module._ENGINES.clear()
    try:
        with config.context(NUM_THREADS=threads):
            fn = tf.function(_program, jit_compile=True)
            outputs = [o.numpy() for o in fn(x, y)]
            engine = load_engine(fn.get_concrete_function(x, y).executable("cpu").engine_source)
    finally:
        machine._compile = compile_part
    libraries = [library for *_, library in engine._linked.values()]
    return outputs, len(libraries[-1]._libraries), names


def test__program_library__compiled_in_parts_on_threads_gives_the_single_part_result(tmp_path) -> None:
    with config.context(CACHE_DIR=str(tmp_path / "one")):
        single, single_parts, single_threads = _run_and_parts(1)
    with config.context(CACHE_DIR=str(tmp_path / "two")):
        split, split_parts, split_threads = _run_and_parts(2)
    assert single_parts == 1 and len(single_threads) == 1
    assert split_parts == 2 * PARTS_PER_THREAD
    assert len(split_threads) == 2 and all(n.startswith("popjit-llvm") for n in split_threads)
    for a, b in zip(single, split):
        np.testing.assert_array_equal(a, b)


def test__cache_fingerprint__covers_how_program_libraries_are_built() -> None:
    from popjit.kernels.jit import fingerprint_sources

    names = {(p.parent.name, p.name) for p in fingerprint_sources()}
    for name in ("machine.py", "library.py", "native.py", "direct.py", "render.py", "engine.py"):
        assert ("codegen", name) in names, f"a change to codegen/{name} must not load libraries built before it"
    assert ("kernels", "gemm.py") in names
