"""Host functions an engine calls in the middle of a run (a replicated program's collectives).

An engine calls its callees through ``K`` (:mod:`popjit.codegen.native`); a callee named ``host:<name>``
is not compiled code but a Python function registered here by a layer above (the runtime), called
through a C entry point that ctypes makes for it (which takes the GIL for the call). It receives
int64 arguments: integers as they are and each buffer as the address of its data; it returns 0 to go
on, anything else to stop the engine, which then returns that value. Run as Python
(``POPJIT_DISABLE_NUMBA``), the engine passes the buffers themselves.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

PREFIX = "host:"


@dataclass
class HostFunction:
    """A registered host function and the C entry point that calls it."""

    function: Callable[..., int]
    entry: Any  # the ctypes callback (kept alive while registered)

    @property
    def address(self) -> int:
        return ctypes.cast(self.entry, ctypes.c_void_p).value or 0


_FUNCTIONS: dict[str, HostFunction] = {}


def is_host(callee: str) -> bool:
    """Whether the callee named ``callee`` is a host function."""
    return callee.startswith(PREFIX)


def register(name: str, arity: int, function: Callable[..., int]) -> str:
    """Make ``function`` (``arity`` int64 arguments, returning an int) callable by engines as
    ``host:<name>``; the callee name."""
    entry = ctypes.CFUNCTYPE(ctypes.c_int64, *[ctypes.c_int64] * arity)(function)
    _FUNCTIONS[name] = HostFunction(function, entry)
    return PREFIX + name


def lookup(callee: str) -> HostFunction:
    """The host function of a ``host:<name>`` callee; an error naming it if nothing registered it."""
    try:
        return _FUNCTIONS[callee[len(PREFIX):]]
    except KeyError:
        raise RuntimeError(f"no host function {callee!r} is registered (popjit.runtime registers them)") from None
