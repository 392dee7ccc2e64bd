"""(c) First-call (compile) time, measured in fresh processes (also (d)'s, for the W1 training loop).

The parent (:func:`first_calls`) starts a child Python for one framework and workload with one new
temporary cache directory: *fresh* (empty, as on a new machine), *cold* (popjit: its kernel library,
compiled once per machine, cached and the program's own code not, as for a new program; the other
frameworks have no such library and their cold is their fresh run) and *warm* (everything cached,
as when a script runs again). Each framework's persistent cache is pointed there:

    popjit       POPJIT_CACHE_DIR and NUMBA_CACHE_DIR (so no machine code from earlier runs is reused)
    tensorflow   TF_XLA_FLAGS=--tf_xla_persistent_cache_directory=...
    jax          JAX_COMPILATION_CACHE_DIR (with the size and compile-time thresholds at 0)

The child (:func:`child_main`) imports the framework (for popjit: popjit and Numba) and prepares the
inputs (both untimed), then
times building the function plus its first synchronised call (trace + compile + one run), checks
the result against NumPy, times a few more calls, and prints one JSON line. ``compile`` is first
call minus the best steady call; ``peak_rss_mb`` the process's peak resident memory (imports,
compile and the calls).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

COMPILERS = ("popjit", "tensorflow", "jax")
SIZES = ("n", "iters", "m", "k", "batch", "h1", "h2", "steps", "model", "size", "cin", "cout")  # the workloads' sizes
ROOT = Path(__file__).resolve().parent.parent
# Run by ``python -c`` from a temporary directory: appending ROOT (rather than running from it) keeps an
# installed popjit (asv's environment) ahead of the source tree, while ``benchmarks`` still resolves.
BOOTSTRAP = ("import sys; sys.path.append({root!r}); from benchmarks.firstcall import child_main; "
             "sys.exit(child_main(sys.argv[1:]))")


def cache_env(framework: str, cache_dir: Path) -> dict[str, str]:
    """Environment variables that put ``framework``'s persistent compile cache under ``cache_dir``."""
    if framework == "popjit":
        return {"POPJIT_CACHE_DIR": str(cache_dir / "popjit"), "NUMBA_CACHE_DIR": str(cache_dir / "numba")}
    if framework == "tensorflow":
        flags = os.environ.get("TF_XLA_FLAGS", "")
        return {"TF_XLA_FLAGS": f"{flags} --tf_xla_persistent_cache_directory={cache_dir / 'tf'}".strip(),
                "TF_CPP_MIN_LOG_LEVEL": "3"}
    if framework == "jax":
        return {"JAX_COMPILATION_CACHE_DIR": str(cache_dir / "jax"), "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
                "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1", "JAX_PLATFORMS": "cpu"}
    raise ValueError(f"no compile cache for {framework!r}")


def size_args(sizes: dict[str, int]) -> list[str]:
    """``{'n': 4}`` → ``['--n', '4']``."""
    return [a for k, v in sizes.items() for a in (f"--{k}", str(v))]


def first_call(framework: str, workload: str, cache_dir: Path, sizes: dict[str, int] | None = None,
               timeout: float = 600.0) -> dict[str, Any]:
    """Run one child process; its JSON result, or ``{'error': ...}`` if it failed."""
    for sub in ("popjit", "numba", "tf", "jax"):
        (cache_dir / sub).mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **cache_env(framework, cache_dir)}
    cmd = [sys.executable, "-c", BOOTSTRAP.format(root=str(ROOT)), framework, workload, *size_args(sizes or {})]
    try:
        proc = subprocess.run(cmd, env=env, cwd=cache_dir, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"exit {proc.returncode}: {tail}"}
    return json.loads(lines[-1])


def program_files(cache_dir: Path) -> list[Path]:
    """popjit's cached files of a program in ``cache_dir`` (its compiled executables, generated modules,
    program libraries and the units of its codelets), leaving what is made once per machine: the
    kernel library's machine code and the measured matmul choices."""
    root = cache_dir / "popjit"
    return [*root.glob("gen-*/popjit_gen"), *root.glob("gen-*/programs"), *root.glob("gen-*/executables"),
            *root.glob("gen-*/units")]


#: The first-call states measured: ``fresh`` (an empty cache: a new machine), ``cold`` (for popjit the
#: kernel library cached, the program not: a new program; for the others the same as fresh), ``warm``
#: (everything cached: the same program again) and, for popjit and a workload with a batch size,
#: ``resized`` (the workload at twice its batch after the others: a new program, whose codelets the
#: first one compiled; XLA's persistent cache keys a program by its shapes, so this is its cold run).
STATES = ("fresh", "cold", "warm", "resized")


def first_calls(framework: str, workload: str, sizes: dict[str, int] | None = None,
                timeout: float = 600.0, resize: bool = True) -> dict[str, dict[str, Any]]:
    """First-call results in each of :data:`STATES` that applies (``resized`` only with ``resize``), in
    fresh processes sharing one cache directory."""
    with tempfile.TemporaryDirectory(prefix=f"popjit-bench-{framework}-") as d:
        fresh = first_call(framework, workload, Path(d), sizes, timeout)
        cold = fresh
        if framework == "popjit" and "error" not in fresh:
            for path in program_files(Path(d)):
                shutil.rmtree(path)
            cold = first_call(framework, workload, Path(d), sizes, timeout)
        warm = first_call(framework, workload, Path(d), sizes, timeout)
        results = {"fresh": fresh, "cold": cold, "warm": warm}
        resized = resized_sizes(workload, sizes or {}) if resize and framework == "popjit" else None
        if resized is not None:
            results["resized"] = first_call(framework, workload, Path(d), resized, timeout)
    return results


def resized_sizes(workload: str, sizes: dict[str, int]) -> dict[str, int] | None:
    """``sizes`` of ``workload`` with its batch doubled (None for a workload without a batch size)."""
    from benchmarks import workloads

    full = workloads.problem(workload, **sizes).sizes
    return {**full, "batch": 2 * full["batch"]} if "batch" in full else None


def peak_rss_mib() -> float:
    """This process's peak resident memory in MiB: ``VmHWM`` on Linux. why not ``ru_maxrss``: Linux
    carries it over from the parent through fork and exec, so a child of a large runner reports the
    runner's peak."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


# -- the child --------------------------------------------------------------------------------------


def _parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="benchmarks.firstcall", description="Time one first call in a fresh process.")
    p.add_argument("framework", choices=COMPILERS)
    p.add_argument("workload", choices=["chain", "matmul", "train", "keras", "tf1"])
    for size in SIZES:
        p.add_argument(f"--{size}", type=int)
    p.add_argument("--repeat", type=int, default=3, help="steady-state calls timed after the first")
    return p.parse_args(argv)


def _import_framework(framework: str) -> None:
    from benchmarks import workloads

    if framework == "popjit":
        import numba  # noqa: F401  (popjit imports it lazily; its import is import time, not compile time)

        import popjit.tensorflow  # noqa: F401
    else:
        workloads.import_peer(framework)


def child_main(argv: list[str]) -> int:
    """Measure one first call in this (fresh) process and print the result as one JSON line."""
    args = _parse(argv)
    t0 = time.perf_counter()
    _import_framework(args.framework)
    import_s = time.perf_counter() - t0

    from benchmarks import workloads
    from benchmarks.timing import best_of

    sizes = {k: v for k in SIZES if (v := getattr(args, k)) is not None}
    problem = workloads.problem(args.workload, **sizes)
    t0 = time.perf_counter()
    case = workloads.instantiate(problem, args.framework)
    out = case.result()
    first = time.perf_counter() - t0
    error = workloads.check_result(problem, out, args.framework)
    steady = best_of(case.call, repeat=args.repeat, warmup=0).best
    peak_rss_mb = peak_rss_mib()
    print(json.dumps({"framework": args.framework, "workload": problem.label, "import_s": import_s,
                      "first_call_s": first, "steady_s": steady, "compile_s": max(first - steady, 0.0),
                      "max_error": error, "note": case.note, "peak_rss_mb": peak_rss_mb}))
    return 0


if __name__ == "__main__":
    raise SystemExit(child_main(sys.argv[1:]))
