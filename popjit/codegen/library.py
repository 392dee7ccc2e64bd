"""A program's machine code: its engine and every function the engine calls, loaded as one library and
cached as one file.

The engine (:mod:`popjit.codegen.native`) calls its callees (generated codelets, library kernels such
as ``matmul_f32``) through their C entry points. Each codelet written as LLVM IR and each library
kernel is a *unit*, kept per machine by a key hashing the codelet's source (or the kernel's name), the
types it is called with, the host CPU and Numba's optimisation settings. A codelet's source depends on
the program's structure, dtypes and ranks, not on its sizes (they are its arguments), so a program of
new sizes, a Keras model's evaluation beside its training, or a test's next example compiles only its
engine and the codelets it does not share: the Keras CNN at batch 64 after batch 32 has none of its
own. The units a program still needs are compiled in a few parts, each part's object a *group* of
units (:func:`_build`); a group is loaded into Numba's JIT once per process with every unit in it and
kept as ``units/<group>.group`` in the cache generation directory, each of its units as
``units/<key>.unit`` naming it (:class:`_Units`). A library kernel is a group of its own, kept in
``kernels/`` instead: the machine's kernel library, which every later program links without compiling.
Code that calls a kernel function by its *entry point* (the own gemm's drivers and a computed
product's codelet call ``gemm_block`` so, :func:`load_entry`) declares it without a copy of its own:
the entry point is a group of its own in ``kernels/`` too, compiled with the first build that calls it
and loaded before any code calling it (the JIT resolves a call as it loads the caller).

The parts are compiled in parallel (:mod:`popjit.codegen.machine` optimises them and emits their
object code on threads) while the next one is written. The engine's LLVM module is a part of its own,
compiled first while Numba's registries load and the codelets are written. A codelet the IR writer does
not handle is typed and lowered by Numba (``no_compile``) into a part that is the program's own. The
program's own parts, its units' groups, the symbol names of the engine and the entry points, and the
functions' Numba environments (their constants) are saved as ``programs/<key>.lib``
(or, under ``--executable_cache_path``, in the program's own ``.poplar_exec`` file, a
:class:`LibraryStore`), ``<key>`` hashing the engine, the callees (their names hash their source), the
types they are called with and the host CPU. A later process loads that one file: no typing, no
lowering, and not even Numba's typing registries (0.3 s in a fresh process,
:func:`load_numba_registries`) are needed, so a cached program starts in milliseconds. Neither are
they when every callee of a new program is a unit this machine has compiled before.

Scalar kernels a codelet calls (``km.exp``…) are Numba functions cached once per machine whose code is
linked (inlined, so loops vectorise) into each codelet that uses them. A damaged entry is warned about
once, deleted and built again, as every cache file is.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

import llvmlite.binding as llvm
import numba
from llvmlite import ir
from numba.core import cgutils, compiler
from numba.core import config as numba_config
from numba.core.compiler_lock import global_compiler_lock
from numba.core.environment import Environment, lookup_environment
from numba.core.registry import cpu_target
from numba.core.runtime import rtsys

from popjit import config
from popjit.codegen.abi import pointer_entry
from popjit.codegen.direct import Unsupported, emit_codelet
from popjit.codegen.implicit import GEMM_MODULE
from popjit.codegen.machine import CODELET_LEVEL, ObjectCode, Part, PartCompiler
from popjit.codegen.render import TRAP_FLAGS, WIDEST_VECTORS
from popjit.errors import InternalError
from popjit.kernels.jit import (
    ENTRY_PREFIX,
    discard_entry,
    fingerprint,
    generation_dir,
    keep_entry,
    read_entry,
    usable_dir,
    warn_once,
)
from popjit.kernels.threads import threads_to_use

_log = logging.getLogger("popjit")

#: Told ``(done, total)`` as the callees of a program library are compiled.
Progress = Callable[[int, int], None]

#: Marks a program library file; a file without it is not one (damaged or foreign).
MAGIC = "popjit-program-library-3"


class ProgramLibrary:
    """Loaded machine code: the engine's entry point, and ``addresses[i]`` the C entry point of callee ``i``.
    ``key`` and ``entry``: its cache key and what is kept for it (only for a library kept in a
    :class:`LibraryStore`, so that another store can be given it)."""

    def __init__(self, libraries: list[Any], engine: int, addresses: list[int], compiled: int,
                 through_numba: int = 0) -> None:
        self._libraries = libraries  # why: they own the machine code behind the addresses
        self.engine = engine
        self.addresses = addresses
        self.compiled = compiled  # functions compiled to build it (0: loaded from the cache)
        self.reused = 0  # of its callees, those whose machine code was there already (units)
        self.unit_parts: list[tuple[tuple, Any]] = []  # its units' groups: (serialized object, code library)
        self.through_numba = through_numba  # of those, generated codelets compiled by Numba's pipeline
        self.key = ""
        self.entry: tuple | None = None


class LibraryStore(Protocol):
    """Where a program keeps its program libraries instead of the program library cache (a
    ``.poplar_exec`` file, :class:`popjit.pipeline.store.PoplarExec`)."""

    def get(self, library_key: str) -> tuple | None:
        """The kept entry of ``library_key``, or None."""
        ...

    def put(self, library_key: str, entry: tuple) -> None:
        """Keep ``entry`` for ``library_key``."""
        ...


def offer(store: LibraryStore, library: ProgramLibrary) -> None:
    """Give ``store`` the machine code of ``library`` if it does not hold it (a program whose engine was
    linked for another program with the same engine)."""
    if library.entry is not None and store.get(library.key) is None:
        store.put(library.key, library.entry)


def library_key(engine: str, callees: Sequence[tuple[str, tuple]]) -> str:
    """The cache key of a program library: its engine, its callees' names and argument types, the host
    CPU, and how its codelets are built (``POPJIT_DIRECT_CODELETS``)."""
    host = cpu_target.target_context.codegen().magic_tuple()
    text = repr((MAGIC, fingerprint(), host, engine, [(name, tuple(str(t) for t in types)) for name, types in callees],
                 bool(config.get("DIRECT_CODELETS"))))
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def library_path(key: str) -> Path | None:
    """Where the library of ``key`` is cached (None without a usable cache directory)."""
    directory = generation_dir() / "programs"
    return directory / f"{key}.lib" if usable_dir(directory) else None


def program_library(engine: str, engine_module: Callable[[], Any], callees: Sequence[tuple[str, tuple]],
                    functions: Callable[[], list[Any]], progress: Progress | None = None,
                    store: LibraryStore | None = None) -> ProgramLibrary:
    """The machine code of a program: its engine (the function ``engine`` of the LLVM module
    ``engine_module()``) and ``callees`` (name, Numba argument types), loaded from the cache or
    built from ``functions()`` (the callees' dispatchers, in order) and saved. A build calls
    ``progress(done, total)`` after each distinct callee is compiled (the compile progress bar).
    ``store``: where it is kept instead of the program library cache."""
    key = library_key(engine, callees)
    path = library_path(key) if store is None else None
    with global_compiler_lock:  # why: Numba's code libraries are built and loaded under its compiler lock
        loaded = _load(path, key) if path is not None else _from_store(store, key) if store is not None else None
        if loaded is not None:
            return loaded
        built, entry = _build(key, engine, engine_module(), callees, functions(), progress)
    if store is not None:
        built.key, built.entry = key, entry
        store.put(key, entry)
    elif path is not None:
        keep_entry(path, MAGIC, key, *entry)
    return built


def _from_store(store: LibraryStore, key: str) -> ProgramLibrary | None:
    """The library of ``key`` kept in ``store``, or None (not there, or damaged: warned about once, and
    built again)."""
    entry = store.get(key)
    if entry is None:
        return None
    try:
        library = _from_entry(entry)
    except Exception as e:  # why: LLVM and format errors of every kind mean the entry is damaged
        warn_once(f"damaged:{key}", f"popjit's kept machine code {key} could not be loaded ({type(e).__name__}: "
                  f"{e}); it is compiled again.")
        return None
    library.key, library.entry = key, entry
    return library


def load_numba_registries() -> None:
    """Load Numba's typing and lowering registries (once per process), without SciPy's BLAS.

    # why: importing ``numba.np.arraymath`` probes ``scipy.linalg.cython_blas``, which imports all of
    # ``scipy.linalg``: 0.3-0.55 s of a fresh process's first compile. popjit's matmuls call NumPy's
    # OpenBLAS, so a stand-in module answers the probe; it is removed at once, and a function that
    # Numba compiles later with ``np.dot`` imports the real module then (``ensure_blas`` again).
    """
    name = "scipy.linalg.cython_blas"
    stand_in = None if name in sys.modules else ModuleType(name, "popjit's stand-in while Numba loads")
    if stand_in is not None:
        sys.modules[name] = stand_in
    try:
        cpu_target.typing_context.refresh()
        cpu_target.target_context.refresh()
    finally:
        if stand_in is not None and sys.modules.get(name) is stand_in:
            del sys.modules[name]


def _build(key: str, engine: str, engine_module: Any, callees: Sequence[tuple[str, tuple]],
           functions: list[Any], progress: Progress | None = None) -> tuple[ProgramLibrary, tuple]:
    """Compile the engine and what of ``functions`` is not yet machine code into a program library.

    Each generated codelet written as IR and each library kernel the engine calls is a *unit*, kept per
    machine (:class:`_Units`) and shared by every program that calls it with the same argument types, so
    a program of new sizes compiles only its engine and its new codelets. The units still to build are
    shared out over a few parts (:func:`balanced_parts`, :data:`PARTS_PER_THREAD` per thread), each
    compiled into one object, a group of units, on a thread
    (:class:`~popjit.codegen.machine.PartCompiler`) while the next is written. A library kernel is a part
    of its own, kept in ``kernels/``: the kernel library, compiled once per machine, that a new program
    links as it is (the own gemm's kernels took 0.9 s of a cold Keras CNN's machine code). why not one object per
    unit: LLVM sets up its pass and code-emission pipelines per module (8.7 ms for an empty one), and
    the Keras CNN's 43 units compiled one module each kept the LLVM threads busy 0.6 s longer (3.0-3.4 s
    against 2.4-2.7 s, five cold compiles each). The callees Numba's pipeline compiles (with run-time
    constants of their own) join a part that is the program's alone, except an implicit product's codelet,
    which is a unit. The engine is a part of its own,
    compiled first (while Numba's registries load and the codelets are written) and without
    optimisation: it only sequences calls, and LLVM's passes and optimised code emission took 0.9 s of
    CPU time for the Keras CNN's engine against 0.08 s without."""
    distinct = list({(id(fn), types): (name, fn, types) for (name, types), fn in zip(callees, functions)}.values())
    direct = _DirectCodelets() if config.get("DIRECT_CODELETS") else None
    sources = [_codelet_source(fn) if direct else None for _, fn, _ in distinct]
    unit_keys = [unit_key(fn, types) for _, fn, types in distinct]
    kernels = {k for k, source in zip(unit_keys, sources) if k is not None and source is None}
    symbols = {(id(fn), types): _UNITS.symbol(k) for (_, fn, types), k in zip(distinct, unit_keys)
               if k is not None and _UNITS.ready(k, k in kernels)}
    to_write = [i for i, (_, fn, types) in enumerate(distinct) if (id(fn), types) not in symbols]
    threads = threads_to_use()
    codelets = [i for i in to_write if unit_keys[i] not in kernels]
    groups = [[i] for i in to_write if unit_keys[i] in kernels] + _groups(
        codelets, [len(sources[i]) if sources[i] else _OTHER_WEIGHT for i in codelets],
        PARTS_PER_THREAD * threads if threads > 1 else 1)
    debug = config.get("DEBUG") >= 7
    linked = _LinkedModules()
    entries = _EntryPoints()
    writer = _PartWriter(key, len(to_write), direct, progress)
    written: list[tuple[_Part, tuple[str, ...]]] = []  # each part built, and the units in it (none: the program's)
    compiled: list[Future[ObjectCode]] = []
    with PartCompiler(threads, assembly=debug) as compiler:

        def submit(part: _Part, units: tuple[str, ...] = ()) -> None:
            written.append((part, units))
            compiled.append(compiler.submit(linked.part(part)))

        engine_text = cgutils.normalize_ir_text(str(engine_module))  # why text: parsed on the compiling thread
        submit(_Part(_new_library("engine"), [engine_text], [False], optimize=False))
        if to_write:
            load_numba_registries()
        own = _Part(_new_library("own"), level=None)
        with entries.noting():
            for members in groups:
                part, units = _Part(_new_library(f"units.{len(written)}")), []
                for i in members:
                    if writer.unit(unit_keys[i], part, *distinct[i], sources[i]):
                        units.append(unit_keys[i])
                    else:
                        writer.own(own, *distinct[i], sources[i])
                    for entry in entries.new():  # why at once: compiled beside the parts written next
                        submit(*entry)
                if units:
                    submit(part, tuple(units))
        if writer.environments:  # why: one for each callee written into the program's own part
            submit(own)
        objects = [future.result() for future in compiled]
    if debug:
        assembly = "\n".join(code.assembly or "" for code in objects)
        print(f"=== popjit: machine code of program library {key} ===\n{assembly}", file=sys.stderr)
    kept = sorted(zip(written, objects), key=lambda w: not entries.built(w[0][1]))  # why: loaded before their callers
    for (part, units), code in kept:
        if units:
            _UNITS.keep(units, _serialized(part, code), units[0] in kernels or entries.built(units))
    symbols.update(writer.symbols)
    names = [symbols[(id(fn), types)] for (_, types), fn in zip(callees, functions)]
    serialized = [_serialized(part, code) for (part, units), code in zip(written, objects) if not units]
    unit_groups = _UNITS.groups_of(k for (_, fn, types), k in zip(distinct, unit_keys)
                                   if k is not None and symbols[(id(fn), types)] == _UNITS.symbol(k))
    environments = writer.environments
    entry = (serialized, engine, names, [(env.env_name, list(env.consts)) for env in environments],
             [(group, units, code) for group, units, code, _ in unit_groups])
    library = _loaded(serialized, engine, names, environments, len(writer.symbols), len(environments))
    library.reused = len(distinct) - len(writer.symbols)
    library.unit_parts = [(code, loaded) for _, _, code, loaded in unit_groups]
    return library, entry


def _groups(items: Sequence[int], weights: Sequence[int], parts: int) -> list[list[int]]:
    """``items`` cut into at most ``parts`` groups of about equal weight (:func:`balanced_parts`); none
    when there are no items."""
    part_of = balanced_parts(weights, parts)
    count = max(part_of, default=-1) + 1
    return [[item for item, p in zip(items, part_of) if p == index] for index in range(count)]


#: The weight of a callee that is not a generated codelet written as LLVM IR (its source length is).
_OTHER_WEIGHT = 2000
PARTS_PER_THREAD = 4
"""With more than one thread, the units to build are compiled in up to this many parts per thread (so a
thread that finishes early takes another part); with one, in one part. why four, not two: source size
tells LLVM's time for a part poorly (the Keras CNN's four parts of 8-10 codelets took 0.17-0.52 s of
CPU each), and the part written last finished alone while the other thread idled; in eight, the CNN's
codelets took the same CPU time (1.16 against 1.18 s) and its machine code 1.13-1.72 s (median 1.29)
against 1.42-1.55 s (1.49) in two (four alternating cold runs each, 2-core Ice Lake VM)."""


def balanced_parts(weights: Sequence[int], parts: int) -> list[int]:
    """The part (0, 1, …) of each of ``weights``, into at most ``parts`` parts of about equal sums:
    heaviest first, each to the lightest part so far. No part is empty."""
    count = max(1, min(parts, len(weights)))
    totals, sizes = [0] * count, [0] * count
    part_of = [0] * len(weights)
    for i in sorted(range(len(weights)), key=lambda i: -weights[i]):
        lightest = min(range(count), key=lambda p: (totals[p], sizes[p]))  # why sizes: items of weight 0
        totals[lightest] += weights[i]
        sizes[lightest] += 1
        part_of[i] = lightest
    return part_of


def _serialized(part: _Part, code: ObjectCode) -> tuple:
    """A compiled part as Numba unserialises a code library: its name, and its object code with the
    bitcode naming its symbols."""
    return (part.library.name, "object", (code.code, code.bitcode))


def _new_library(name: str) -> Any:
    """An empty code library for a part of a program library."""
    return cpu_target.target_context.codegen().create_library(f"popjit_program.{name}")


class _PartWriter:
    """Writes the callees of program library ``program`` (its key) into parts, and keeps what they hold:
    each callee's symbol (by function and types) and the Numba environments of the callees Numba's
    pipeline compiled."""

    def __init__(self, program: str, total: int, direct: _DirectCodelets | None, progress: Progress | None) -> None:
        self.program, self.total, self.direct, self.progress = program, total, direct, progress
        self.symbols: dict[tuple[int, tuple], str] = {}
        self.environments: list[Any] = []

    def unit(self, key: str | None, part: _Part, name: str, fn: Any, types: tuple, source: str | None) -> bool:
        """Write ``fn`` for ``types`` into ``part`` as the unit ``key``: a codelet written as IR (of
        ``source``), an implicit product's codelet compiled by Numba's pipeline, or a library kernel; False
        when it cannot be one (not a unit, or another codelet outside what the IR writer handles)."""
        if key is None:
            return False
        symbol = _UNITS.symbol(key)
        if source is not None:
            written = self.direct is not None and self.direct.emit(part, fn, types, source, symbol)
            if not written and GEMM_MODULE in source:
                # why a unit: an implicit product's codelet (codegen/implicit.py) takes Numba 2-3 s, and as a
                # program's own it was compiled again by every program with that convolution (a Keras model's
                # training and prediction); it raises nothing and holds no Python object: no environment
                _compile_into(part.library, name, fn, types, symbol)
                written = True
                part.level = None
        else:
            written = bool(_link_kernel(part.library, fn, types, symbol))
            part.level = None
        if written:
            self._wrote(fn, types, symbol)
        return written

    def own(self, part: _Part, name: str, fn: Any, types: tuple, source: str | None) -> None:
        """Compile ``fn`` for ``types`` by Numba's pipeline into ``part``, the program's own."""
        symbol = f"popjit.callee.{self.program}.{len(self.symbols)}"  # why the program: symbols are process-wide
        self.environments.append(_compile_into(part.library, name, fn, types, symbol).environment)
        self._wrote(fn, types, symbol)

    def _wrote(self, fn: Any, types: tuple, symbol: str) -> None:
        self.symbols[(id(fn), types)] = symbol
        if self.progress is not None:
            self.progress(len(self.symbols), self.total)


@dataclass
class _Part:
    """A part of a program library: a code library (its Numba-compiled functions and the kernels
    linked in) and the IR text of its codelets, parsed on the thread that compiles the part."""

    library: Any
    texts: list[str] = field(default_factory=list)
    simplify: list[bool] = field(default_factory=list)  # per text: see :attr:`popjit.codegen.machine.Part.simplify`
    optimize: bool = True  # see :attr:`popjit.codegen.machine.Part.optimize`
    level: int | None = CODELET_LEVEL  # see :attr:`popjit.codegen.machine.Part.level`; None once Numba's code is in it


#: Marks a unit's file and a unit group's; a file without its mark is not one (damaged or foreign).
UNIT_MAGIC = "popjit-unit-1"
GROUP_MAGIC = "popjit-unit-group-1"


def unit_key(fn: Any, types: tuple) -> str | None:
    """The key of callee ``fn``'s unit for ``types`` as a program library builds it (:func:`_unit_key`, of the
    generated codelet's source when codelets are built directly), None when it is never a unit."""
    return _unit_key(fn, types, _codelet_source(fn) if config.get("DIRECT_CODELETS") else None)


def _unit_key(fn: Any, types: tuple, source: str | None, entry: str | None = None) -> str | None:
    """The key of the unit of callee ``fn`` for ``types``: a hash of the generated codelet's ``source``
    (or, for a library kernel, its name, or the symbol of its ``entry`` point), the types, the host CPU
    and Numba's optimisation settings; None for a callee that is never a unit (a function Numba
    compiles for the program alone)."""
    if source is None and not fn.py_func.__module__.startswith(KERNELS):
        return None
    what = source if source is not None else entry or f"{fn.py_func.__module__}.{fn.py_func.__qualname__}"
    host = cpu_target.target_context.codegen().magic_tuple()
    options = sorted((k, sorted(v) if isinstance(v, (set, frozenset)) else v) for k, v in fn.targetoptions.items())
    text = repr((UNIT_MAGIC, fingerprint(), host, what, tuple(str(t) for t in types), options,
                 numba_config.OPT, numba_config.LOOP_VECTORIZE, numba_config.SLP_VECTORIZE))
    return hashlib.sha256(text.encode()).hexdigest()[:24]


class _Units:
    """The units this process has loaded. Units compiled together are one object, a *group*, loaded into
    Numba's JIT once with every unit in it (a unit's entry point is named after its key); a group is kept
    as ``units/<group>.group`` in the cache generation directory and each unit in it as
    ``units/<key>.unit``, naming its group; a group of library kernels in ``kernels/`` (``kernel``).
    Used under Numba's compiler lock."""

    def __init__(self) -> None:
        self._group_of: dict[str, str] = {}  # unit key -> the loaded group it came from
        self._groups: dict[str, tuple[tuple[str, ...], tuple, Any]] = {}  # group -> (units, serialized, code library)

    @staticmethod
    def symbol(key: str) -> str:
        """The symbol of the unit ``key``'s entry point."""
        return f"popjit.unit.{key}"

    def ready(self, key: str, kernel: bool = False) -> bool:
        """Whether unit ``key`` is loaded, loading its group from the cache if it is kept there."""
        if key in self._group_of:
            return True
        directory = self._directory(kernel)
        pointer = read_entry(directory / f"{key}.unit", UNIT_MAGIC, key) if directory is not None else None
        if pointer is None:
            return False
        group, path = pointer[0], directory / f"{pointer[0]}.group"
        fields = read_entry(path, GROUP_MAGIC, group)
        if fields is None:
            return False
        try:
            if key not in fields[0]:
                raise ValueError(f"the group does not hold unit {key}")
            self.load(group, *fields)
        except Exception as e:  # why: LLVM and format errors of every kind mean the file is damaged
            discard_entry(path, e)
            return False
        return True

    def load(self, group: str, units: tuple[str, ...], serialized: tuple) -> None:
        """Load the group ``group`` of ``units`` from ``serialized`` (a code library's object), unless
        every unit in it is loaded."""
        if all(unit in self._group_of for unit in units):
            return
        library = _unserialized(serialized)
        self._groups[group] = (tuple(units), serialized, library)
        for unit in units:
            self._group_of.setdefault(unit, group)

    def keep(self, units: tuple[str, ...], serialized: tuple, kernel: bool = False) -> None:
        """Load the group of ``units`` just compiled into ``serialized``, and save it."""
        group = hashlib.sha256(" ".join(units).encode()).hexdigest()[:24]
        self.load(group, units, serialized)
        directory = self._directory(kernel)
        if directory is not None:
            keep_entry(directory / f"{group}.group", GROUP_MAGIC, group, units, serialized)
            for unit in units:  # why after the group: a unit's file never names a group not yet there
                keep_entry(directory / f"{unit}.unit", UNIT_MAGIC, unit, group)

    def loaded_groups(self) -> list[tuple[str, tuple[str, ...], tuple, Any]]:
        """Every group this process has loaded, as :meth:`groups_of` gives them."""
        return [(group, *self._groups[group]) for group in sorted(self._groups)]

    def groups_of(self, units: Iterable[str]) -> list[tuple[str, tuple[str, ...], tuple, Any]]:
        """The loaded groups that hold ``units``, as (group, its units, serialized object, code library)."""
        return [(group, *self._groups[group]) for group in sorted({self._group_of[unit] for unit in units})]

    @staticmethod
    def _directory(kernel: bool) -> Path | None:
        directory = generation_dir() / ("kernels" if kernel else "units")
        return directory if usable_dir(directory) else None


_UNITS = _Units()


def _codelet_source(fn: Any) -> str | None:
    """The source of a generated codelet (None for any other function)."""
    return getattr(sys.modules.get(fn.py_func.__module__), "__source__", None)


class _LinkedModules:
    """The bitcode of the modules a part links to (its kernels), each library's made once per build."""

    def __init__(self) -> None:
        self.bitcode: dict[int, bytes] = {}

    def part(self, part: _Part) -> Part:
        """``part`` to compile: its library's own module, its codelets' IR and its kernels' modules."""
        kernels = list({id(lib): lib for lib in part.library._linking_libraries}.values())
        for lib in kernels:
            if id(lib) not in self.bitcode:
                self.bitcode[id(lib)] = lib._get_module_for_linking().as_bitcode()
        return Part(part.library._final_module.as_bitcode(), part.texts, [self.bitcode[id(lib)] for lib in kernels],
                    part.optimize, part.simplify, part.level)


def _check_returns_int64(name: str, compiled: Any) -> None:
    """The engine calls every callee as returning int64: anything else is a bug."""
    returns = numba.types.unliteral(compiled.signature.return_type)
    if returns != numba.types.int64:
        raise InternalError(f"popjit: {name} returns {returns}, not int64")


#: The package of popjit's kernel library (matmuls, copies…), compiled once per machine.
KERNELS = "popjit.kernels."


def _compile_into(library: Any, name: str, fn: Any, types: tuple, symbol: str) -> Any:
    """Compile ``fn`` for ``types`` by Numba's pipeline into ``library`` (its machine code made with the
    part's), behind the engine's entry point ``symbol``; Numba's result."""
    typing, target = cpu_target.typing_context, cpu_target.target_context
    compiled = compiler.compile_extra(typing, target, fn.py_func, types, None, _flags(fn), fn._compiler.locals,
                                      library=library)
    _check_returns_int64(name, compiled)
    _add_pointer_entry(library, symbol, compiled.fndesc.llvm_cfunc_wrapper_name, types)
    return compiled


def _link_kernel(library: Any, fn: Any, types: tuple, symbol: str) -> str:
    """Write library kernel ``fn`` for ``types`` into ``library`` behind a strong entry point ``symbol``
    that calls its C entry point: compiled by Numba's pipeline into it, or, when this process has
    compiled it already (called from Python), linked from its dispatcher. why not through the
    dispatcher always: it makes machine code of its own, which the kernel library (kept per machine)
    never uses (the own gemm's drivers: 1-2 s of LLVM time each). why a strong entry point: a linked
    library's functions become weak (``linkonce_odr``) symbols, which a program library loaded from the
    cache in a later process does not resolve."""
    if types not in fn.overloads:
        _compile_into(library, fn.py_func.__name__, fn, types, symbol)
        return symbol
    compiled = fn.overloads[types]
    _check_returns_int64(fn.py_func.__name__, compiled)
    _add_pointer_entry(library, symbol, compiled.fndesc.llvm_cfunc_wrapper_name, types)
    library.add_linking_library(compiled.library)
    return symbol


class _EntryPoints:
    """The kernel entry points (:func:`load_entry`) a program library's build meets in the code it
    writes: each one the kernel library lacks is compiled in a part of its own with the build's."""

    def __init__(self) -> None:
        self.called: set[str] = set()
        self.written: set[str] = set()
        self.keys: set[str] = set()

    @contextlib.contextmanager
    def noting(self) -> Iterator[None]:
        """Note the entry points called by the code written in the block (instead of loading them)."""
        global _NOTED
        _NOTED = self.called
        try:
            yield
        finally:
            _NOTED = None

    def new(self) -> list[tuple[_Part, tuple[str]]]:
        """The parts of the entry points called since the last time that are neither loaded nor written,
        each after those of the entry points it calls itself (loaded first: see :meth:`built`)."""
        parts = []
        for symbol in sorted(self.called - self.written):
            if symbol in self.written:  # why: written meanwhile, as an entry point an earlier one calls
                continue
            self.written.add(symbol)
            key = _entry_unit(symbol)[0]
            if not _UNITS.ready(key, kernel=True):
                part = _entry_part(symbol)  # why first: compiling it notes the entry points it calls
                parts += [*self.new(), part]
                self.keys.add(key)
        return parts

    def built(self, units: tuple[str, ...]) -> bool:
        """Whether ``units`` is an entry point's part of this build."""
        return bool(units) and units[0] in self.keys


#: The entry points a build notes (:meth:`_EntryPoints.noting`), or None outside one.
_NOTED: set[str] | None = None


def load_entry(symbol: str) -> None:
    """Have the kernel entry point ``symbol`` loaded before the code calling it that is being lowered (such
    as :func:`popjit.kernels.gemm.call_gemm_block`'s, through :func:`popjit.kernels.jit.entry_called`): in a
    program library's build, noted (compiled with its parts, loaded before them); else loaded now
    (compiled if the kernel library lacks it), as the JIT resolves the call when it loads the caller."""
    if _NOTED is not None:
        _NOTED.add(symbol)
    else:
        _load_entry_now(symbol)


def _entry_unit(symbol: str) -> tuple[str, Any, tuple]:
    """The unit key of the kernel entry point ``symbol``, its kernel and the types it is compiled for."""
    # why here: importing the kernels compiles or loads them from the cache directory (see implicit.py)
    from popjit.kernels import gemm

    fn, types = gemm.entry_kernel(symbol)
    key = _unit_key(fn, types, None, symbol)
    assert key is not None
    return key, fn, types


def _entries_declared(bitcode: bytes) -> list[str]:
    """The kernel entry points a compiled part calls (declares without defining)."""
    if ENTRY_PREFIX.encode() not in bitcode:  # why first: most parts name none, and parsing costs
        return []
    module = llvm.parse_bitcode(bitcode)
    return [f.name for f in module.functions if f.name.startswith(ENTRY_PREFIX) and f.is_declaration]


def _entry_part(symbol: str) -> tuple[_Part, tuple[str]]:
    """A part holding the kernel entry point ``symbol`` alone, and its unit key."""
    key, fn, types = _entry_unit(symbol)
    part = _Part(_new_library(f"entry.{key}"), level=None)
    _link_kernel(part.library, fn, types, symbol)
    return part, (key,)


def _load_entry_now(symbol: str) -> None:
    """Load the kernel entry point ``symbol`` from the kernel library, compiling it first if it is not
    kept there."""
    if _UNITS.ready(_entry_unit(symbol)[0], kernel=True):
        return
    part, units = _entry_part(symbol)
    with PartCompiler(1) as compiler:
        code = compiler.submit(_LinkedModules().part(part)).result()
    _UNITS.keep(units, _serialized(part, code), kernel=True)


def _add_pointer_entry(library: Any, symbol: str, target: str, types: tuple) -> None:
    """Add ``symbol`` to ``library``: the engine's entry point (:func:`~popjit.codegen.abi.pointer_entry`)
    of ``target``, a function Numba compiled for ``types``."""
    context = cpu_target.target_context
    module = context.create_module(symbol)
    pointer_entry(context, module, symbol, target, types)
    library.add_ir_module(module)


class _DirectCodelets:
    """Generated codelets written as LLVM IR by :mod:`popjit.codegen.direct`, one module each, into a
    code library (those it cannot translate are left to Numba)."""

    def __init__(self) -> None:
        self.context: Any = None

    def emit(self, part: _Part, fn: Any, types: tuple, source: str, symbol: str) -> bool:
        """Write generated codelet ``fn`` (of ``source``) for ``types`` as function ``symbol``: its module's
        IR appended to the part's texts (the kernels it calls linked to its library); False when it is
        outside what the translator handles."""
        library = part.library
        if self.context is None:
            self.context = compiler._make_subtarget(cpu_target.target_context, _flags(fn))
        name = fn.py_func.__name__
        module = self.context.create_module(symbol)
        try:
            with self.context.push_code_library(library):
                emit_codelet(self.context, module, symbol, source, name, fn.py_func.__globals__, types)
        except Unsupported as e:
            _log.debug("%s is compiled by Numba: %s", name, e)
            return False
        if WIDEST_VECTORS in source:
            _prefer_widest_vectors(module.get_global(symbol))
        self.context.post_lowering(module, library)  # why: the codelet's fast-math flags
        part.texts.append(cgutils.normalize_ir_text(str(module)))
        part.simplify.append(TRAP_FLAGS in source)
        return True


def _prefer_widest_vectors(function: ir.Function) -> None:
    """Let LLVM vectorise ``function`` with 512-bit vectors where the host has them (AVX-512; the
    attribute is ignored elsewhere). why: LLVM's tuning for Intel's AVX-512 cores prefers 256-bit
    vectors, to spare mixed code the frequency drop of older Xeons; a codelet computing each element
    alone (the chain benchmark's tanh and sigmoid) ran 20% faster per core with them on Sapphire
    Rapids. Its results are the same: every lane does the scalar code's operations."""
    # why set.add: llvmlite's FunctionAttributes.add accepts only LLVM's enum attributes, not key="value" ones
    set.add(function.attributes, '"prefer-vector-width"="512"')


def _flags(fn: Any) -> compiler.Flags:
    """The dispatcher's own compile flags (popjit's options), lowered into a shared library: no
    machine code per function, and no CPython wrapper (the engine calls the C entry point)."""
    flags = compiler.Flags()
    fn.targetdescr.options.parse_as_flags(flags, fn.targetoptions)
    flags.no_compile = True
    flags.no_cpython_wrapper = True
    return flags


def _set_environments(library: Any, environments: list[Any]) -> None:
    for env in environments:
        library.codegen.set_env(env.env_name, env)


def _environment(name: str, consts: list) -> Environment:
    """The Numba environment ``name`` (a function's run-time constants), made again when not live.
    why: Numba pickles one with its module's name to import, and generated modules are not importable;
    compiled codelets never read their module's globals at run time, only the constants."""
    env = lookup_environment(name)
    if env is None:
        env = Environment({})
        env.consts[:] = consts
        env.env_name = name
        Environment._memo[name] = env
    return env


def _load(path: Path, key: str) -> ProgramLibrary | None:
    fields = read_entry(path, MAGIC, key)
    if fields is None:
        return None
    try:
        return _from_entry(fields)
    except Exception as e:  # why: LLVM and format errors of every kind mean the file is damaged
        return discard_entry(path, e)


def _from_entry(entry: tuple) -> ProgramLibrary:
    """Load the library a kept ``entry`` (what :func:`_build` returns with it) describes: its units (those
    this process has not loaded yet), then its own parts."""
    serialized, engine, names, environments, unit_groups = entry
    for group, units, code in unit_groups:
        _UNITS.load(group, units, code)
    library = _loaded(serialized, engine, names, [_environment(name, consts) for name, consts in environments])
    library.unit_parts = [(code, loaded) for _, _, code, loaded in _UNITS.groups_of(u for _, units, _ in unit_groups
                                                                                     for u in units)]
    return library


def _unserialized(serialized: tuple) -> Any:
    """A kept part (a code library's object) loaded into Numba's JIT, after registering Numba's run-time
    (NRT) symbols, which its machine code may refer to (popjit's own gemm allocates its packed panels),
    and loading the kernel entry points it calls. why first: the JIT resolves its calls as it loads it."""
    for symbol in _entries_declared(serialized[2][1]):
        _load_entry_now(symbol)
    target = cpu_target.target_context
    rtsys.initialize(target)
    return target.codegen().unserialize_library(serialized)


def _loaded(serialized: list[tuple], engine: str, names: list[str], environments: list[Any],
            compiled: int = 0, through_numba: int = 0) -> ProgramLibrary:
    """Load a program library's parts (object code and the bitcode naming their symbols) into Numba's
    JIT, as a library built in this process (``compiled`` functions, ``through_numba`` of them by
    Numba's pipeline) or read from the cache (none compiled)."""
    libraries = [_unserialized(part) for part in serialized]
    _set_environments(libraries[0], environments)
    addresses = [libraries[0].get_pointer_to_function(n) for n in names]  # why: the JIT's symbols are process-wide
    return ProgramLibrary(libraries, libraries[0].get_pointer_to_function(engine), addresses, compiled,
                          through_numba)
