"""The engine is built as LLVM IR (``popjit/codegen/native.py``) and calls codelets by address."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
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
    # why type(): isinstance() reads __class__ through weak proxies in gc's list, and a dead one raises
    engines = [d for d in gc.get_objects() if type(d) is CPUDispatcher and d.py_func.__name__.startswith("e_")]
    assert engines == [], "no engine goes through Numba"


def test__engine__calls_codelets_compiled_into_one_program_library():
    fn = tf.function(_loops, jit_compile=True)
    x = np.ones(5, np.float32)
    fn(x, np.int32(3))
    exe = fn.get_concrete_function(x, np.int32(3)).executable("cpu")
    engine = load_engine(exe.engine_source)
    ((_native, table, library),) = engine._linked.values()
    assert len(table) == len(exe.engine_source.callees) >= 3
    assert list(table) == library.addresses and 0 not in library.addresses and library.engine not in library.addresses
    generated = [f for f, c in zip(callee_functions(exe.engine_source), exe.engine_source.callees)
                 if c.name in exe.engine_source.codelets]
    assert generated and all(not f.overloads for f in generated), "codelets are never compiled one by one"
    legend = [line for line in exe.as_text("engine").splitlines() if line.startswith("# K[")]
    assert legend == [f"# K[{i}]: {c.name}" for i, c in enumerate(exe.engine_source.callees)]


CACHED = textwrap.dedent("""
    import sys
    import numpy as np
    import popjit.tensorflow as tf
    from popjit.codegen.compile import load_engine

    @tf.function(jit_compile=True)
    def f(x, n):
        total = tf.zeros_like(x)
        for i in tf.range(n):
            total = total + tf.tanh(x) * tf.cast(i, tf.float32) - tf.reduce_max(x)
        return total

    x = np.linspace(-1, 2, 12).astype(np.float32)
    out = f(x, np.int32(7)).numpy()
    engine = load_engine(f.get_concrete_function(x, np.int32(7)).executable("cpu").engine_source)
    ((_, _, library),) = engine._linked.values()
    print(library.compiled, "numba.np.arraymath" in sys.modules, out.round(5).tolist())
""")


@pytest.mark.slow
def test__a_cached_program__loads_as_one_file_without_numba_typing(tmp_path):
    env = {**os.environ, "POPJIT_CACHE_DIR": str(tmp_path / "cache")}
    script = tmp_path / "program.py"
    script.write_text(CACHED)
    runs = [subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=600)
            for _ in range(2)]
    assert all(r.returncode == 0 for r in runs), runs[0].stderr[-2000:] + runs[1].stderr[-2000:]
    (first, first_typing, first_out), (second, second_typing, second_out) = (
        r.stdout.split(" ", 2) for r in (runs[0], runs[1]))
    assert int(first) >= 3 and first_typing == "True", "the first process compiles the program's functions"
    assert int(second) == 0, "the second loads them"
    assert second_typing == "False", "without loading Numba's typing registries"
    assert first_out == second_out
    assert len(list(tmp_path.glob("cache/gen-*/programs/*.lib"))) == 1


FIRST_COMPILE = textwrap.dedent("""
    import sys
    import numba
    import numpy as np
    import popjit.tensorflow as tf

    @tf.function(jit_compile=True)
    def f(x):
        return tf.tanh(x) * 2.0

    x = np.linspace(-1, 2, 12).astype(np.float32)
    assert np.allclose(f(x).numpy(), np.tanh(x) * 2, atol=1e-6)
    loaded = "numba.np.arraymath" in sys.modules
    without_scipy = "scipy.linalg" not in sys.modules
    a, b = np.arange(6.0).reshape(2, 3), np.arange(12.0).reshape(3, 4)
    print(loaded, without_scipy, np.array_equal(numba.njit(lambda a, b: np.dot(a, b))(a, b), a @ b),
          hasattr(sys.modules["scipy.linalg.cython_blas"], "__pyx_capi__"))
""")


@pytest.mark.slow
def test__a_first_compile__loads_numbas_registries_without_scipy_linalg(tmp_path):
    """Numba's registries probe scipy.linalg.cython_blas on loading (0.3-0.55 s); popjit's compile answers
    the probe with a stand-in, and a Numba function using np.dot afterwards still gets the real BLAS."""
    env = {**os.environ, "POPJIT_CACHE_DIR": str(tmp_path / "cache")}
    script = tmp_path / "first.py"
    script.write_text(FIRST_COMPILE)
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    loaded, without_scipy, dot_right, real_blas = run.stdout.split()
    assert loaded == "True", "the program was compiled in this process"
    assert without_scipy == "True", "compiling did not import scipy.linalg"
    assert dot_right == "True" and real_blas == "True", "np.dot compiled later uses SciPy's real BLAS module"


def test__engine__one_object_per_engine_and_callees():
    fn = tf.function(_loops, jit_compile=True)
    small, large = np.ones(3, np.float32), np.ones(40, np.float32)
    fn(small, np.int32(2))
    fn(large, np.int32(2))
    a = fn.get_concrete_function(small, np.int32(2)).executable("cpu")
    b = fn.get_concrete_function(large, np.int32(2)).executable("cpu")
    assert a.engine is b.engine, "a new size reuses the engine and its linked codelets"
    assert len(a.engine._linked) == 1


def test__engine_ir__reads_each_argument_through_one_cast_per_element_type():
    """The engine reads its arguments (buffer addresses and sizes, parameters, entry points, flags) as
    arrays; each argument's cast to each element type is made once, first in the entry block, not again
    at every read (five out of six of an engine's casts were those), and the engine computes the same."""
    from popjit.codegen.compile import _argument_type
    from popjit.codegen.native import _ELEMENT_TYPES, engine_module

    fn = tf.function(_loops, jit_compile=True)
    x = np.linspace(-1, 2, 12).astype(np.float32)
    np.testing.assert_allclose(fn(x, np.int32(30)).numpy(), _reference(x, 30), rtol=1e-5, atol=1e-5)
    src = fn.get_concrete_function(x, np.int32(30)).executable("cpu").engine_source
    buffers = [np.empty(0, b.dtype.np) for b in src.arguments]
    types = [tuple(_argument_type(kind, buffers) for kind in c.kinds) for c in src.callees]
    text = str(engine_module(src, types))
    body = text.split(f'define i64 @"{src.name}"', 1)[1].split("\n}\n", 1)[0]
    casts = [line.split("bitcast ")[1] for line in body.splitlines() if " = bitcast " in line]
    of_arguments = [c for c in casts if c.split(" to ")[0].split()[-1] in {f'%".{i}"' for i in range(1, 8)}]
    assert len(set(of_arguments)) == len(of_arguments), "no argument is cast to one type twice"
    assert 7 <= len(of_arguments) <= 7 * len(_ELEMENT_TYPES)
    reads = body.count("getelementptr i64, i64*") + body.count("getelementptr i8*, i8**")
    assert reads > len(of_arguments), "the engine reads its arguments more often than it casts them"


def _ctypes_reads(run) -> int:
    """How many times ``run()`` reads an array's address through ``ndarray.ctypes`` (about 1.5 us each)."""
    import cProfile
    import pstats

    code = type(np.zeros(1).ctypes).__init__.__code__
    profile = cProfile.Profile()
    profile.runcall(run)
    stats = pstats.Stats(profile).stats
    return sum(calls for (file, line, name), (calls, *_) in stats.items()
               if (file, line, name) == (code.co_filename, code.co_firstlineno, code.co_name))


def test__a_run__reads_addresses_only_of_the_arrays_that_are_new_to_it():
    """The engine's parameters, callees, stop flag and buffer sizes come back run after run, a run's temporaries
    are one allocation, and each result's address is read as its allocation is aligned: a run reads the
    addresses of its arguments, variables and results, of its temporaries' block and of the address array it
    builds, no more."""
    w, v = tf.Variable(np.ones((5, 3), np.float32)), tf.Variable(np.zeros(3, np.float32))

    @tf.function(jit_compile=True)
    def step(x, y):
        w.assign_sub(0.01 * tf.matmul(x, w))
        v.assign_add(tf.reduce_sum(w, axis=0))
        return tf.tanh(tf.matmul(x, w)) + y, tf.reduce_max(x)

    x, y = np.eye(5, dtype=np.float32), np.ones(3, np.float32)
    step(x, y)
    executable = step.get_concrete_function(x, y).executable("cpu")
    assert len(executable.program.temps) > 0
    reads = _ctypes_reads(lambda: step(x, y))
    arrays_new_to_each_run = 2 + 2 + 2 + 1 + 1  # arguments, variables, results, temporaries, the addresses
    assert reads <= arrays_new_to_each_run, f"{reads} address reads for one run"


def test__an_engine_s_remembered_addresses__follow_the_array_not_its_id():
    from popjit.codegen.native import _ADDRESSES_HELD, NativeEngine

    engine = NativeEngine.__new__(NativeEngine)
    engine._held = {}
    for size in range(3 * _ADDRESSES_HELD):  # why many: a freed array's id is soon another's
        array = np.zeros(size + 1)
        assert engine._address(array) == array.ctypes.data
        assert len(engine._held) <= _ADDRESSES_HELD
