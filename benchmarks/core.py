"""What every benchmark workload shares: the frameworks, :class:`Problem` (a workload at given sizes
with its reference), :class:`Case` (a problem on one framework, ready to time) and the result check.

A framework that is not installed raises :class:`Unavailable` (a ``NotImplementedError``, which
asv reports as "skipped"); a result that differs from the reference raises :class:`WrongResult`.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import numpy as np

FRAMEWORKS = ("popjit", "popjit-infeed", "popjit-gemm", "numpy", "tensorflow", "jax")
PEERS = ("tensorflow", "jax")
BUILT_IN = ("popjit", "popjit-infeed", "popjit-gemm", "numpy")
LABELS = {"popjit": "popjit", "popjit-infeed": "popjit (infeed)", "popjit-gemm": "popjit (own gemm)", "numpy": "NumPy",
          "tensorflow": "TF-XLA",
          "jax": "JAX"}

class Unavailable(NotImplementedError):
    """The framework is not importable here (asv skips benchmarks whose setup raises this)."""


class WrongResult(AssertionError):
    """A framework computed values that differ from the NumPy reference."""


# -- frameworks --------------------------------------------------------------------------------------


def available(framework: str) -> bool:
    """Whether ``framework`` can be imported (without importing it)."""
    if framework in BUILT_IN:
        return True
    return importlib.util.find_spec(framework) is not None


@contextlib.contextmanager
def quiet_stderr() -> Iterator[None]:
    """Silence file descriptor 2 (native libraries' log lines) inside the block."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def import_peer(framework: str) -> ModuleType:
    """Import TensorFlow or JAX quietly on the CPU, or raise :class:`Unavailable`."""
    if framework in sys.modules:
        return sys.modules[framework]
    if not available(framework):
        raise Unavailable(f"{framework} is not installed")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    with quiet_stderr():
        return importlib.import_module(framework)


def popjit_strategy() -> tuple[ModuleType, Any]:
    """``popjit.tensorflow`` and an ``IPUStrategy`` on a configured one-IPU virtual system."""
    import popjit.tensorflow as tf
    from popjit import ipu
    from popjit.runtime import device

    if not device.is_configured():
        cfg = ipu.config.IPUConfig()
        cfg.auto_select_ipus = 1
        cfg.configure_ipu_system()
    return tf, ipu.ipu_strategy.IPUStrategy()


# -- problems and cases ------------------------------------------------------------------------------


@dataclass
class Problem:
    """A workload at given sizes: its inputs, the NumPy (float64) reference and the work per call."""

    kind: str
    label: str
    inputs: tuple[np.ndarray, ...]
    iters: int
    expected: np.ndarray
    work: float
    unit: str
    rtol: float
    atol: float
    scale: float = 1e9  # the rate is work / s / scale: 1e9 for GB/s and GFLOP/s, 1 for steps/s
    sizes: dict[str, int] = field(default_factory=dict)
    # a check of its own instead of the comparison with ``expected``: (problem, result, framework) -> error
    checker: Callable[[Problem, np.ndarray, str], float] | None = None


@dataclass
class Case:
    """A problem on one framework, ready to time: ``call()`` runs once and waits for the result."""

    problem: Problem
    framework: str
    call: Callable[[], Any]
    note: str = ""

    def result(self) -> np.ndarray:
        """One call's result on the host."""
        return np.asarray(self.call())

    def check(self) -> float:
        """Run once and compare with NumPy; returns the max abs error or raises :class:`WrongResult`."""
        return check_result(self.problem, self.result(), self.framework)

    def rate(self, seconds: float) -> float:
        """GB/s, GFLOP/s or steps/s for one call that took ``seconds``."""
        return self.problem.work / seconds / self.problem.scale


def check_result(problem: Problem, got: np.ndarray, framework: str = "") -> float:
    """The max abs error of ``got`` against the reference, or :class:`WrongResult` if not close."""
    got = np.asarray(got)
    if problem.checker is not None:
        return problem.checker(problem, got, framework)
    where = f"{framework} {problem.label}".strip()
    if got.shape != problem.expected.shape:
        raise WrongResult(f"{where}: shape {got.shape} != {problem.expected.shape}")
    err = float(np.max(np.abs(got.astype(np.float64) - problem.expected))) if got.size else 0.0
    if not np.allclose(got, problem.expected, rtol=problem.rtol, atol=problem.atol):
        raise WrongResult(f"{where}: result differs from NumPy (max abs error {err:.3g})")
    return err


