"""A program's machine code: its engine and every function the engine calls, compiled into one library and
cached as one file.

The engine (:mod:`popjit.codegen.native`) calls its callees (generated codelets, library kernels such
as ``matmul_f32``) through their C entry points. They are compiled together, in a few parts
(:func:`balanced_parts`, two per thread) that :mod:`popjit.codegen.machine` optimises and turns into
object code in parallel: each codelet is written as LLVM IR (or typed and lowered by Numba,
``no_compile``) into its part, and each part is optimised and compiled once, instead of once per
function, on a thread while the next part is written. With more than one thread the engine's LLVM
module is a part of its own, compiled first (it is the largest: 0.5 s of LLVM's time for the Keras
CNN), while Numba's registries load and the codelets are written; with one it joins the only part. The
parts' object code, the symbol names of the engine and the entry points, and the functions' Numba
environments (their constants) are saved as ``programs/<key>.lib`` in the cache generation directory
(or, under ``--executable_cache_path``, in the program's own ``.poplar_exec`` file, a
:class:`LibraryStore`), ``<key>`` hashing the engine, the callees (their names hash their source), the
types they are called with and the host CPU. A later process loads that one file: no typing, no
lowering, and not even Numba's typing registries (0.3 s in a fresh process,
:func:`load_numba_registries`) are needed, so a cached program starts in milliseconds.

Scalar kernels a codelet calls (``km.exp``…) and the library kernels the engine calls (``matmul_f32``…)
are Numba functions cached once per machine; their code is linked into each program library that uses
them (the scalar ones inlined, so loops vectorise). A damaged entry is warned about once, deleted and
built again, as every cache file is.
"""

from __future__ import annotations

import hashlib
import logging
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

import numba
from llvmlite import ir
from numba.core import cgutils, compiler
from numba.core.compiler_lock import global_compiler_lock
from numba.core.environment import Environment, lookup_environment
from numba.core.registry import cpu_target
from numba.core.runtime import rtsys

from popjit import config
from popjit.codegen.abi import pointer_entry
from popjit.codegen.direct import Unsupported, emit_codelet
from popjit.codegen.machine import ObjectCode, Part, PartCompiler
from popjit.codegen.render import WIDEST_VECTORS
from popjit.errors import InternalError
from popjit.kernels.jit import cache_root, discard_entry, fingerprint, keep_entry, read_entry, usable_dir, warn_once
from popjit.kernels.threads import threads_to_use

_log = logging.getLogger("popjit")

#: Told ``(done, total)`` as the callees of a program library are compiled.
Progress = Callable[[int, int], None]

#: Marks a program library file; a file without it is not one (damaged or foreign).
MAGIC = "popjit-program-library-2"


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
    directory = cache_root() / f"gen-{fingerprint()}" / "programs"
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
    """Compile the engine and ``functions`` into a program library, part by part: each part is
    compiled on a thread (:class:`~popjit.codegen.machine.PartCompiler`) while the next is written.
    The engine is a part of its own, compiled first (while Numba's registries load and the codelets
    are written) and without optimisation: it only sequences calls, and LLVM's passes and optimised
    code emission took 0.9 s of CPU time for the Keras CNN's engine against 0.08 s without. It joins
    its part as IR text, as the codelets do, parsed on the thread that compiles it."""
    distinct = list({(id(fn), types): (name, fn, types) for (name, types), fn in zip(callees, functions)}.values())
    direct = _DirectCodelets() if config.get("DIRECT_CODELETS") else None
    sources = [_codelet_source(fn) if direct else None for _, fn, _ in distinct]
    threads = threads_to_use()
    groups = _groups([(*callee, source) for callee, source in zip(distinct, sources)],
                     [len(source) if source else _OTHER_WEIGHT for source in sources],
                     PARTS_PER_THREAD * threads if threads > 1 else 1)
    debug = config.get("DEBUG") >= 7
    linked = _LinkedModules()
    writer = _PartWriter(len(distinct), direct, progress)
    parts: list[_Part] = []
    compiled: list[Future[ObjectCode]] = []
    with PartCompiler(threads, assembly=debug) as compiler:

        def submit(part: _Part) -> None:
            parts.append(part)
            compiled.append(compiler.submit(linked.part(part)))

        engine_text = cgutils.normalize_ir_text(str(engine_module))  # why text: parsed on the compiling thread
        submit(_Part(_new_library("engine"), [engine_text], optimize=False))
        load_numba_registries()
        for members in groups:
            submit(writer.part(str(len(parts)), members))
        objects = [future.result() for future in compiled]
    symbols, environments = writer.symbols, writer.environments
    if debug:
        assembly = "\n".join(part.assembly or "" for part in objects)
        print(f"=== popjit: machine code of program library {key} ===\n{assembly}", file=sys.stderr)
    names = [symbols[(id(fn), types)] for (_, types), fn in zip(callees, functions)]
    serialized = [(part.library.name, "object", (code.code, code.bitcode)) for part, code in zip(parts, objects)]
    entry = (serialized, engine, names, [(env.env_name, list(env.consts)) for env in environments])
    return _loaded(serialized, engine, names, environments, len(symbols), len(environments)), entry


def _new_library(name: str) -> Any:
    """An empty code library for a part of a program library."""
    return cpu_target.target_context.codegen().create_library(f"popjit_program.{name}")


def _callee(part: _Part, direct: _DirectCodelets | None, name: str, fn: Any, types: tuple, source: str | None,
            index: int) -> tuple[str, Environment | None]:
    """Put callee ``fn`` for ``types`` into ``part``: its symbol, and its Numba environment when Numba's
    pipeline compiled it (a codelet the IR writer does not handle)."""
    symbol = direct.emit(part.library, part.texts, fn, types, source) if direct and source else None
    if symbol is None and fn.py_func.__module__.startswith(KERNELS):
        symbol = _link_kernel(part.library, fn, types, f"popjit.kernel.{index}")
    if symbol is not None:
        return symbol, None
    typing, target = cpu_target.typing_context, cpu_target.target_context
    compiled = compiler.compile_extra(typing, target, fn.py_func, types, None, _flags(fn), fn._compiler.locals,
                                      library=part.library)
    _check_returns_int64(name, compiled)
    symbol = f"popjit.callee.{index}"
    _add_pointer_entry(part.library, symbol, compiled.fndesc.llvm_cfunc_wrapper_name, types)
    return symbol, compiled.environment


Callee = tuple[str, Any, tuple, "str | None"]
"""A callee to write: its name, function, argument types and generated source (None if not generated)."""


def _groups(callees: Sequence[Callee], weights: Sequence[int], parts: int) -> list[list[Callee]]:
    """``callees`` cut into at most ``parts`` groups of about equal weight (:func:`balanced_parts`);
    none when there are no callees."""
    part_of = balanced_parts(weights, parts)
    count = max(part_of, default=-1) + 1
    return [[callee for callee, p in zip(callees, part_of) if p == index] for index in range(count)]


class _PartWriter:
    """Writes parts of a program library and keeps what they hold: each callee's symbol (by function
    and types) and the Numba environments of the callees Numba's pipeline compiled."""

    def __init__(self, total: int, direct: _DirectCodelets | None, progress: Progress | None) -> None:
        self.total, self.direct, self.progress = total, direct, progress
        self.symbols: dict[tuple[int, tuple], str] = {}
        self.environments: list[Any] = []

    def part(self, part_name: str, members: Sequence[Callee]) -> _Part:
        """A new part named ``part_name`` holding ``members``."""
        part = _Part(_new_library(part_name))
        for name, fn, types, source in members:
            symbol, environment = _callee(part, self.direct, name, fn, types, source, len(self.symbols))
            self.symbols[(id(fn), types)] = symbol
            if environment is not None:
                self.environments.append(environment)
            if self.progress is not None:
                self.progress(len(self.symbols), self.total)
        return part


#: The weight of a callee that is not a generated codelet written as LLVM IR (its source length is).
_OTHER_WEIGHT = 2000
PARTS_PER_THREAD = 2
"""With more than one thread, a program library is compiled in up to this many parts per thread (so a
thread that finishes early takes another part); with one, in one part."""


@dataclass
class _Part:
    """A part of a program library: a code library (its Numba-compiled functions and the kernels
    linked in) and the IR text of its codelets, parsed on the thread that compiles the part."""

    library: Any
    texts: list[str] = field(default_factory=list)
    optimize: bool = True  # see :attr:`popjit.codegen.machine.Part.optimize`


def balanced_parts(weights: Sequence[int], parts: int) -> list[int]:
    """The part (0, 1, …) of each of ``weights``, into at most ``parts`` parts of about equal sums:
    heaviest first, each to the lightest part so far. No part is empty."""
    count = max(1, min(parts, len(weights)))
    totals = [0] * count
    part_of = [0] * len(weights)
    for i in sorted(range(len(weights)), key=lambda i: -weights[i]):
        lightest = totals.index(min(totals))
        totals[lightest] += weights[i]
        part_of[i] = lightest
    return part_of


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
                    part.optimize)


def _check_returns_int64(name: str, compiled: Any) -> None:
    """The engine calls every callee as returning int64: anything else is a bug."""
    returns = numba.types.unliteral(compiled.signature.return_type)
    if returns != numba.types.int64:
        raise InternalError(f"popjit: {name} returns {returns}, not int64")


#: The package of popjit's kernel library (matmuls, copies…), compiled once per machine.
KERNELS = "popjit.kernels."


def _link_kernel(library: Any, fn: Any, types: tuple, symbol: str) -> str:
    """Link library kernel ``fn`` for ``types`` into ``library`` from its dispatcher (Numba's on-disk
    cache after the first time on a machine, where compiling it into each program cost 0.2 s for
    ``matmul_f32`` alone), behind a strong entry point ``symbol`` that calls its C entry point.
    why: a linked library's functions become weak (``linkonce_odr``) symbols, which a program
    library loaded from the cache in a later process does not resolve."""
    if types not in fn.overloads:
        fn.compile(types)
    compiled = fn.overloads[types]
    _check_returns_int64(fn.py_func.__name__, compiled)
    _add_pointer_entry(library, symbol, compiled.fndesc.llvm_cfunc_wrapper_name, types)
    library.add_linking_library(compiled.library)
    return symbol


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
        self.count = 0

    def emit(self, library: Any, texts: list[str], fn: Any, types: tuple, source: str) -> str | None:
        """The symbol of generated codelet ``fn`` (of ``source``) for ``types``, its module's IR appended
        to ``texts`` (the kernels it calls linked to ``library``), or None (outside what the translator
        handles)."""
        if self.context is None:
            self.context = compiler._make_subtarget(cpu_target.target_context, _flags(fn))
        name = fn.py_func.__name__
        symbol = f"{name}.{self.count}"
        module = self.context.create_module(symbol)
        try:
            with self.context.push_code_library(library):
                emit_codelet(self.context, module, symbol, source, name, fn.py_func.__globals__, types)
        except Unsupported as e:
            _log.debug("%s is compiled by Numba: %s", name, e)
            return None
        if WIDEST_VECTORS in source:
            _prefer_widest_vectors(module.get_global(symbol))
        self.context.post_lowering(module, library)  # why: the codelet's fast-math flags
        texts.append(cgutils.normalize_ir_text(str(module)))
        self.count += 1
        return symbol


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
    """Load the library a kept ``entry`` (what :func:`_build` returns with it) describes."""
    serialized, engine, names, environments = entry
    return _loaded(serialized, engine, names, [_environment(name, consts) for name, consts in environments])


def _loaded(serialized: list[tuple], engine: str, names: list[str], environments: list[Any],
            compiled: int = 0, through_numba: int = 0) -> ProgramLibrary:
    """Load a program library's parts (object code and the bitcode naming their symbols) into Numba's
    JIT, as a library built in this process (``compiled`` functions, ``through_numba`` of them by
    Numba's pipeline) or read from the cache (none compiled)."""
    target = cpu_target.target_context
    rtsys.initialize(target)  # why: registers Numba's run-time (NRT) symbols the machine code refers to
    libraries = [target.codegen().unserialize_library(part) for part in serialized]
    _set_environments(libraries[0], environments)
    addresses = [libraries[0].get_pointer_to_function(n) for n in names]  # why: the JIT's symbols are process-wide
    return ProgramLibrary(libraries, libraries[0].get_pointer_to_function(engine), addresses, compiled,
                          through_numba)
