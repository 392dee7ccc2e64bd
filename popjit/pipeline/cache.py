"""The in-memory executable cache, keyed by graph fingerprint and target.

Two traces with identical graphs (same ops, shapes, attributes, constants) share one compiled
executable, as Poplar's executable cache does for a new ``tf.Graph`` in the same process. It keeps
the ``POPJIT_EXECUTABLE_CACHE_SIZE`` most recently used executables, so a long-running process that
meets many programs (new shapes, eager ops on the IPU) stays within a bounded memory; a program
used again after it was dropped compiles again (its machine code still comes from the disk cache).
"""

from __future__ import annotations

import threading
import warnings
from collections import OrderedDict

from popjit import config
from popjit.codegen.numerics import DEFAULT, Numerics
from popjit.errors import OpError
from popjit.graph.verify import check_device_dtypes
from popjit.ir.graph import Graph
from popjit.pipeline.compiler import compile_graph
from popjit.pipeline.executable import Executable
from popjit.schedule.schedule import OutOfMemoryWarning
from popjit.schedule.target import Target
from popjit.source import user_location, where

Key = tuple[str, Target | None, bool, Numerics, str]
_EXECUTABLES: OrderedDict[Key, Executable] = OrderedDict()  # least recently used first
_COMPILING: dict[Key, threading.Lock] = {}
_lock = threading.Lock()
#: ``compilations``: executables made (compiled, or ``loaded`` from the on-disk executable cache, which
#: those of them were); ``hits``: calls answered from memory.
stats = {"compilations": 0, "loaded": 0, "hits": 0}


def _cached(key: Key) -> Executable | None:
    """The executable for ``key`` if it is cached (then it becomes the most recently used); hold ``_lock``."""
    exe = _EXECUTABLES.get(key)
    if exe is not None:
        _EXECUTABLES.move_to_end(key)
        stats["hits"] += 1
    return exe


def _keep(key: Key, exe: Executable) -> None:
    """Cache ``exe``, dropping the least recently used beyond the size limit; hold ``_lock``."""
    _EXECUTABLES[key] = exe
    stats["compilations"] += 1
    stats["loaded"] += exe.loaded
    while len(_EXECUTABLES) > max(1, config.get("EXECUTABLE_CACHE_SIZE")):
        _EXECUTABLES.popitem(last=False)


def compile_cached(graph: Graph, target: Target | None, on_ipu: bool = False,
                   fingerprint: str | None = None, numerics: Numerics = DEFAULT) -> Executable:
    """The executable for ``graph``: an IPU program for ``target``, or a host program for None.

    ``on_ipu``: it will run on an IPU device, so the IPU's dtypes are checked first (a program
    compiled for the IPU but run on the host, ``jit_compile=True`` there, may use float64 as
    TensorFlow on a CPU does). ``numerics``: that device's floating-point behaviour.

    Thread-safe: one thread compiles a given program while the others asking for it wait and then
    share it; different programs compile concurrently. ``fingerprint``: the graph's, if the caller
    keeps it (computing it prints the whole graph).
    """
    # why the matmul settings: they pick the kernels, whose sums round differently
    key = (fingerprint or graph.fingerprint(), target, on_ipu, numerics, config.get("MATMUL"),
           config.get("IMPLICIT_GEMM"))
    with _lock:
        exe = _cached(key)
        if exe is not None:
            return exe
        compiling = _COMPILING.setdefault(key, threading.Lock())
    with compiling:
        with _lock:
            exe = _cached(key)  # another thread compiled it while this one waited
            if exe is not None:
                return exe
        if on_ipu:  # refuse what the IPU cannot hold before compiling
            check_device_dtypes(graph)
        try:
            exe = _compile_at_user_line(graph, target, numerics, key[0])
            with _lock:
                _keep(key, exe)
        finally:
            with _lock:
                _COMPILING.pop(key, None)
    return exe


def _compile_at_user_line(graph: Graph, target: Target | None, numerics: Numerics, fingerprint: str) -> Executable:
    """Compile; errors and out-of-memory warnings name the user's line that asked for the program."""
    loc = user_location()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", OutOfMemoryWarning)
        try:
            exe = compile_graph(graph, target, numerics, fingerprint)
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
