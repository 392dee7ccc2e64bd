"""The on-disk executable cache: each compiled program kept as one file, so a later process skips
every compile phase.

Where programs are kept:

* by default, as ``executables/<key>.exe`` in the cache generation directory under
  ``POPJIT_CACHE_DIR``: the program's optimised graph, its loop program and its engine source (the
  rendered codelets and the statement tree). Its machine code is kept beside it, in the program
  library cache (``programs/<library key>.lib``, :mod:`popjit.codegen.library`);
* with ``TF_POPLAR_FLAGS=--executable_cache_path=DIR`` (Graphcore's flag), as ``DIR/<key>.poplar_exec``,
  one file per program holding all of that *and* its machine code (a program library per kind of
  buffers it ran with, added to the file when it is built). A process given only those files loads
  a program from its one file and compiles nothing, not even a codelet. What is shared by every
  program and needed only to build a new one (the machine code of popjit's kernel library, the
  generated codelet modules) is kept in ``DIR/gen-<fingerprint>/``: with the flag, nothing goes to
  ``POPJIT_CACHE_DIR``. There is no index file and nothing is evicted: delete the files (or
  ``popjit cache clear``) to empty it.

``<key>`` hashes the traced graph's fingerprint (structure, shapes, attributes, constant contents),
the target IPU, the floating-point behaviour, every setting and the Poplar flags that change the
generated code, the host CPU and thread count (they decide the matmul kernels), and the text of all
of popjit's sources, so an edit to any pass, the scheduler or the code generator compiles again. A
later process that traces the same graph loads the file (milliseconds) instead of running the graph
passes, the lowering, the tile schedule and the code generation (0.7 s for the Keras CNN
benchmark's training step, most of it the tile schedule).

The tile schedule itself is not kept (18 MB for that CNN): it is needed only to show it
(``as_text("schedule")``) or report from it, and is computed again on first use. A program whose
compile warned (an out-of-memory warning under the IPU Model) is not kept, so the warning is seen
every time. Files are written atomically (a temporary file and a rename), so processes sharing a
directory each see a whole file; a damaged one is warned about once, deleted and compiled again, as
every cache file is; a directory other users can write to is not used at all (its entries are
pickled data, :func:`popjit.kernels.jit.usable_dir`), nor a file another user owns.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import llvmlite.binding as llvm

import popjit
from popjit import config
from popjit.flags import poplar_flags
from popjit.kernels.jit import executable_cache_dir, generation_dir, keep_entry, read_entry, usable_dir
from popjit.kernels.threads import threads_to_use

_log = logging.getLogger("popjit")

#: Marks an executable file; a file without it is not one (damaged or foreign).
MAGIC = "popjit-executable-1"
#: Marks a ``.poplar_exec`` file (an executable with its machine code).
POPLAR_EXEC_MAGIC = "popjit-poplar-exec-1"
#: The suffix of the files in ``--executable_cache_path``, as Graphcore names them.
POPLAR_EXEC_SUFFIX = ".poplar_exec"

#: Settings that change nothing compiled: how much is printed or logged, the seed of ``popjit run``,
#: where the caches are and how many programs the in-memory one keeps.
UNKEYED_SETTINGS = ("DEBUG", "SEED", "LOG", "CACHE_DIR", "EXECUTABLE_CACHE_SIZE")

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


#: What a program's key hashes (:func:`key_parts`), and what each part is.
KEY_PARTS = {
    "graph": "the traced graph: its ops, shapes, dtypes, attributes and constants",
    "target IPU": "the IPU it is compiled for: version, tiles, IPU Model",
    "floating-point behaviour": "IPUConfig.floating_point_behaviour",
    "POPJIT settings": "the POPJIT_* settings that change generated code",
    "TF_POPLAR_FLAGS": "the Poplar flags that change generated code",
    "host": "the host CPU and the thread count (they choose the matmul kernels)",
    "popjit sources": "the text of every popjit source file",
}


def key_parts(graph_fingerprint: str, target: Any, numerics: Any) -> dict[str, str]:
    """What a program's key hashes, by the names of :data:`KEY_PARTS` (the recompilation log names the
    part that changed, :func:`changed_parts`)."""
    settings = {name: config.get(name) for name in config.SETTINGS if name not in UNKEYED_SETTINGS}
    llvm.initialize_native_target()
    return {
        "graph": graph_fingerprint,
        "target IPU": repr(target),
        "floating-point behaviour": repr(numerics),
        "POPJIT settings": repr(sorted(settings.items())),
        "TF_POPLAR_FLAGS": repr(poplar_flags().codegen_key()),
        "host": repr((llvm.get_host_cpu_name(), threads_to_use())),
        "popjit sources": source_fingerprint(),
    }


def executable_key(graph_fingerprint: str, target: Any, numerics: Any) -> str:
    """The key of a program's file: everything its compile depends on (see the module docstring)."""
    parts = key_parts(graph_fingerprint, target, numerics)
    return hashlib.sha256(repr((MAGIC, sorted(parts.items()))).encode()).hexdigest()[:32]


def changed_parts(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """The names of the key parts that differ between two compiles."""
    return [name for name in after if before.get(name) != after[name]]


def executables_dir() -> Path:
    """Where programs are kept: the ``--executable_cache_path`` directory, else the generation's
    ``executables`` directory under ``POPJIT_CACHE_DIR``."""
    flagged = executable_cache_dir()
    return flagged if flagged is not None else generation_dir() / "executables"


def executable_path(key: str) -> Path | None:
    """Where the program of ``key`` is kept (None without a usable cache directory)."""
    flagged = executable_cache_dir()
    if flagged is not None:
        return flagged / f"{key}{POPLAR_EXEC_SUFFIX}" if usable_dir(flagged, flagged) else None
    directory = executables_dir()
    return directory / f"{key}.exe" if usable_dir(directory) else None


@dataclass
class PoplarExec:
    """A program's ``.poplar_exec`` file: the program and its machine code, by program library key.

    It is the :class:`~popjit.codegen.library.LibraryStore` its executable links with: a library
    built for it is added to the file (written again whole, atomically)."""

    path: Path
    key: str
    fields: tuple
    libraries: dict[str, tuple] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def get(self, library_key: str) -> tuple | None:
        """The kept machine code of ``library_key``, or None."""
        return self.libraries.get(library_key)

    def put(self, library_key: str, entry: tuple) -> None:
        """Keep the machine code ``entry`` of ``library_key`` in the file."""
        with self._lock:
            self.libraries[library_key] = entry
            _keep(self.path, POPLAR_EXEC_MAGIC, self.key, *self.fields, dict(self.libraries))


@dataclass
class Kept:
    """A program read from the executable cache: its graph, loop program and engine source, and where
    its machine code is kept (a :class:`PoplarExec`, or None: the program library cache)."""

    graph: Any
    program: Any
    source: Any
    libraries: PoplarExec | None = None


def load(key: str) -> Kept | None:
    """The kept program of ``key``, or None (not kept, or damaged: then its file is deleted, with one
    warning)."""
    path = executable_path(key)
    if path is None:
        return None
    if path.suffix != POPLAR_EXEC_SUFFIX:
        fields = read_entry(path, MAGIC, key)
        return None if fields is None else Kept(*fields)
    fields = read_entry(path, POPLAR_EXEC_MAGIC, key)
    if fields is None:
        return None
    *program, libraries = fields
    return Kept(*program, PoplarExec(path, key, tuple(program), dict(libraries)))


def save(key: str, graph: Any, program: Any, source: Any) -> PoplarExec | None:
    """Keep a compiled program for later processes (nothing when the cache directory is unusable, or
    the program holds something that cannot be saved). With ``--executable_cache_path``, the
    :class:`PoplarExec` its machine code is to be added to."""
    path = executable_path(key)
    if path is None:
        return None
    if path.suffix != POPLAR_EXEC_SUFFIX:
        _keep(path, MAGIC, key, graph, program, source)
        return None
    if not _keep(path, POPLAR_EXEC_MAGIC, key, graph, program, source, {}):
        return None
    return PoplarExec(path, key, (graph, program, source))


def _keep(path: Path, magic: str, key: str, *fields: Any) -> bool:
    """Write a cache file; False when its contents cannot be saved."""
    try:
        keep_entry(path, magic, key, *fields)
    except Exception as e:  # why: a graph may hold a Python object pickle cannot save: keep it in memory only
        _log.debug("'%s' is not kept in the executable cache: %s", getattr(fields[0], "name", "?"), e)
        return False
    return True
