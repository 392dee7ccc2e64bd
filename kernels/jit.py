"""The one Numba decorator every codelet uses.

Options that make Numba code vectorise (see DESIGN §4): ``error_model='numpy'`` (no Python
zero-division checks), fastmath flags that keep NaN/Inf semantics (never ``nnan``/``ninf``),
no bounds checks. ``POPJIT_DISABLE_NUMBA=1`` returns the plain Python function.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from popjit import config

# why: no ``arcp``. It lets LLVM turn ``x / y`` into ``x * (1 / y)`` (not correctly rounded:
# ``floordiv`` by a broadcast scalar came out off by one), ``1 / sqrt(x)`` into the rsqrt estimate
# (NaN at 0 and inf), and a float16 quotient into a half-precision reciprocal that overflows.
FASTMATH = frozenset({"contract", "afn", "reassoc"})
OPTIONS: dict[str, Any] = {"fastmath": set(FASTMATH), "error_model": "numpy", "boundscheck": False, "nogil": True}


def codelet(fn: Callable | None = None, **extra: Any) -> Any:
    """``@codelet``: compile ``fn`` with popjit's Numba options (or leave it Python when disabled)."""

    def wrap(f: Callable) -> Any:
        if config.get("DISABLE_NUMBA"):
            return f
        import numba

        return numba.njit(**{**OPTIONS, **extra})(f)

    return wrap(fn) if fn is not None else wrap
