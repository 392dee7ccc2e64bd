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
import hashlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import popjit
from popjit import config
from popjit.flags import poplar_flags

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
    from numba.core import config as numba_config
    from numba.np.ufunc import parallel

    if parallel._is_initialized:  # something ran parallel code before popjit: that layer it is
        return parallel.threading_layer()
    chosen = os.environ.get("NUMBA_THREADING_LAYER")
    if not chosen:
        chosen = "workqueue"
        numba_config.THREADING_LAYER = chosen
    return chosen


def cache_root() -> Path:
    """The persistent cache: ``TF_POPLAR_FLAGS=--executable_cache_path=DIR`` if given (as in Graphcore's
    SDK, created if missing), else ``POPJIT_CACHE_DIR``."""
    return Path(poplar_flags().executable_cache_path or config.get("CACHE_DIR")).expanduser()


#: The sources whose text decides the machine code of codelets: this package and the code generator.
_CODEGEN_DIR = Path(popjit.__file__).parent / "codegen"


@functools.lru_cache(maxsize=1)
def fingerprint() -> str:
    """A hash of the kernel and code-generator sources, the Numba version and the threading layer."""
    import numba

    h = hashlib.sha256(f"{numba.__version__} {threading_layer()}".encode())
    sources = sorted(Path(__file__).parent.glob("*.py")) + [_CODEGEN_DIR / "render.py", _CODEGEN_DIR / "engine.py"]
    for path in sources:
        h.update(path.read_bytes())
    return h.hexdigest()[:12]


def machine_code_dir() -> Path:
    """Where Numba keeps compiled machine code for popjit's codelets (this popjit/Numba version)."""
    return cache_root() / f"gen-{fingerprint()}" / "numba"


@contextlib.contextmanager
def _machine_code_cache() -> Iterator[None]:
    """Point Numba's cache at popjit's fingerprinted directory while a codelet is decorated."""
    from numba.core import config as numba_config

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
