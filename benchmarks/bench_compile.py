"""asv benchmark (c): first-call compile time in fresh processes, fresh, cold and warm (and W1 training loop).

``setup_cache`` runs every framework and workload once (fresh, cold, then warm, see
:mod:`benchmarks.firstcall`); the ``track_*`` methods report its numbers in seconds.
"""

from __future__ import annotations

from typing import Any

from benchmarks import workloads
from benchmarks.firstcall import first_calls

COMPILERS = ["popjit", "tensorflow", "jax"]
WORKLOADS = ["chain", "matmul", "train", "keras", "tf1"]  # train: W1; keras: K1; tf1: T1 (popjit and TensorFlow)

Results = dict[tuple[str, str], dict[str, dict[str, Any]]]


class FirstCall:
    """Trace + compile + one run of (a), of the 1024³ matmul and of W1's training loop in a fresh process."""

    params = [COMPILERS, WORKLOADS]
    param_names = ["framework", "workload"]
    timeout = 1800

    def setup_cache(self) -> Results:
        results: Results = {}
        for fw in COMPILERS:
            if workloads.available(fw):
                for wl in (w for w in WORKLOADS if fw in workloads.IMPLS[w]):
                    results[(fw, wl)] = first_calls(fw, wl)
        return results

    def setup(self, results: Results, framework: str, workload: str) -> None:
        if (framework, workload) not in results:
            raise NotImplementedError(f"{framework} is not installed or does not implement {workload}")
        for state, result in results[(framework, workload)].items():
            if "error" in result:
                raise RuntimeError(f"{framework} {workload} ({state}): {result['error']}")

    def track_cold_compile(self, results: Results, framework: str, workload: str) -> float:
        return results[(framework, workload)]["cold"]["compile_s"]

    def track_fresh_compile(self, results: Results, framework: str, workload: str) -> float:
        return results[(framework, workload)]["fresh"]["compile_s"]

    def track_warm_compile(self, results: Results, framework: str, workload: str) -> float:
        return results[(framework, workload)]["warm"]["compile_s"]

    def track_cold_first_call(self, results: Results, framework: str, workload: str) -> float:
        return results[(framework, workload)]["cold"]["first_call_s"]

    track_cold_compile.unit = "seconds"
    track_fresh_compile.unit = "seconds"
    track_warm_compile.unit = "seconds"
    track_cold_first_call.unit = "seconds"
