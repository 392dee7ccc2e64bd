"""Code generation: size-independent codelet source, machine-code reuse across shapes, debug modes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import popjit.tensorflow as tf
from popjit.codegen.engine import render_engine
from popjit.kernels.jit import OPENMP_SPINS_QUIET, OPENMP_SPINS_SHARED
from popjit.pipeline import compile_graph, lower_graph, optimize_graph


def engine_for(fn, *args):
    graph = optimize_graph(tf.function(fn).get_concrete_function(*args).graph)
    return render_engine(lower_graph(graph))


def chain(x, y):
    return tf.tanh(x * 3.0 + y) - 1.0


def test__codelet_source__independent_of_sizes():
    small = engine_for(chain, np.ones((2, 3), np.float32), np.ones(3, np.float32))
    large = engine_for(chain, np.ones((64, 33), np.float32), np.ones(33, np.float32))
    assert small.source == large.source
    assert list(small.codelets) == list(large.codelets)
    assert list(small.ints) != list(large.ints), "the sizes travel in the parameter array"


def test__codelet_source__depends_on_structure():
    a = engine_for(chain, np.ones((2, 3), np.float32), np.ones(3, np.float32))
    b = engine_for(chain, np.ones((2, 3), np.float32), np.ones((2, 3), np.float32))
    c = engine_for(lambda x, y: tf.tanh(x * 3.0 + y) - 1.0, np.ones(3, np.float16), np.ones(3, np.float16))
    def code(e):
        return e.source + "".join(r.source for r in e.codelets.values())

    assert len({code(a), code(b), code(c)}) == 3


def test__new_shape__reuses_machine_code():
    first = compile_graph(tf.function(chain).get_concrete_function(np.ones((5, 7), np.float32),
                                                                     np.ones(7, np.float32)).graph, None)
    x, y = np.random.rand(5, 7).astype(np.float32), np.random.rand(7).astype(np.float32)
    first.run([x, y], {})
    (linked,) = first.engine._linked.values()
    second = compile_graph(tf.function(chain).get_concrete_function(np.ones((9, 4), np.float32),
                                                                      np.ones(4, np.float32)).graph, None)
    x2, y2 = np.random.rand(9, 4).astype(np.float32), np.random.rand(4).astype(np.float32)
    (out,) = second.run([x2, y2], {})
    assert second.engine is first.engine, "same engine function for a new shape"
    assert list(first.engine._linked.values()) == [linked], "the same machine code runs the new shape"
    np.testing.assert_allclose(out, np.tanh(x2 * 3 + y2) - 1, rtol=1e-5, atol=1e-6)


def _run_script(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=300)


SCRIPT = """
    import numpy as np
    import popjit.tensorflow as tf
    from popjit.frontend.control_flow import for_range

    @tf.function(jit_compile=True)
    def f(x):
        return for_range(0, 3, 1, lambda i, v: [tf.exp(v) * 0.5 + tf.reduce_max(v)], [x])[0]

    x = np.linspace(-1, 1, 8).astype(np.float32)
    ref = x.astype(np.float64)
    for _ in range(3):
        ref = np.exp(ref) * 0.5 + ref.max()
    print("OK" if np.allclose(f(x).numpy(), ref, rtol=1e-5) else "MISMATCH")
"""


def test__disable_numba__runs_generated_code_as_python(tmp_path):
    r = _run_script(SCRIPT, POPJIT_DISABLE_NUMBA="1", POPJIT_CACHE_DIR=str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "OK"
    generated = list(tmp_path.rglob("k_*_py.py"))
    assert generated, "plain-Python codelet modules were written"
    assert "@codelet" not in generated[0].read_text()


def test__debug_levels__dump_each_stage(tmp_path):
    r = _run_script(SCRIPT, POPJIT_DEBUG="7", POPJIT_CACHE_DIR=str(tmp_path))
    assert r.returncode == 0, r.stderr
    for title in ("graph IR of f", "loop IR of f", "tile schedule of f", "codelets of f", "engine of f", "compiled f"):
        assert f"=== popjit: {title} ===" in r.stderr, title
    assembly = r.stderr.split("=== popjit: machine code of program library ", 1)
    assert len(assembly) == 2 and re.search(r"^\s+(ret|vmov|mov)", assembly[1], re.M), "level 7: the assembly"
    again = _run_script(SCRIPT, POPJIT_DEBUG="3", POPJIT_CACHE_DIR=str(tmp_path))
    assert "=== popjit: loop IR of f ===" in again.stderr, "asked for stages, a kept program compiles again"
    quiet = _run_script(SCRIPT, POPJIT_DEBUG="1", POPJIT_CACHE_DIR=str(tmp_path))
    assert "=== popjit: loaded f ===" in quiet.stderr and "loop IR" not in quiet.stderr
    assert "from the executable cache" in quiet.stderr
    fresh = _run_script(SCRIPT, POPJIT_DEBUG="1", POPJIT_CACHE_DIR=str(tmp_path / "empty"))
    assert "=== popjit: compiled f ===" in fresh.stderr


CACHE_SCRIPT = """
    import numpy as np
    import popjit.tensorflow as tf
    from popjit.codegen.compile import load_engine

    @tf.function(jit_compile=True)
    def f(x):
        for _ in tf.range(4):
            x = tf.tanh(x) * 2.0 + tf.reduce_sum(x)
        return x

    x = np.linspace(-1, 1, 16).astype(np.float32)
    out = f(x).numpy()
    ((_, _, library),) = load_engine(f.get_concrete_function(x).executable("cpu").engine_source)._linked.values()
    print("compiled", library.compiled, "checksum", round(float(out.sum()), 4))
"""


def test__executable_cache_path__second_process_compiles_nothing(tmp_path):
    cache = tmp_path / "not" / "there" / "yet"
    flags = {"TF_POPLAR_FLAGS": f"--executable_cache_path={cache}", "POPJIT_CACHE_DIR": str(tmp_path / "unused")}
    first = _run_script(CACHE_SCRIPT, **flags)
    second = _run_script(CACHE_SCRIPT, **flags)
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert first.stdout.split()[1] != "0", first.stdout  # the first process compiled its codelets
    assert second.stdout.split()[1] == "0", second.stdout  # the second loaded every one from the cache
    assert first.stdout.split()[3] == second.stdout.split()[3]  # same results
    assert list(cache.rglob("k_*.py")) and list(cache.glob("*.poplar_exec")), "modules and programs are in DIR"
    assert not (tmp_path / "unused").exists()


#: The environment variables that decide popjit's thread pool (its layer, spins and size).
POOL_VARIABLES = ("NUMBA_THREADING_LAYER", "GOMP_SPINCOUNT", "OMP_THREAD_LIMIT", "OMP_DYNAMIC", "OMP_PROC_BIND",
                  "OMP_PLACES", "GOMP_CPU_AFFINITY", "POPJIT_NUM_THREADS")


def _pool_env(**chosen: str) -> dict[str, str]:
    """This environment without the variables that decide the pool, plus ``chosen``: so a developer's
    environment cannot decide what a child process's pool is."""
    return {**{k: v for k, v in os.environ.items() if k not in POOL_VARIABLES}, **chosen}


def _layer_and_cache_dir(env_layer: str | None, **more_env: str) -> tuple[str, str, str]:
    """In a fresh process: the threading layer a parallel codelet ran on, the machine-code directory and
    ``GOMP_SPINCOUNT``."""
    code = textwrap.dedent("""
        import os, numba, numpy as np
        import popjit.tensorflow as tf
        from popjit import config
        from popjit.kernels.jit import machine_code_dir
        with config.context(PARALLEL_MIN_ELEMENTS=1):
            tf.function(lambda x: tf.tanh(x) * 2.0, jit_compile=True)(np.ones(64, np.float32))
        print(numba.threading_layer(), machine_code_dir(), os.environ.get("GOMP_SPINCOUNT"))
    """)
    env = _pool_env(**({"NUMBA_THREADING_LAYER": env_layer} if env_layer else {}), **more_env)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    layer, path, spins = out.stdout.split()
    return layer, path, spins


def test__threading_layer__openmp_by_default_and_machine_code_cached_per_layer() -> None:
    default_layer, default_dir, spins = _layer_and_cache_dir(None)
    chosen_layer, chosen_dir, _ = _layer_and_cache_dir("workqueue")
    assert default_layer == "omp"
    assert spins in (str(OPENMP_SPINS_QUIET), str(OPENMP_SPINS_SHARED)), "not GNU's 300,000 spins"
    assert chosen_layer == "workqueue"
    assert default_dir != chosen_dir


#: The user's OpenMP settings popjit's pool loads without, each with a value that slowed it.
USER_OPENMP = {"OMP_DYNAMIC": "true", "OMP_PROC_BIND": "master", "OMP_PLACES": "{0}", "GOMP_CPU_AFFINITY": "0",
               "OMP_THREAD_LIMIT": "1"}

OPENMP_AS_LOADED = textwrap.dedent("""
    import ctypes, os, sys
    if sys.argv[1] == "loaded-before":
        ctypes.CDLL("libgomp.so.1")
    import numba
    from popjit.kernels.jit import threading_layer
    layer = threading_layer()
    gomp = ctypes.CDLL("libgomp.so.1")
    icvs = (gomp.omp_get_dynamic(), gomp.omp_get_proc_bind(), gomp.omp_get_num_places(), gomp.omp_get_thread_limit())
    print(layer, *icvs, *(os.environ.get(name, "-") for name in sys.argv[2:]))
""")


def _as_loaded(mode: str, **user: str) -> list[str]:
    env = _pool_env(**user)
    out = subprocess.run([sys.executable, "-c", OPENMP_AS_LOADED, mode, *user], capture_output=True, text=True,
                         env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.split()


def test__user_openmp_settings__popjit_s_pool_loads_without_them_and_they_stay_for_others() -> None:
    """Set for another program, ``OMP_DYNAMIC``, ``OMP_PROC_BIND``, ``OMP_PLACES``, ``GOMP_CPU_AFFINITY``
    and ``OMP_THREAD_LIMIT`` slowed popjit's OpenMP pool up to 8x: GNU OpenMP loads without them (no
    dynamic teams, no binding, no places, no thread limit), and the environment still holds them after."""
    layer, dynamic, bind, places, limit, *kept = _as_loaded("fresh", **USER_OPENMP)
    assert layer == "omp"
    assert (dynamic, bind, places) == ("0", "0", "0")
    assert int(limit) > 1
    assert kept == list(USER_OPENMP.values())


@pytest.mark.parametrize("name", sorted(USER_OPENMP))
def test__user_openmp_setting__in_a_runtime_loaded_before_popjit__makes_workqueue_the_layer(name: str) -> None:
    """Another library loaded GNU OpenMP first, so it read the user's setting: popjit's pool is workqueue's."""
    assert _as_loaded("loaded-before", **{name: USER_OPENMP[name]})[0] == "workqueue"
    assert _as_loaded("loaded-before")[0] == "omp", "loaded before, but with popjit's settings"


FORKED = textwrap.dedent("""
    import os, numba, numpy as np
    import popjit.tensorflow as tf
    from popjit import config
    x = np.linspace(-1, 1, 1 << 15).astype(np.float32)
    with config.context(PARALLEL_MIN_ELEMENTS=1):
        f = tf.function(lambda v: tf.tanh(v) * 2.0, jit_compile=True)
        parent = f(x).numpy()
        pid = os.fork()
        if pid == 0:
            os._exit(0 if np.array_equal(f(x).numpy(), parent) and numba.get_num_threads() == 1 else 3)
        status = os.waitpid(pid, 0)[1]
    print(numba.threading_layer(), numba.get_num_threads(), os.waitstatus_to_exitcode(status))
""")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test__a_process_forked_after_parallel_codelets_ran__runs_them_inline() -> None:
    # GNU OpenMP is not fork-safe: Numba terminates a child that starts its parent's pool
    out = subprocess.run([sys.executable, "-c", FORKED], capture_output=True, text=True, env=_pool_env(),
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    layer, parent_threads, child_exit = out.stdout.split()
    assert layer == "omp" and int(parent_threads) >= 1 and child_exit == "0", out.stderr[-2000:]


@pytest.mark.parametrize("layer", ["workqueue", "omp"])
def test__engines_run_from_two_threads_at_once(layer: str) -> None:
    # Numba's workqueue layer aborts the process on concurrent parallel launches: popjit serialises them
    code = textwrap.dedent("""
        import threading, numpy as np
        import popjit.tensorflow as tf
        from popjit import config
        with config.context(PARALLEL_MIN_ELEMENTS=1):
            f = tf.function(lambda x: tf.tanh(x) * 2.0, jit_compile=True)
            x = np.linspace(-1, 1, 4096).astype(np.float32)
            f(x)
            results = []
            def work():
                for _ in range(200):
                    results.append(np.allclose(f(x).numpy(), np.tanh(x) * 2, atol=1e-6))
            threads = [threading.Thread(target=work) for _ in range(4)]
            [t.start() for t in threads]
            [t.join() for t in threads]
        import numba
        print(numba.threading_layer(), len(results), all(results))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=_pool_env(NUMBA_THREADING_LAYER=layer), timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == [layer, "800", "True"]


def test__a_value_that_only_depends_on_outer_loops__is_computed_there():
    """Loop-invariant code motion in the codelet: a [m, 1] column's long chain is computed once per
    row, and only the broadcast add runs in the inner loop. (LLVM's loop vectorizer took minutes
    on the inner loop recomputing such a chain: the random-program fuzzer found it.)"""

    def f(x, col):
        c = tf.exp(tf.clip_by_value(tf.exp(tf.clip_by_value(col, -5.0, 5.0)), -5.0, 5.0))
        return tf.tanh(c + 0.5) + x

    x, col = np.random.rand(5, 4).astype(np.float32), np.random.rand(5, 1).astype(np.float32)
    exe = compile_graph(tf.function(f).get_concrete_function(x, col).graph, None)
    (codelet,) = exe.engine_source.codelets.values()
    lines = codelet.source.splitlines()
    inner = lines.index(next(ln for ln in lines if ln.strip().startswith("for i1 ")))
    assert sum("km.exp(" in ln for ln in lines[:inner]) == 2 and not any("km." in ln for ln in lines[inner:])
    (out,) = exe.run([x, col], {})
    want = np.tanh(np.exp(np.clip(np.exp(np.clip(col, -5, 5)), -5, 5)) + 0.5) + x
    np.testing.assert_allclose(out, want, rtol=1e-5)


def test__an_index_part_fixed_in_the_inner_loop__is_summed_outside_it():
    """The col2im of a 2x2 max-pool gradient reads ``ct[n, h//2, w//2, h%2, w%2, c]``: everything but
    the channel is fixed in the inner loop, so it is summed once per (n, h, w) and the inner loop
    reads ``v + i3`` (the load LLVM vectorises; summed inside the loop it ran 11 times slower)."""

    def f(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            total = tf.reduce_sum(tf.nn.max_pool2d(x, 2, 2, "VALID") ** 2)
        return tape.gradient(total, x)

    x = np.random.default_rng(0).normal(size=(2, 6, 4, 8)).astype(np.float32)
    exe = compile_graph(tf.function(f).get_concrete_function(x).graph, None)
    sources = [r.source for r in exe.engine_source.codelets.values() if "col2im" in r.func or "i3" in r.source]
    inner_loads = []
    for source in sources:
        lines = source.splitlines()
        starts = [k for k, ln in enumerate(lines) if ln.strip().startswith("for i3 ")]
        for k in starts:
            inner_loads += [ln for ln in lines[k + 1:] if "[np.uint64(" in ln and "//" not in ln]
            assert not any("//" in ln or "%" in ln for ln in lines[k + 1:] if ln.startswith(" " * 20)), source
    assert inner_loads and all(re.search(r"\[np\.uint64\((v\d+ \+ )?i3\)\]", ln) for ln in inner_loads), inner_loads
    (out,) = exe.run([x], {})
    windows = x.reshape(2, 3, 2, 2, 2, 8).transpose(0, 1, 3, 5, 2, 4).reshape(2, 3, 2, 8, 4)
    first = windows.argmax(-1)
    want = np.zeros_like(windows)
    np.put_along_axis(want, first[..., None], 2 * windows.max(-1, keepdims=True), -1)
    want = want.reshape(2, 3, 2, 8, 2, 2).transpose(0, 1, 4, 2, 5, 3).reshape(x.shape)
    np.testing.assert_allclose(out, want, rtol=1e-6)
