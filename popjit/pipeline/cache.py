"""The in-memory executable cache, keyed by graph fingerprint and target.

Two traces with identical graphs (same ops, shapes, attributes, constants) share one compiled
executable, as Poplar's executable cache does for a new ``tf.Graph`` in the same process.
"""

from __future__ import annotations

import threading
import warnings

from popjit.errors import OpError
from popjit.graph.verify import check_device_dtypes
from popjit.ir.graph import Graph
from popjit.pipeline.compiler import compile_graph
from popjit.pipeline.executable import Executable
from popjit.schedule.schedule import OutOfMemoryWarning
from popjit.schedule.target import Target
from popjit.source import user_location, where

_EXECUTABLES: dict[tuple[str, Target | None], Executable] = {}
_COMPILING: dict[tuple[str, Target | None], threading.Lock] = {}
_lock = threading.Lock()
stats = {"compilations": 0, "hits": 0}


def compile_cached(graph: Graph, target: Target | None, on_ipu: bool = False) -> Executable:
    """The executable for ``graph``: an IPU program for ``target``, or a host program for None.

    ``on_ipu``: it will run on an IPU device, so the IPU's dtypes are checked first (a program
    compiled for the IPU but run on the host, ``jit_compile=True`` there, may use float64 as
    TensorFlow on a CPU does).

    Thread-safe: one thread compiles a given program while the others asking for it wait and then
    share it; different programs compile concurrently.
    """
    if on_ipu:  # refuse what the IPU cannot hold before compiling
        check_device_dtypes(graph)
    key = (graph.fingerprint(), target)
    with _lock:
        exe = _EXECUTABLES.get(key)
        if exe is not None:
            stats["hits"] += 1
            return exe
        compiling = _COMPILING.setdefault(key, threading.Lock())
    with compiling:
        with _lock:
            exe = _EXECUTABLES.get(key)
            if exe is not None:  # another thread compiled it while this one waited
                stats["hits"] += 1
                return exe
        try:
            exe = _compile_at_user_line(graph, target)
            with _lock:
                _EXECUTABLES[key] = exe
                stats["compilations"] += 1
        finally:
            with _lock:
                _COMPILING.pop(key, None)
    return exe


def _compile_at_user_line(graph: Graph, target: Target | None) -> Executable:
    """Compile; errors and out-of-memory warnings name the user's line that asked for the program."""
    loc = user_location()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", OutOfMemoryWarning)
        try:
            exe = compile_graph(graph, target)
        except OpError as e:
            raise type(e)(f"{e.message}\n  while compiling '{graph.name}'{where(loc)}") from None
    for w in caught:
        if issubclass(w.category, OutOfMemoryWarning) and loc is not None:
            warnings.warn_explicit(f"{w.message}\n  while compiling '{graph.name}'", w.category, loc.file, loc.line)
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return exe


def clear() -> None:
    with _lock:
        _EXECUTABLES.clear()
