"""The benchmark workloads, defined once for asv and for ``python -m benchmarks``.

A :class:`Problem` is a workload at given sizes: inputs, the NumPy (float64) reference, the work per
call (bytes or FLOPs). :func:`instantiate` makes it a :class:`Case` for one framework: a
synchronised call whose result :meth:`Case.check` compares with the reference.
popjit and TensorFlow run the *same* user code (``make_chain(tf, ...)``, ``make_matmul(tf)``) with
``tf`` bound to ``popjit.tensorflow`` or to ``tensorflow``; JAX gets the idiomatic equivalent
(``jax.jit`` + ``lax.fori_loop``). popjit runs as an IPU user would: on ``/device:IPU:0`` of a
configured virtual IPU system, through ``IPUStrategy.run``.

A framework that is not installed raises :class:`Unavailable` (a ``NotImplementedError``, which
asv reports as "skipped"); a result that differs from NumPy raises :class:`WrongResult`.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

FRAMEWORKS = ("popjit", "numpy", "tensorflow", "jax")
PEERS = ("tensorflow", "jax")
LABELS = {"popjit": "popjit", "numpy": "NumPy", "tensorflow": "TF-XLA", "jax": "JAX"}

CHAIN_N = 1 << 22
CHAIN_ITERS = 20
CHAIN_A = 0.7
CHAIN_B = 0.1
MATMUL_SHAPES: dict[str, tuple[int, int, int]] = {"1024x1024x1024": (1024, 1024, 1024), "256x784x256": (256, 784, 256)}


class Unavailable(NotImplementedError):
    """The framework is not importable here (asv skips benchmarks whose setup raises this)."""


class WrongResult(AssertionError):
    """A framework computed values that differ from the NumPy reference."""


# -- frameworks --------------------------------------------------------------------------------------


def available(framework: str) -> bool:
    """Whether ``framework`` can be imported (without importing it)."""
    if framework in ("popjit", "numpy"):
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
        """GB/s or GFLOP/s for one call that took ``seconds``."""
        return self.problem.work / seconds / 1e9


def check_result(problem: Problem, got: np.ndarray, framework: str = "") -> float:
    """The max abs error of ``got`` against the reference, or :class:`WrongResult` if not close."""
    got = np.asarray(got)
    where = f"{framework} {problem.label}".strip()
    if got.shape != problem.expected.shape:
        raise WrongResult(f"{where}: shape {got.shape} != {problem.expected.shape}")
    err = float(np.max(np.abs(got.astype(np.float64) - problem.expected))) if got.size else 0.0
    if not np.allclose(got, problem.expected, rtol=problem.rtol, atol=problem.atol):
        raise WrongResult(f"{where}: result differs from NumPy (max abs error {err:.3g})")
    return err


def problem(workload: str, **sizes: int) -> Problem:
    """The :class:`Problem` for ``workload`` (``chain`` or ``matmul``) at ``sizes``."""
    if workload == "chain":
        return chain_problem(**sizes)
    if workload == "matmul":
        return matmul_problem(**sizes)
    raise ValueError(f"unknown workload {workload!r}; expected 'chain' or 'matmul'")


def problem_label(workload: str, **sizes: int) -> str:
    """The label of ``problem(workload, **sizes)`` without building it."""
    if workload == "chain":
        return f"chain {size_label(sizes.get('n', CHAIN_N))} f32 x{sizes.get('iters', CHAIN_ITERS)}"
    if workload == "matmul":
        return f"matmul {sizes.get('m', 1024)}x{sizes.get('k', 1024)}x{sizes.get('n', 1024)} f32"
    raise ValueError(f"unknown workload {workload!r}; expected 'chain' or 'matmul'")


def instantiate(p: Problem, framework: str) -> Case:
    """Build ``framework``'s implementation of ``p`` (its tracing and compiling happen on the first call)."""
    impls = {"chain": CHAIN_IMPLS, "matmul": MATMUL_IMPLS}[p.kind]
    if framework not in impls:
        raise ValueError(f"unknown framework {framework!r}; expected one of {FRAMEWORKS}")
    call, note = impls[framework](p)
    return Case(p, framework, call, note)


def build(workload: str, framework: str, **sizes: int) -> Case:
    """``instantiate(problem(workload, **sizes), framework)``."""
    return instantiate(problem(workload, **sizes), framework)


# -- (a) the element-wise chain ---------------------------------------------------------------------


def chain_input(n: int, seed: int = 0) -> np.ndarray:
    """``n`` float32 values in [-2, 2)."""
    return np.random.default_rng(seed).uniform(-2.0, 2.0, n).astype(np.float32)


def chain_numpy(x: np.ndarray, iters: int, a: float = CHAIN_A, b: float = CHAIN_B) -> np.ndarray:
    """``iters`` times ``x = tanh(a*x + b) * sigmoid(x) - 0.5*x`` in ``x``'s dtype."""
    dt = x.dtype.type
    a_, b_, half, one = dt(a), dt(b), dt(0.5), dt(1.0)
    for _ in range(iters):
        x = np.tanh(a_ * x + b_) * (one / (one + np.exp(-x))) - half * x
    return x


def chain_bytes(n: int, iters: int) -> float:
    """Bytes moved by the chain: one float32 read and one write per element per iteration."""
    return 2.0 * 4 * n * iters


def size_label(n: int) -> str:
    """``2^22`` for powers of two, else the number."""
    return f"2^{n.bit_length() - 1}" if n > 0 and n & (n - 1) == 0 else str(n)


def chain_problem(n: int = CHAIN_N, iters: int = CHAIN_ITERS) -> Problem:
    """(a) the chain over ``n`` float32, ``iters`` iterations in one call."""
    x = chain_input(n)
    return Problem("chain", problem_label("chain", n=n, iters=iters), (x,), iters,
                   chain_numpy(x.astype(np.float64), iters), chain_bytes(n, iters), "GB/s", rtol=1e-4, atol=1e-5)


def make_chain(tf: ModuleType, iters: int) -> Any:
    """The chain as IPU TensorFlow user code: ``iters`` steps in one on-device ``tf.range`` loop."""

    @tf.function(jit_compile=True)
    def chain(x, a, b):
        for _ in tf.range(iters):
            x = tf.tanh(a * x + b) * tf.sigmoid(x) - 0.5 * x
        return x

    return chain


def make_chain_jax(iters: int) -> Any:
    """The chain in JAX: ``jax.jit`` over a ``lax.fori_loop``."""
    jax = import_peer("jax")
    jnp, lax = jax.numpy, jax.lax

    @jax.jit
    def chain(x, a, b):
        def body(_, x):
            return jnp.tanh(a * x + b) * jax.nn.sigmoid(x) - 0.5 * x

        return lax.fori_loop(0, iters, body, x)

    return chain


def traces_to_one_loop(fn: Any, *args: Any) -> bool:
    """Whether a popjit ``tf.function`` traces to a graph with exactly one ``while`` loop."""
    graph = fn.get_concrete_function(*args).graph
    return sum(node.op == "while" for node in graph.walk()) == 1


def _chain_popjit(p: Problem) -> tuple[Callable[[], Any], str]:
    tf, strategy = popjit_strategy()
    fn = make_chain(tf, p.iters)
    args = (tf.constant(p.inputs[0]), tf.constant(CHAIN_A), tf.constant(CHAIN_B))
    return lambda: strategy.run(fn, args=args).numpy(), "IPUStrategy.run, tf.range"


def _chain_numpy(p: Problem) -> tuple[Callable[[], Any], str]:
    return lambda: chain_numpy(p.inputs[0], p.iters), "float32, a temporary per op"


def _chain_tf(p: Problem) -> tuple[Callable[[], Any], str]:
    tf = import_peer("tensorflow")
    fn = make_chain(tf, p.iters)
    args = (tf.constant(p.inputs[0]), tf.constant(CHAIN_A), tf.constant(CHAIN_B))
    return lambda: fn(*args).numpy(), "tf.function(jit_compile=True), tf.range"


def _chain_jax(p: Problem) -> tuple[Callable[[], Any], str]:
    jax = import_peer("jax")
    fn = make_chain_jax(p.iters)
    args = (jax.device_put(p.inputs[0]), np.float32(CHAIN_A), np.float32(CHAIN_B))
    return lambda: fn(*args).block_until_ready(), "jax.jit, lax.fori_loop"


CHAIN_IMPLS: dict[str, Callable[[Problem], tuple[Callable[[], Any], str]]] = {
    "popjit": _chain_popjit, "numpy": _chain_numpy, "tensorflow": _chain_tf, "jax": _chain_jax,
}


# -- (b) matmul ---------------------------------------------------------------------------------------


def matmul_inputs(m: int, k: int, n: int, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """float32 ``[m, k]`` and ``[k, n]`` operands in [-1, 1)."""
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, (m, k)).astype(np.float32), rng.uniform(-1, 1, (k, n)).astype(np.float32)


def matmul_flops(m: int, k: int, n: int) -> float:
    """Multiply-adds counted as two FLOPs."""
    return 2.0 * m * k * n


def matmul_problem(m: int = 1024, k: int = 1024, n: int = 1024) -> Problem:
    """(b) float32 ``[m, k] @ [k, n]``."""
    a, b = matmul_inputs(m, k, n)
    expected = a.astype(np.float64) @ b.astype(np.float64)
    # float32 sums of k products: allow 1e-5 of the largest result (a wrong result is off by O(1))
    atol = 1e-5 * float(np.max(np.abs(expected))) if expected.size else 0.0
    label = problem_label("matmul", m=m, k=k, n=n)
    return Problem("matmul", label, (a, b), 1, expected, matmul_flops(m, k, n), "GFLOP/s", rtol=1e-4, atol=atol)


def make_matmul(tf: ModuleType) -> Any:
    """``tf.matmul`` in a compiled ``tf.function`` (the same user code for popjit and TensorFlow)."""

    @tf.function(jit_compile=True)
    def matmul(a, b):
        return tf.matmul(a, b)

    return matmul


def _matmul_popjit(p: Problem) -> tuple[Callable[[], Any], str]:
    tf, strategy = popjit_strategy()
    fn = make_matmul(tf)
    args = tuple(tf.constant(v) for v in p.inputs)
    return lambda: strategy.run(fn, args=args).numpy(), "IPUStrategy.run"


def _matmul_numpy(p: Problem) -> tuple[Callable[[], Any], str]:
    a, b = p.inputs
    return lambda: a @ b, "BLAS (a @ b)"


def _matmul_tf(p: Problem) -> tuple[Callable[[], Any], str]:
    tf = import_peer("tensorflow")
    fn = make_matmul(tf)
    args = tuple(tf.constant(v) for v in p.inputs)
    return lambda: fn(*args).numpy(), "tf.function(jit_compile=True)"


def _matmul_jax(p: Problem) -> tuple[Callable[[], Any], str]:
    jax = import_peer("jax")
    fn = jax.jit(jax.numpy.matmul)
    args = tuple(jax.device_put(v) for v in p.inputs)
    return lambda: fn(*args).block_until_ready(), "jax.jit"


MATMUL_IMPLS: dict[str, Callable[[Problem], tuple[Callable[[], Any], str]]] = {
    "popjit": _matmul_popjit, "numpy": _matmul_numpy, "tensorflow": _matmul_tf, "jax": _matmul_jax,
}
