"""Host functions an engine calls in the middle of a run (a replicated program's collectives).

An engine calls its callees through ``K`` (:mod:`popjit.codegen.native`); a callee named ``host:<name>``
is not compiled code but a Python function registered here by a layer above (the runtime), called
through a C entry point that ctypes makes for it (which takes the GIL for the call). It receives
int64 arguments: integers as they are and each buffer as the address of its data; it returns 0 to go
on, anything else to stop the engine, which then returns that value. Run as Python
(``POPJIT_DISABLE_NUMBA``), the engine passes the buffers themselves.

A host function may come with a native entry point (``native``: built from the Python one's address)
that serves the calls it can without Python and hands the others to the Python function; compiled
engines then call that one (:mod:`popjit.codegen.collective`).
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
    native: Callable[[int], int] | None = None  # builds the native entry point from the callback's address

    @property
    def address(self) -> int:
        """The entry point compiled engines call: the native one if there is one, else the callback."""
        python = ctypes.cast(self.entry, ctypes.c_void_p).value or 0
        return python if self.native is None else self.native(python)


_FUNCTIONS: dict[str, HostFunction] = {}


def is_host(callee: str) -> bool:
    """Whether the callee named ``callee`` is a host function."""
    return callee.startswith(PREFIX)


def register(name: str, arity: int, function: Callable[..., int],
             native: Callable[[int], int] | None = None) -> str:
    """Make ``function`` (``arity`` int64 arguments, returning an int) callable by engines as
    ``host:<name>``; the callee name. ``native``: given the address of ``function``'s C entry point,
    the address of a native entry point with the same arguments that compiled engines call instead
    (called when an engine is linked; it should build its code once)."""
    entry = ctypes.CFUNCTYPE(ctypes.c_int64, *[ctypes.c_int64] * arity)(function)
    _FUNCTIONS[name] = HostFunction(function, entry, native)
    return PREFIX + name


def lookup(callee: str) -> HostFunction:
    """The host function of a ``host:<name>`` callee; an error naming it if nothing registered it."""
    try:
        return _FUNCTIONS[callee[len(PREFIX):]]
    except KeyError:
        raise RuntimeError(f"no host function {callee!r} is registered (popjit.runtime registers them)") from None
