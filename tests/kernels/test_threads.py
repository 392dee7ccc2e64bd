"""The threads popjit runs on follow the cores the process may use (affinity, cgroup quota)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from popjit.kernels import blas
from popjit.kernels.jit import OPENMP_SPINS_QUIET, OPENMP_SPINS_SHARED
from popjit.kernels.threads import ContentionWatch, cgroup_cpu_limit, cores_to_spare, runnable_elsewhere


def test__cgroup_v2_quota__in_cores(tmp_path: Path):
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert cgroup_cpu_limit(tmp_path) == 1.5
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert cgroup_cpu_limit(tmp_path) is None


def test__cgroup_v1_quota__in_cores(tmp_path: Path):
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("300000\n")
    assert cgroup_cpu_limit(tmp_path) == 3.0
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    assert cgroup_cpu_limit(tmp_path) is None


def test__no_cgroup_files__no_limit(tmp_path: Path):
    assert cgroup_cpu_limit(tmp_path) is None


def _fake_proc(root: Path, runnable: int, own_states: str) -> Path:
    """A ``/proc`` with ``runnable`` runnable threads machine-wide, this process's threads in ``own_states``."""
    (root / "self" / "task").mkdir(parents=True)
    (root / "loadavg").write_text(f"0.52 0.40 0.31 {runnable}/181 4242\n")
    for tid, state in enumerate(own_states, 100):
        (root / "self" / "task" / str(tid)).mkdir()
        (root / "self" / "task" / str(tid) / "stat").write_text(f"{tid} (a (b) c) {state} 1 2 3\n")
    return root


def test__runnable_elsewhere__the_machine_count_less_this_process_running_threads(tmp_path: Path):
    assert runnable_elsewhere(samples=3, interval=0, proc=_fake_proc(tmp_path / "a", 5, "RSR")) == 3
    assert runnable_elsewhere(samples=3, interval=0, proc=_fake_proc(tmp_path / "b", 1, "SS")) == 0, \
        "the reading thread itself runs, whatever its state said"
    assert runnable_elsewhere(samples=3, interval=0, proc=tmp_path / "missing") is None


def test__cores_to_spare__only_when_every_pool_thread_has_a_core_of_its_own():
    cores = os.cpu_count() or 1
    assert cores_to_spare(cores, 0)
    assert not cores_to_spare(cores, 1)
    assert not cores_to_spare(1, cores)
    assert not cores_to_spare(1, None), "unknown load: the pool spins briefly"


@contextlib.contextmanager
def busy_processes(count: int) -> Iterator[None]:
    """``count`` real processes that keep a core busy each, running when the block starts."""
    busy = [subprocess.Popen([sys.executable, "-c", "print('ready', flush=True)\nwhile True: pass"],
                             stdout=subprocess.PIPE, text=True) for _ in range(count)]
    try:
        assert all(p.stdout.readline().strip() == "ready" for p in busy)
        yield
    finally:
        for p in busy:
            p.kill()
            p.wait()


@pytest.mark.slow
def test__busy_processes__counted_and_a_pinned_openmp_pool_spins_briefly_beside_them():
    """Real busy processes on every core: they are counted as runnable, and a popjit process started beside
    them splits every large product over its pool (OpenBLAS's threads, however briefly they spin, were
    slower there). With the pool's count pinned GNU OpenMP's idle workers get the short spin (a long one
    took the cores the busy processes need); unpinned the long one, as engines leave the pool while
    other processes need the cores."""
    cores = os.cpu_count() or 1
    with busy_processes(cores):
        assert runnable_elsewhere() >= cores
        unset = ("GOMP_SPINCOUNT", "NUMBA_THREADING_LAYER", "OPENBLAS_CORETYPE", "POPJIT_OPENBLAS_CORETYPE",
                 "POPJIT_NUM_THREADS")
        env = {k: v for k, v in os.environ.items() if k not in unset}
        code = ("import os\nfrom popjit.kernels import blas\n"
                "print(os.environ['GOMP_SPINCOUNT'], blas.PLANNED_THREADS_FROM)")
        for pinned, spins in ((str(cores), OPENMP_SPINS_SHARED), ("", OPENMP_SPINS_QUIET)):
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                                 env={**env, "POPJIT_NUM_THREADS": pinned})
            assert out.returncode == 0, out.stderr[-2000:]
            assert out.stdout.split()[-2:] == [str(spins), str(blas.NEVER)], \
                f"pinned to {pinned or 'nothing'}: every product it compiles is split"


def test__contention_watch__looks_again_only_once_its_last_look_is_stale():
    looks = []

    def look() -> float:
        looks.append(1)
        return readings[len(looks) - 1]

    readings = [0, 1, 0]
    watch = ContentionWatch(every=0.5, look=look)
    cores = os.cpu_count() or 1
    assert not watch.contended(cores, now=10.0) and len(looks) == 1
    assert not watch.contended(cores, now=10.4), "the last look is fresh: reused"
    assert len(looks) == 1
    assert watch.contended(cores, now=10.5) and watch.others == 1, "stale: looked again, and one needs a core"
    assert watch.contended(cores, now=10.9) and len(looks) == 2
    assert not watch.contended(cores, now=11.0) and len(looks) == 3, "free again at the next look"


def test__contention_watch__unknown_load_is_never_contended():
    assert not ContentionWatch(look=lambda: None).contended(os.cpu_count() or 1)


def test__contention_watch__counts_other_processes_runnable_threads_against_the_cores(tmp_path: Path):
    proc = _fake_proc(tmp_path, 4, "R")
    watch = ContentionWatch(look=lambda: runnable_elsewhere(samples=3, interval=0, proc=proc))
    assert watch.contended(1, now=0.0) == ((os.cpu_count() or 1) < 4), "three others and one thread need four cores"
    assert watch.others == 3


CONTENDED_RUN = textwrap.dedent("""
    import os, threading
    import numpy as np
    import popjit.tensorflow as tf

    def pool_cpu_ticks():
        total = 0
        for task in os.listdir("/proc/self/task"):
            if int(task) != threading.get_native_id():
                fields = open(f"/proc/self/task/{task}/stat").read().rsplit(")", 1)[1].split()
                total += int(fields[11]) + int(fields[12])  # utime, stime
        return total

    rng = np.random.default_rng(0)
    x = rng.standard_normal((256, 784)).astype(np.float32)
    w = tf.Variable(rng.standard_normal((784, 512)).astype(np.float32) * 0.01)

    @tf.function(jit_compile=True)
    def steps(x):
        for _ in tf.range(20):
            w.assign_sub(0.01 * tf.matmul(x, tf.nn.relu(tf.matmul(x, w)), transpose_a=True) / 256.0)
        return tf.reduce_sum(w)

    steps(x)
    before = pool_cpu_ticks()
    for _ in range(10):
        steps(x)
    print(pool_cpu_ticks() - before, w.numpy().tobytes().hex())
""")


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="reads threads' CPU times from Linux's /proc")
def test__beside_busy_processes__engines_run_on_one_thread_with_the_same_bits_unless_the_count_is_pinned(
        tmp_path: Path):
    """Busy processes on every core, started before the program: its engines run on the calling thread
    (the pool's workers use no CPU, and the log says so), and the variables come out the same bits as
    with the count pinned by ``POPJIT_NUM_THREADS``, which runs them on the pool whatever the load."""
    cores = len(os.sched_getaffinity(0))
    if cores < 2 or cores > 8:
        pytest.skip("needs a pool of two threads or more and a core count busy processes can fill")
    env = {k: v for k, v in os.environ.items() if k not in ("POPJIT_NUM_THREADS", "NUMBA_NUM_THREADS")}
    env.update(POPJIT_CACHE_DIR=str(tmp_path / "popjit"), NUMBA_CACHE_DIR=str(tmp_path / "numba"), POPJIT_LOG="info")

    def run(**extra: str) -> tuple[int, str, str]:
        out = subprocess.run([sys.executable, "-c", CONTENDED_RUN], capture_output=True, text=True, timeout=600,
                             env={**env, **extra})
        assert out.returncode == 0, out.stderr[-3000:]
        ticks, bits = out.stdout.split()
        return int(ticks), bits, out.stderr

    with busy_processes(cores):
        adapted_ticks, adapted, log = run()
        pinned_ticks, pinned, pinned_log = run(POPJIT_NUM_THREADS=str(cores))
    assert "engines run on one thread while they do" in log
    assert adapted_ticks == 0, "the pool's workers ran nothing"
    assert "engines run on one thread" not in pinned_log
    assert pinned_ticks > 0, "pinned, the products were split over the pool"
    assert adapted == pinned
@pytest.mark.skipif(blas._LIB is None, reason="NumPy is not built on its bundled OpenBLAS")
def test__blas_threads__set_for_the_block_then_restored():
    get = blas._LIB.scipy_openblas_get_num_threads64_
    before = get()
    with blas.blas_threads(before + 2):
        assert get() == before + 2
    assert get() == before


@pytest.mark.skipif(blas._LIB is None, reason="NumPy is not built on its bundled OpenBLAS")
def test__blas_threads__blocks_on_two_threads_restore_the_count_when_the_last_leaves():
    get = blas._LIB.scipy_openblas_get_num_threads64_
    before = get()
    entered, leave = threading.Event(), threading.Event()

    def replica() -> None:  # an engine on another thread, as a replica's runs
        with blas.blas_threads(1):
            entered.set()
            leave.wait(60)

    other = threading.Thread(target=replica)
    other.start()
    assert entered.wait(60)
    with blas.blas_threads(1):
        assert get() == 1
    assert get() == 1, "the other block still runs: its count stays"
    leave.set()
    other.join()
    assert get() == before, "the last block out restores the count from before the first"


BLAS_COUNT_CHANGES = textwrap.dedent("""
    import ctypes, sys
    import llvmlite.binding as llvm, llvmlite.ir as ir
    import numpy as np
    from popjit.kernels import blas

    # every call of OpenBLAS's thread-count setter that compiled code makes, counted on the way
    calls = ctypes.c_int64(0)
    real = ctypes.cast(blas._LIB.openblas_set_num_threads_local, ctypes.c_void_p).value
    i32, i64 = ir.IntType(32), ir.IntType(64)
    module = ir.Module()
    module.triple = llvm.get_process_triple()
    signature = ir.FunctionType(i32, [i32])
    counting = ir.Function(module, signature, "counting_set_threads")
    b = ir.IRBuilder(counting.append_basic_block())
    b.atomic_rmw("add", b.inttoptr(ir.Constant(i64, ctypes.addressof(calls)), i64.as_pointer()), ir.Constant(i64, 1),
                 "seq_cst")
    b.ret(b.call(b.inttoptr(ir.Constant(i64, real), signature.as_pointer()), counting.args))
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    machine = llvm.Target.from_default_triple().create_target_machine()
    jit = llvm.create_mcjit_compiler(llvm.parse_assembly(str(module)), machine)
    jit.finalize_object()
    llvm.add_symbol("popjit_blas_threads_local", jit.get_function_address("counting_set_threads"))

    import popjit.tensorflow as tf
    rng = np.random.default_rng(0)
    a, b_, c, d = (rng.standard_normal(s).astype(np.float32) for s in ((256, 784), (784, 256), (8, 16), (16, 8)))
    before = blas._LIB.scipy_openblas_get_num_threads64_()
    f = tf.function(lambda a, b, c, d: (tf.matmul(a, b), tf.matmul(c, d)), jit_compile=True)
    for _ in range(3):
        big, small = f(a, b_, c, d)
    np.testing.assert_allclose(big.numpy(), a @ b_, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(small.numpy(), c @ d, rtol=1e-5, atol=1e-5)
    assert blas._LIB.scipy_openblas_get_num_threads64_() == before
    print(calls.value, blas.POOL_SPINS)
""")


@pytest.mark.slow
@pytest.mark.skipif(blas._LIB is None, reason="NumPy is not built on its bundled OpenBLAS")
@pytest.mark.parametrize("layer", ["omp", "workqueue"])
def test__compiled_code_changes_the_blas_count_only_where_no_other_thread_runs(layer: str, tmp_path: Path):
    # why: the count is the process's; pieces of a split product setting it on several threads at once
    # raced, and some pieces ran on OpenBLAS's threads
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_THREADING_LAYER"}
    proc = subprocess.run([sys.executable, "-c", BLAS_COUNT_CHANGES], capture_output=True, text=True, timeout=600,
                          env={**env, "POPJIT_CACHE_DIR": str(tmp_path / "popjit"), "POPJIT_MATMUL": "blas",
                               "NUMBA_CACHE_DIR": str(tmp_path / "numba"), "NUMBA_THREADING_LAYER": layer})
    assert proc.returncode == 0, proc.stderr[-3000:]
    calls, spins = proc.stdout.split()
    if spins == "True":  # beside OpenMP's spinning pool the 256x784x256 product is split over it
        assert int(calls) == 0, "with the count at 1 for the engine, no codelet changes it"
    else:  # beside workqueue it runs on OpenBLAS's threads: the engine's thread raises the count and restores it
        assert int(calls) == 3 * 2


THREADS = textwrap.dedent("""
    import os, sys
    if sys.argv[1] == "one-core":
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    import numba, numpy as np
    import popjit.tensorflow as tf
    from popjit import config
    with config.context(PARALLEL_MIN_ELEMENTS=1):
        out = tf.function(lambda x: tf.tanh(x) * 2.0, jit_compile=True)(np.ones(64, np.float32)).numpy()
    print(numba.get_num_threads(), float(out.sum()))
""")


def _threads(mode: str, **env: str) -> int:
    environment = {k: v for k, v in os.environ.items() if k not in ("NUMBA_NUM_THREADS", "POPJIT_NUM_THREADS")}
    proc = subprocess.run([sys.executable, "-c", THREADS, mode], capture_output=True, text=True, timeout=300,
                          env={**environment, **env})
    assert proc.returncode == 0, proc.stderr[-2000:]
    count, total = proc.stdout.split()
    assert float(total) == pytest.approx(64 * 2 * 0.7615942, rel=1e-5)
    return int(count)


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs a process that may run on two cores or more")
def test__parallel_pool__sized_by_the_cores_the_process_may_use():
    assert _threads("all-cores") == len(os.sched_getaffinity(0))
    assert _threads("one-core") == 1, "an affinity of one core: one thread"
    assert _threads("all-cores", POPJIT_NUM_THREADS="1") == 1, "POPJIT_NUM_THREADS sets it"
    assert _threads("all-cores", NUMBA_NUM_THREADS="1") == 1, "Numba's own variable still wins"
