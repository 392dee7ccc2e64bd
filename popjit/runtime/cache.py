"""The in-memory executable cache, keyed by graph fingerprint and target.

Two traces with identical graphs (same ops, shapes, attributes, constants) share one compiled
executable, as Poplar's executable cache does for a new ``tf.Graph`` in the same process.
"""

from __future__ import annotations

import threading
from typing import Any

from popjit.graph.ir import Graph
from popjit.graph.verify import check_device_dtypes
from popjit.schedule.target import Target

_EXECUTABLES: dict[tuple[str, Target | None], Any] = {}
_lock = threading.Lock()
stats = {"compilations": 0, "hits": 0}


def compile_cached(graph: Graph, target: Target | None) -> Any:
    """The executable for ``graph`` on ``target`` (None: the host, with no tile-memory limit)."""
    from popjit.pipeline import compile_graph

    if target is not None:  # an IPU program: refuse what the IPU cannot hold before compiling
        check_device_dtypes(graph)
    key = (graph.fingerprint(), target)
    with _lock:
        if key in _EXECUTABLES:
            stats["hits"] += 1
            return _EXECUTABLES[key]
    exe = compile_graph(graph, target)
    with _lock:
        _EXECUTABLES.setdefault(key, exe)
        stats["compilations"] += 1
    return exe


def clear() -> None:
    with _lock:
        _EXECUTABLES.clear()
