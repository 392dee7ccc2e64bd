"""Where a workload's time goes, codelet by codelet: ``perf`` samples of popjit's machine code.

    python -m benchmarks.codelet_profile keras --model 0      # K1, the Keras CNN
    python -m benchmarks.codelet_profile train --batch 256 --h1 1024 --h2 1024

The workload is built and called once (compiling it), then ``perf record`` samples this process while
it is called ``--calls`` more times. popjit's program libraries are machine code loaded at run time,
which perf cannot name by itself: before sampling, every function of every program library loaded so
far is written to ``/tmp/perf-<pid>.map`` (perf's map of JIT code: start, size, name), so the report
names the units of machine code (``popjit.unit.<key>``: a codelet or a library kernel, which programs share)
with the engine's kernels that call them (``k7_patches_max``), and the engine. The report is
perf's own, sorted by samples per symbol; ``--threads`` splits it by thread (the pool's workers). The
pool is pinned (:func:`pin_threads`), so perf's own process does not send the engine to one thread.

A developer's tool (Linux, ``perf`` on the PATH, ``kernel.perf_event_paranoid`` ≤ 2); it is not part of
the package and not run by the tests.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import llvmlite.binding as llvm

from benchmarks import workloads
from benchmarks.firstcall import SIZES

#: Each program library loaded since :func:`_record_loaded_libraries`: its serialized parts and itself.
_LIBRARIES: list[tuple[list[tuple], Any]] = []


def _record_loaded_libraries() -> None:
    """Keep every program library loaded from now on (its serialized parts and code libraries)."""
    from popjit.codegen import library

    original = library._loaded

    def loaded(serialized: list[tuple], *args: Any, **kwargs: Any) -> Any:
        result = original(serialized, *args, **kwargs)
        _LIBRARIES.append((serialized, result))
        return result

    library._loaded = loaded


def _defined_functions(part: tuple) -> list[str]:
    """The names of the functions a serialized part defines (from the bitcode it carries)."""
    _, _, (_, bitcode) = part
    module = llvm.parse_bitcode(bitcode)
    return [f.name for f in module.functions if not f.is_declaration]


def _invokes(nodes: list[Any]) -> Iterator[Any]:
    """Every call of an engine's statement tree (:class:`popjit.codegen.engine.Invoke`), loops' and branches' too."""
    from popjit.codegen.engine import Invoke

    for node in nodes:
        if isinstance(node, Invoke):
            yield node
        for part in vars(node).values():
            if isinstance(part, list):
                yield from _invokes(part)


def kernel_names() -> dict[str, list[str]]:
    """The kernels calling each unit of machine code (``popjit.unit.<key>``, a codelet or a library kernel
    that programs share) in the engines loaded in this process: the engine's names of the calls
    (``k7_patches_max``), in the order the engines make them."""
    import numpy as np

    from popjit.codegen import compile as engines
    from popjit.codegen import library
    from popjit.codegen.engine import storage_dtype

    names: dict[str, list[str]] = {}
    for engine in list(engines._ENGINES.values()):
        src = engine.src
        callers: dict[int, list[str]] = {}
        for call in _invokes(src.body):
            callers.setdefault(call.slot, []).append(call.comment.split(",")[0])
        types = engines.callee_types(src, [np.empty(0, storage_dtype(b.dtype)) for b in src.arguments])
        for slot, (fn, slot_types) in enumerate(zip(engines._all_callee_functions(src), types, strict=True)):
            if fn is None:
                continue  # a host function: not machine code of popjit's
            key = library.unit_key(fn, slot_types)
            if key is not None:
                names.setdefault(library._UNITS.symbol(key), []).extend(callers.get(slot, []))
    return names


def write_perf_map(path: Path) -> int:
    """Write perf's JIT map of every recorded program library's functions (its own parts' and its units'
    groups'), a unit named with the kernels calling it (:func:`kernel_names`); how many were written."""
    from popjit.codegen.library import _UNITS

    symbols: dict[int, str] = {}
    parts = [pair for serialized, library in _LIBRARIES for pair in zip(serialized, library._libraries)]
    # why every loaded group: kernel entry points are loaded as groups of their own, outside any
    # program library, and an unmapped function's samples went to the symbol before it
    parts += [(serialized, code) for _, _, serialized, code in _UNITS.loaded_groups()]
    for part, code in parts:
        for name in _defined_functions(part):
            address = code.get_pointer_to_function(name)
            if address:
                symbols[address] = name
    callers = kernel_names()
    starts = sorted(symbols)
    with path.open("w") as f:
        for start, end in zip(starts, [*starts[1:], starts[-1] + 4096] if starts else []):
            name = symbols[start]
            called = " ".join(dict.fromkeys(callers.get(name, [])))
            f.write(f"{start:x} {min(end - start, 1 << 20):x} {name}{f' ({called})' if called else ''}\n")
    return len(starts)


def _openblas_copy_in_a_file() -> None:
    """Make popjit's private OpenBLAS copy (``kernels.blas``) a temporary file, not an anonymous in-memory
    one: perf names a library's symbols from its file, and reads it when reporting. Call before popjit is
    imported."""
    if hasattr(os, "memfd_create"):
        del os.memfd_create


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.codelet_profile", description=__doc__.split("\n")[0])
    parser.add_argument("workload", choices=sorted(workloads.IMPLS))
    for size in SIZES:
        parser.add_argument(f"--{size}", type=int)
    parser.add_argument("--calls", type=int, default=3, help="calls sampled after the first (default 3)")
    parser.add_argument("--top", type=int, default=40, help="symbols shown (default 40)")
    parser.add_argument("--threads", action="store_true", help="split the report by thread")
    parser.add_argument("--sort", help="perf report's sort keys (default sym, pid,sym with --threads; dso,sym "
                                       "names each sample's library too)")
    return parser.parse_args(argv)


def pin_threads() -> None:
    """Pin popjit's pool to the cores this process may use (``POPJIT_NUM_THREADS``, unless set). why: the
    sampling ``perf`` is a runnable process of its own, and an unpinned engine that sees it beside itself
    runs on one thread while it does (:func:`popjit.kernels.jit.threads_for_host`): W2 on the own gemm
    was profiled with 71% of its samples on the main thread, against 53% pinned."""
    from popjit.kernels.threads import available_cores

    os.environ.setdefault("POPJIT_NUM_THREADS", str(available_cores()))


def main(argv: list[str] | None = None) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    pin_threads()
    _openblas_copy_in_a_file()
    _record_loaded_libraries()
    sizes = {k: v for k in SIZES if (v := getattr(args, k)) is not None}
    problem = workloads.problem(args.workload, **sizes)
    case = workloads.instantiate(problem, "popjit")
    case.result()
    count = write_perf_map(Path(f"/tmp/perf-{os.getpid()}.map"))
    with tempfile.TemporaryDirectory(prefix="popjit-perf-") as d:
        data = Path(d) / "perf.data"
        perf = subprocess.Popen(["perf", "record", "-q", "-F", "2000", "-o", str(data), "-p", str(os.getpid())])
        try:
            for _ in range(args.calls):
                case.call()
        finally:
            perf.send_signal(2)
            perf.wait()
        sort = args.sort or ("pid,sym" if args.threads else "sym")  # why pid: perf names each thread by its id there
        done = subprocess.run(["perf", "report", "-i", str(data), "--stdio", "--sort", sort, "--percent-limit",
                               "0.3"], capture_output=True, text=True)
    if done.returncode != 0:
        print(f"perf report failed: {done.stderr.strip()}", file=sys.stderr)
        return 1
    report = done.stdout
    print(f"{problem.label}: {args.calls} calls sampled; {count} functions of popjit's program libraries mapped")
    lines = [ln for ln in report.splitlines() if ln.strip() and not ln.startswith("#")]
    print("\n".join(lines[:args.top]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
