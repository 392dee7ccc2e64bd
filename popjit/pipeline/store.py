"""The on-disk executable cache: each compiled program kept as one file, so a later process skips
every compile phase.

A program compiled in one process is saved as ``executables/<key>.exe`` in the cache generation
directory (under ``POPJIT_CACHE_DIR``, or ``TF_POPLAR_FLAGS=--executable_cache_path``): its optimised
graph, its loop program and its engine source (the rendered codelets and the statement tree).
``<key>`` hashes the traced graph's fingerprint (structure, shapes, attributes, constant contents),
the target IPU, the floating-point behaviour, every setting and Poplar flag, the host CPU and
thread count (they decide the matmul kernels), and the text of all of popjit's sources, so an edit
to any pass, the scheduler or the code generator compiles again. A later process that traces the
same graph loads the file (milliseconds) instead of running the graph passes, the lowering, the
tile schedule and the code generation (0.7 s for the Keras CNN benchmark's training step, most of
it the tile schedule); its machine code then comes from the program library cache
(:mod:`popjit.codegen.library`).

The tile schedule itself is not kept (18 MB for that CNN): it is needed only to show it
(``as_text("schedule")``) or report from it, and is computed again on first use. A program whose
compile warned (an out-of-memory warning under the IPU Model) is not kept, so the warning is seen
every time. A damaged entry is warned about once, deleted and compiled again, as every cache file is.
"""

from __future__ import annotations

import functools
import hashlib
import logging
from pathlib import Path
from typing import Any

import llvmlite.binding as llvm

import popjit
from popjit import config
from popjit.flags import poplar_flags
from popjit.kernels.jit import cache_root, fingerprint, keep_entry, read_entry, usable_dir
from popjit.kernels.threads import threads_to_use

_log = logging.getLogger("popjit")

#: Marks an executable file; a file without it is not one (damaged or foreign).
MAGIC = "popjit-executable-1"

_SOURCE_ROOTS = (Path(popjit.__file__).parent, Path(popjit.kernels.__file__).parent)


@functools.lru_cache(maxsize=1)
def source_fingerprint() -> str:
    """A hash of the text of every popjit source file (the package and its kernels)."""
    h = hashlib.sha256()
    for root in _SOURCE_ROOTS:
        for path in sorted(root.rglob("*.py")):
            h.update(str(path.relative_to(root)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()


def executable_key(graph_fingerprint: str, target: Any, numerics: Any) -> str:
    """The key of a program's file: everything its compile depends on (see the module docstring)."""
    settings = {name: config.get(name) for name in config.SETTINGS if name not in ("DEBUG", "SEED")}
    llvm.initialize_native_target()
    host = (llvm.get_host_cpu_name(), threads_to_use())
    text = repr((MAGIC, source_fingerprint(), graph_fingerprint, repr(target), repr(numerics), sorted(settings.items()),
                 repr(poplar_flags()), host))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def executable_path(key: str) -> Path | None:
    """Where the program of ``key`` is kept (None without a usable cache directory)."""
    directory = cache_root() / f"gen-{fingerprint()}" / "executables"
    return directory / f"{key}.exe" if usable_dir(directory) else None


def load(key: str) -> tuple[Any, Any, Any] | None:
    """The kept ``(graph, program, engine_source)`` of ``key``, or None (not kept, or damaged: then
    its file is deleted, with one warning)."""
    path = executable_path(key)
    return None if path is None else read_entry(path, MAGIC, key)


def save(key: str, graph: Any, program: Any, source: Any) -> None:
    """Keep a compiled program for later processes (nothing when the cache directory is unusable, or
    the program holds something that cannot be saved)."""
    path = executable_path(key)
    if path is None:
        return
    try:
        keep_entry(path, MAGIC, key, graph, program, source)
    except Exception as e:  # why: a graph may hold a Python object pickle cannot save: keep it in memory only
        _log.debug("'%s' is not kept in the executable cache: %s", getattr(graph, "name", "?"), e)
