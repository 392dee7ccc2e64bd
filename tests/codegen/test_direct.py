"""Codelets written as LLVM IR by ``popjit/codegen/direct.py`` compute what Numba's pipeline computes.

Scalar semantics are checked function by function against Python and against the same source
compiled by Numba (hypothesis); whole programs against the same programs with
``POPJIT_DIRECT_CODELETS=0``; and the fallback: a codelet outside the translator's subset is
compiled by Numba, and a program says how many were.
"""

from __future__ import annotations

import ctypes
import textwrap
from typing import Any

import numba
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numba.core import compiler, types
from numba.core.compiler_lock import global_compiler_lock
from numba.core.registry import cpu_target

import popjit.tensorflow as tf
from popjit import config
from popjit.codegen import compile as compile_module
from popjit.codegen.direct import Unsupported, emit_codelet
from popjit.codegen.library import _flags, library_key
from popjit.kernels import math as km
from popjit.kernels.jit import OPTIONS, codelet
from popjit.pipeline import cache as executable_cache

_C_TYPES = {types.int64: ctypes.c_int64, types.float64: ctypes.c_double}


@codelet
def _options_of_codelets(x):
    return x


def compile_direct(source: str, name: str, argument_types: tuple) -> tuple[Any, Any]:
    """``name`` from ``source`` built by the translator alone, callable through ctypes (scalar arguments)."""
    typing, target = cpu_target.typing_context, cpu_target.target_context
    with global_compiler_lock:
        typing.refresh()
        target.refresh()
        context = compiler._make_subtarget(target, _flags(_options_of_codelets))
        library = target.codegen().create_library("test_direct")
        module = context.create_module("test_direct")
        with context.push_code_library(library):
            emit_codelet(context, module, "fn", source, name, {"np": np, "km": km}, argument_types)
        context.post_lowering(module, library)
        library.add_ir_module(module)
        library.finalize()
    signature = ctypes.CFUNCTYPE(ctypes.c_int64, *(_C_TYPES[t] for t in argument_types))
    return signature(library.get_pointer_to_function("fn")), library


def python_function(source: str, name: str) -> Any:
    namespace: dict[str, Any] = {"np": np, "km": km}
    exec(source, namespace)
    return namespace[name]


INTEGERS = textwrap.dedent("""
    def f(a, b):
        q = a // b
        r = a % b
        lo = min(a, b)
        hi = max(a, b)
        m = abs(a - b)
        pick = (q if q > r else r) + (1 if (a > 0 and b > 0) or a == b else 0)
        return q * 7 + r * 5 + lo * 3 + hi * 2 + m + pick
""")


@settings(max_examples=300, deadline=None)
@given(st.integers(-10**6, 10**6), st.integers(-10**6, 10**6).filter(lambda b: b != 0))
def test__integer_arithmetic__floors_and_picks_as_python(a: int, b: int) -> None:
    compiled, _library = _compiled(INTEGERS, "f", (types.int64, types.int64))
    assert compiled(a, b) == python_function(INTEGERS, "f")(a, b)


FLOATS = textwrap.dedent("""
    def g(x, y):
        c0 = np.float32(x)
        acc = np.float32(0.0)
        for i in range(3):
            acc = acc + c0 * np.float32(y) - np.float32(i)
        t = km.tanh(acc) if acc == acc else np.float32(-1.0)
        wide = t * 0.1
        return int(np.float32(wide) * np.float32(1000.0)) + int(km.fmax(c0, np.float32(y)) > c0)
""")


@settings(max_examples=300, deadline=None)
@given(st.floats(-50, 50, width=32), st.floats(-50, 50, width=32))
def test__float_arithmetic__equals_numba_compiled_source(x: float, y: float) -> None:
    compiled, _library = _compiled(FLOATS, "g", (types.float64, types.float64))
    numba_fn = _numba_compiled(FLOATS, "g")
    assert compiled(x, y) == numba_fn(x, y)


def test__operations__are_typed_once_per_process_not_once_per_codelet(monkeypatch) -> None:
    compile_direct(INTEGERS, "f", (types.int64, types.int64))  # types its operations (unless another test did)
    typing = cpu_target.typing_context
    resolve, resolved = typing.resolve_function_type, []

    def counted(*args: Any, **kwargs: Any) -> Any:
        resolved.append(args[0])
        return resolve(*args, **kwargs)

    monkeypatch.setattr(typing, "resolve_function_type", counted)
    again, _library = compile_direct(INTEGERS.replace("def f(", "def f_again("), "f_again", (types.int64, types.int64))
    assert resolved == [], "a codelet of the same operations on the same types asks Numba for none of them"
    assert again(17, -5) == python_function(INTEGERS, "f")(17, -5)


def test__loop_carried_variable__takes_the_unified_type_of_its_assignments() -> None:
    # acc starts as float32 and is assigned float32 + float64: Numba makes it float64 throughout
    source = textwrap.dedent("""
        def h(x):
            acc = np.float32(0.1)
            for i in range(4):
                acc = acc + x
            return int(acc * 1e9)
    """)
    compiled, _library = _compiled(source, "h", (types.float64,))
    assert compiled(0.1) == _numba_compiled(source, "h")(0.1) == int((np.float64(np.float32(0.1)) + 0.4) * 1e9)


def test__conditional_expression__evaluates_only_the_chosen_side() -> None:
    # the untaken side divides by zero: evaluated, it would give the floor division's zero result
    source = textwrap.dedent("""
        def k(a, b):
            x = a // b if b != 0 else 7
            y = (a // b > 0) if b != 0 else False
            return x + int(y)
    """)
    compiled, _library = _compiled(source, "k", (types.int64, types.int64))
    assert compiled(9, 0) == 7 and compiled(9, 2) == 5


@pytest.mark.parametrize("construct", [
    "    while a > 0:\n        a = a - 1\n    return a",
    "    return [a][0]",
    "    x = a\n    for i in range(1, a):\n        x = x + i\n    return x",
    "    return undefined_name + a",
    "    return np.sin(a)",
])
def test__constructs_outside_the_subset__are_refused(construct: str) -> None:
    with pytest.raises(Unsupported):
        compile_direct(f"def u(a):\n{construct}\n", "u", (types.int64,))


_CACHE: dict[tuple, Any] = {}


def _compiled(source: str, name: str, argument_types: tuple) -> tuple[Any, Any]:
    key = (source, name, argument_types)
    if key not in _CACHE:
        _CACHE[key] = compile_direct(source, name, argument_types)
    return _CACHE[key]


def _numba_compiled(source: str, name: str) -> Any:
    key = ("numba", source, name)
    if key not in _CACHE:
        options = {k: v for k, v in OPTIONS.items() if k != "cache"}
        _CACHE[key] = numba.njit(**options)(python_function(source, name))
    return _CACHE[key]


# -- whole programs ------------------------------------------------------------------------------------


def _training_step(x: Any, w: Any, labels: Any, h: Any) -> Any:
    logits = tf.matmul(tf.nn.relu(x), w)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
    pooled = tf.nn.max_pool2d(tf.reshape(x, (4, 6, 6, 1)), 2, 2, "VALID")
    return (loss, tf.argmax(logits, axis=1), tf.reduce_sum(pooled, axis=[1, 2]),
            tf.cast(h, tf.float32) * 2.0
            + tf.cast(tf.math.floormod(tf.range(36, dtype=tf.int32) - 9, 5)[0:1], tf.float32))


def _program_inputs() -> tuple:
    rng = np.random.default_rng(3)
    return (rng.standard_normal((4, 36)).astype(np.float32), rng.standard_normal((36, 10)).astype(np.float32),
            rng.integers(0, 10, 4).astype(np.int32), rng.standard_normal(7).astype(np.float16))


def test__program__same_results_with_and_without_direct_codelets(tmp_path: Any) -> None:
    inputs = _program_inputs()
    results, libraries = {}, {}
    for direct in (True, False):
        with config.context(DIRECT_CODELETS=direct, CACHE_DIR=str(tmp_path / str(direct))):
            executable_cache.clear()  # why: compile and link again, not reuse the program of the other mode
            compile_module._ENGINES.clear()
            fn = tf.function(_training_step, jit_compile=True)
            results[direct] = [np.asarray(o) for o in fn(*inputs)]
            exe = fn.get_concrete_function(*inputs).executable("cpu")
            ((_engine, _table, libraries[direct]),) = exe.engine._linked.values()
            library_kernels = len(exe.engine_source.library)
    # the library kernels' units may be loaded already (the first mode's, another test's): count them too
    callees = {direct: lib.compiled + lib.reused for direct, lib in libraries.items()}
    assert callees[True] == callees[False] > library_kernels + 5
    assert libraries[True].through_numba == 0, "every generated codelet went straight to LLVM IR"
    # library kernels are linked in from their per-machine build either way
    assert libraries[False].through_numba == callees[False] - library_kernels
    for a, b in zip(results[True], results[False]):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def test__cache_key__says_how_the_codelets_were_built() -> None:
    # a library built with Numba's pipeline is not loaded for a process that asked for direct codelets
    callees = [("k_0", (types.int64,))]
    with config.context(DIRECT_CODELETS=True):
        direct = library_key("e_0", callees)
    with config.context(DIRECT_CODELETS=False):
        through_numba = library_key("e_0", callees)
    assert direct != through_numba
