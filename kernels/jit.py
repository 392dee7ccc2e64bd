"""The one Numba decorator every codelet uses.

Options that make Numba code vectorise (see DESIGN §4): ``error_model='numpy'`` (no Python
zero-division checks), fastmath flags that keep NaN/Inf semantics (never ``nnan``/``ninf``),
no bounds checks. ``POPJIT_DISABLE_NUMBA=1`` returns the plain Python function.

Every codelet is compiled with Numba's on-disk cache, kept in popjit's cache directory under a name
that hashes all of ``kernels/`` and the code generator (see :func:`popjit.codegen.compile.cache_root`),
so machine code compiled once is loaded by later processes and never outlives an edit to the
kernels it was built from (Numba itself only watches the function's own file).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

from popjit import config

# why: no ``arcp``. It lets LLVM turn ``x / y`` into ``x * (1 / y)`` (not correctly rounded:
# ``floordiv`` by a broadcast scalar came out off by one), ``1 / sqrt(x)`` into the rsqrt estimate
# (NaN at 0 and inf), and a float16 quotient into a half-precision reciprocal that overflows.
FASTMATH = frozenset({"contract", "afn", "reassoc"})
OPTIONS: dict[str, Any] = {"fastmath": set(FASTMATH), "error_model": "numpy", "boundscheck": False, "nogil": True,
                           "cache": True}


@functools.lru_cache(maxsize=1)
def threading_layer() -> str:
    """The Numba threading layer parallel codelets run on: ``NUMBA_THREADING_LAYER`` when set, else
    ``workqueue``.

    why: OpenMP's workers spin after each parallel codelet while OpenBLAS's threads start the next
    matmul, and the two pools fight over the cores (a training step alternates them ~10 times: 4.5x
    slower on 2 cores); workqueue's workers sleep. Machine code is built for one layer, so the layer
    is part of the cache's fingerprint (loading code compiled for another one crashes). Decided
    once per process.
    """
    import os

    from numba.core import config as numba_config
    from numba.np.ufunc import parallel

    if parallel._is_initialized:  # something ran parallel code before popjit: that layer it is
        return parallel.threading_layer()
    chosen = os.environ.get("NUMBA_THREADING_LAYER")
    if not chosen:
        chosen = "workqueue"
        numba_config.THREADING_LAYER = chosen
    return chosen


@contextlib.contextmanager
def _machine_code_cache() -> Iterator[None]:
    """Point Numba's cache at popjit's fingerprinted directory while a codelet is decorated."""
    from numba.core import config as numba_config

    from popjit.codegen.compile import machine_code_dir

    saved = numba_config.CACHE_DIR
    numba_config.CACHE_DIR = str(machine_code_dir())
    try:
        yield
    finally:
        numba_config.CACHE_DIR = saved


def codelet(fn: Callable | None = None, **extra: Any) -> Any:
    """``@codelet``: compile ``fn`` with popjit's Numba options (or leave it Python when disabled)."""

    def wrap(f: Callable) -> Any:
        if config.get("DISABLE_NUMBA"):
            return f
        import numba

        options = {**OPTIONS, **extra}
        if not options.get("cache"):
            return numba.njit(**options)(f)
        with _machine_code_cache():
            return numba.njit(**options)(f)

    return wrap(fn) if fn is not None else wrap
