"""The engine is built as LLVM IR (``popjit/codegen/native.py``) and calls codelets by address."""

from __future__ import annotations

import gc

import numpy as np
from numba.core.registry import CPUDispatcher

import popjit.tensorflow as tf
from popjit.codegen.compile import callee_functions, load_engine


def _loops(x, n):
    total = tf.zeros_like(x)
    for i in tf.range(n):
        if tf.reduce_sum(total) < 100.0:
            total = total + tf.tanh(x) * tf.cast(i, tf.float32)
        else:
            total = total - 1.0
    return total


def _reference(x: np.ndarray, n: int) -> np.ndarray:
    total = np.zeros_like(x)
    for i in range(n):
        total = total + np.tanh(x) * i if total.sum() < 100 else total - 1
    return total


def test__engine__runs_loops_and_branches_without_a_numba_engine_function():
    fn = tf.function(_loops, jit_compile=True)
    x = np.linspace(-1, 2, 12).astype(np.float32)
    out = fn(x, np.int32(30)).numpy()
    np.testing.assert_allclose(out, _reference(x, 30), rtol=1e-5, atol=1e-5)
    engines = [d for d in gc.get_objects() if isinstance(d, CPUDispatcher) and d.py_func.__name__.startswith("e_")]
    assert engines == [], "no engine goes through Numba"


def test__engine__address_table_holds_the_codelets_entry_points():
    fn = tf.function(_loops, jit_compile=True)
    x = np.ones(5, np.float32)
    fn(x, np.int32(3))
    exe = fn.get_concrete_function(x, np.int32(3)).executable("cpu")
    engine = load_engine(exe.engine_source)
    ((_native, table),) = engine._linked.values()
    functions = callee_functions(exe.engine_source)
    assert len(table) == len(functions) == len(exe.engine_source.callees) >= 3
    for address, f in zip(table, functions):
        entries = {c.library.get_pointer_to_function(c.fndesc.llvm_cfunc_wrapper_name) for c in f.overloads.values()}
        assert address in entries, f"K holds an address that is not an entry point of {f.py_func.__name__}"
    legend = [line for line in exe.as_text("engine").splitlines() if line.startswith("# K[")]
    assert legend == [f"# K[{i}]: {c.name}" for i, c in enumerate(exe.engine_source.callees)]


def test__engine__one_object_per_engine_and_callees():
    fn = tf.function(_loops, jit_compile=True)
    small, large = np.ones(3, np.float32), np.ones(40, np.float32)
    fn(small, np.int32(2))
    fn(large, np.int32(2))
    a = fn.get_concrete_function(small, np.int32(2)).executable("cpu")
    b = fn.get_concrete_function(large, np.int32(2)).executable("cpu")
    assert a.engine is b.engine, "a new size reuses the engine and its linked codelets"
    assert len(a.engine._linked) == 1
