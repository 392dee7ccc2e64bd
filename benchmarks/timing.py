"""Best-of-N wall-clock timing with warm-up, and a description of the machine and the versions."""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Timing:
    """Seconds per call over ``repeat`` timed calls (after warm-up)."""

    best: float
    median: float
    repeat: int


@contextlib.contextmanager
def busy_process() -> Iterator[subprocess.Popen]:
    """One other process that keeps a core busy (a Python loop) for the block: the neighbour a shared
    host gives a program after it started."""
    busy = subprocess.Popen([sys.executable, "-c", "print('ready', flush=True)\nwhile True: pass"],
                            stdout=subprocess.PIPE, text=True)
    try:
        busy.stdout.readline()
        yield busy
    finally:
        busy.kill()
        busy.wait()


def best_of(call: Callable[[], Any], repeat: int = 7, warmup: int = 2, min_seconds: float = 0.0) -> Timing:
    """Time ``call`` (which must wait for its result) ``repeat`` times after ``warmup`` untimed calls.

    With ``min_seconds`` > 0 it keeps timing past ``repeat`` until that much time was spent, so
    very short calls get enough samples for a stable minimum.
    """
    for _ in range(warmup):
        call()
    samples: list[float] = []
    start = time.perf_counter()
    while len(samples) < repeat or time.perf_counter() - start < min_seconds:
        t0 = time.perf_counter()
        call()
        samples.append(time.perf_counter() - t0)
    return Timing(min(samples), statistics.median(samples), len(samples))


def wait_until_idle(limit: float = 0.5, window: float = 0.01, busy: float = 0.2) -> float:
    """Sleep until this process's other threads stop using the CPU: until a ``window`` of sleep in
    which the process used less than ``busy`` of that window's CPU time, or ``limit`` seconds.
    Returns the seconds waited.

    why: a thread pool that spins after its call slows the next call, whoever makes it. NumPy's
    OpenBLAS threads spin for about 0.1 s after each product: timed right after NumPy's, popjit's
    1024^3 matmul took 30 ms (median) against 17 ms when it ran alone, on a 2-core Zen 3. The window
    spans a few of the scheduler's ticks: Linux counts other threads' CPU time by the tick (4 ms here)."""
    start = time.perf_counter()
    while time.perf_counter() - start < limit:
        cpu, wall = time.process_time(), time.perf_counter()
        time.sleep(window)
        if time.process_time() - cpu < busy * (time.perf_counter() - wall):
            break
    return time.perf_counter() - start


def interleaved_best(calls: Mapping[str, Callable[[], Any]], repeat: int = 7, warmup: int = 1,
                     min_seconds: float = 0.0, block: int = 3) -> dict[str, Timing]:
    """Time several calls in blocks, round-robin, rotating the order each round (A B C, B C A, C A B,
    ...), so that each sees the same machine: each block is ``block`` timed calls of one framework,
    back to back, after one untimed call on an idle process (a single call has no other to wait for:
    its blocks just follow each other).

    On a busy machine a background process that comes and goes would otherwise favour whichever
    framework happened to run while it slept. And a framework whose thread pool keeps spinning after
    its call (OpenBLAS's, XLA's, OpenMP's) slows whichever call comes next, while a framework's own
    threads are quickest when its calls follow each other. So before each block the process's threads
    are let go idle (:func:`wait_until_idle`) and one call brings the framework's threads and caches up
    again: the block's calls run as they would with the framework alone in the process. Each call gets
    at least ``repeat`` samples and, in total, the rounds last at least ``min_seconds`` of timed calls
    per call.
    """
    for call in calls.values():
        for _ in range(warmup):
            call()
    samples: dict[str, list[float]] = {name: [] for name in calls}
    order = list(calls.items())
    timed = 0.0
    rounds = 0
    while min(map(len, samples.values()), default=repeat) < repeat or timed < min_seconds * len(calls):
        shift = rounds % max(1, len(order))
        for name, call in order[shift:] + order[:shift]:
            if len(order) > 1:
                wait_until_idle()
                call()
            for _ in range(block):
                t0 = time.perf_counter()
                call()
                samples[name].append(time.perf_counter() - t0)
                timed += samples[name][-1]
        rounds += 1
    return {name: Timing(min(s), statistics.median(s), len(s)) for name, s in samples.items()}


def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo on Linux, else ``platform``)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def version(dist: str) -> str | None:
    """The installed version of a distribution, or None."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def machine_summary() -> list[str]:
    """Lines describing the machine and the versions of everything measured."""
    names = ["popjit", "numpy", "numba", "llvmlite", "scipy", "tensorflow", "jax", "jaxlib"]
    versions = ", ".join(f"{n} {version(n)}" for n in names if version(n))
    return [
        f"machine: {cpu_model()}, {usable_cores()} usable cores ({os.cpu_count()} logical), "
        f"{platform.system()} {platform.release()}",
        f"python {platform.python_version()}; {versions}",
        *threads_summary(),
    ]


#: The environment variables that change how the BLAS and popjit's thread pool run.
THREAD_VARIABLES = ("OPENBLAS_CORETYPE", "POPJIT_OPENBLAS_CORETYPE", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                    "MKL_NUM_THREADS", "NUMBA_THREADING_LAYER", "NUMBA_NUM_THREADS", "POPJIT_NUM_THREADS",
                    "GOMP_SPINCOUNT")


def threads_summary() -> list[str]:
    """Lines describing the BLAS popjit's products call (and NumPy's kernels, when they differ) and
    popjit's thread pool, with the environment variables that change them (``GOMP_SPINCOUNT`` as popjit
    chose it when not set)."""
    from popjit.kernels.blas import blas_description
    from popjit.kernels.jit import threading_layer
    from popjit.kernels.threads import threads_to_use

    layer = threading_layer()  # why first: it sets GOMP_SPINCOUNT when the user did not
    chosen = ", ".join(f"{k}={os.environ[k]}" for k in THREAD_VARIABLES if k in os.environ) or "none set"
    return [f"blas: {blas_description()}",
            f"popjit pool: {layer}, {threads_to_use()} threads; environment: {chosen}",
            f"popjit matmuls: {matmul_summary()}"]


def matmul_summary() -> str:
    """Which kernel popjit's float matmuls run on (``POPJIT_MATMUL``), and its own gemm's block on this host."""
    from popjit import config
    from popjit.kernels.gemm_choice import MR, OWN_MIN_SIDE, panel_vectors, panel_width

    setting = config.get("MATMUL")
    own = f"own gemm {MR}x{panel_width(4)} float32 blocks"
    if setting == "rules":
        where = (f"products at least {OWN_MIN_SIDE} rows, columns and deep" if panel_vectors() == 4
                 else "none on this host (no AVX-512)")
        return f"POPJIT_MATMUL=rules: {own} for {where}, the BLAS for the rest"
    return {"blas": "POPJIT_MATMUL=blas: the BLAS for all", "popjit": f"POPJIT_MATMUL=popjit: {own} for all",
            "auto": f"POPJIT_MATMUL=auto: {own} where measured faster on this machine"}[setting]
