"""Object code for several LLVM modules at once, one thread each.

A program library is cut into parts (:mod:`popjit.codegen.library`): a part is an LLVM module (as
bitcode), the IR text of more modules to link into it (the codelets written as IR) and the modules
of the libraries they call (the kernels, linked last: LLVM's linker takes only the functions of
theirs that are referenced by then). Each part's modules are parsed, given Numba's per-function
passes, linked, optimised and turned into object code here, the parts in parallel on the cores
popjit may use.

llvmlite runs every call into LLVM under one process-wide lock, because its modules share LLVM's
global context, which is not safe to use from two threads. LLVM allows threads that use separate
contexts (and separate target machines): each part is parsed into a context of its own, optimised
with its own pass builder and emitted by its own target machine, so the two long calls (the
optimisation pipeline and the code emission) run without llvmlite's lock and release the GIL.
Nothing in the global context is touched by them.

The optimisation is Numba's: the function passes ``CodeLibrary.add_ir_module`` runs on each added
module, then its "cheap" module pipeline (inlining, for reference-count pruning) and its full one,
with Numba's options and target machine settings, as Numba's ``finalize`` runs them, except that a part
of codelets written as IR runs the full pipeline at LLVM's level 2 (:data:`CODELET_LEVEL`). One step of
Numba's is left out, for compile time: loop strength reduction, in code emission (``-disable-lsr``
while a part is emitted), which searched the codelets' many address streams for 0.45 s of the Keras
CNN's 2.6 s of LLVM time, with its epochs no slower.

why the function passes stay for codelets with floating-point trap checks (:data:`Part.simplify`): without
them (tried, 5aada34) such a codelet was not vectorised (its flags are or-ed in the loop), and the
benchmark chain with ``inv``/``div0``/``oflo`` on ran 6-7x slower in float32 (603-753 ms a call against
102-104 ms with them) and 11x in float16 (1307-1345 ms against 115 ms). The codelets without traps ran
as fast either way, so they skip them: on the Keras CNN's parts the passes cost 0.2-0.3 s of the 1.4-1.7
s of LLVM time (one Emerald Rapids core, both ways alternating five times in one process).
"""

from __future__ import annotations

import contextlib
import ctypes
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import llvmlite.binding as ll
from llvmlite.binding import ffi
from numba.core import config as numba_config
from numba.core.codegen import _parse_refprune_flags
from numba.core.llvm_bindings import create_pass_builder
from numba.core.registry import cpu_target


@dataclass(frozen=True)
class ObjectCode:
    """One part compiled: its object code, its optimised module as bitcode (the symbols it defines,
    for the JIT's lookup) and, when asked for, its assembly."""

    code: bytes
    bitcode: bytes
    assembly: str | None = None


@dataclass(frozen=True)
class Part:
    """What one thread compiles: a module as bitcode, the IR text of modules to link into it, and the
    bitcode of the library modules they call."""

    bitcode: bytes
    texts: Sequence[str] = ()
    libraries: Sequence[bytes] = ()
    optimize: bool = True
    """False: no optimisation passes, and the code emitted by LLVM's fast instruction selector and
    register allocator (optimisation level 0). For the engine, which only sequences calls."""
    simplify: Sequence[bool] | None = None
    """Per text, whether Numba's function passes simplify it before it is linked (None: every text)."""
    level: int | None = None
    """The level of the full optimisation pipeline (None: Numba's, ``NUMBA_OPT``): :data:`CODELET_LEVEL`
    for a part of generated codelets written as IR alone."""


CODELET_LEVEL = 2
"""The level of the full optimisation pipeline for parts of generated codelets written as IR (the library
kernels and the code Numba's pipeline lowers keep Numba's, 3). why not 3: LLVM's level 3 adds passes such as
non-trivial loop unswitching, which copies a codelet's loop for each value of a condition that does not vary
in it (a max-pool gradient's padding and index tests). On the Keras CNN's 35 codelets, level 2 took 1.18-1.25 s
of LLVM time against 1.57-1.75 s (one Emerald Rapids core, each alone), its argmaxes 0.09 against 0.13-0.16 s;
17 codelets compiled to the same instructions, the others to as many vector instructions or nearly; the max-pool
gradients ran as fast or faster ([16,56,56,64] 3x3/2: 15.1-17.1 against 18.1-22.3 ms best, alternating)."""


class PartCompiler:
    """Optimises and compiles parts as they are given, on up to ``threads`` threads, while the caller
    writes the next part (LLVM's long calls release the GIL); with one thread, at once in the caller's.
    Use it as a context manager: leaving it waits for (or, after an error, cancels) what is left.

        with PartCompiler(threads) as compiler:
            first = compiler.submit(part)      # compiling while the next part is written
            ...
        code = first.result()
    """

    def __init__(self, threads: int, assembly: bool = False) -> None:
        self.assembly = assembly
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="popjit-llvm") if threads > 1 else None

    def submit(self, part: Part) -> Future[ObjectCode]:
        """Start compiling ``part``; its object code when the future is done."""
        if self._pool is not None:
            return self._pool.submit(_compile, part, self.assembly)
        done: Future[ObjectCode] = Future()
        try:
            done.set_result(_compile(part, self.assembly))
        except Exception as e:  # why: raised by ``result()``, as from a thread
            done.set_exception(e)
        return done

    def __enter__(self) -> PartCompiler:
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: Any) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=kind is not None)


def _compile(part: Part, assembly: bool) -> ObjectCode:
    context = ll.create_context()
    module = ll.parse_bitcode(part.bitcode, context=context)
    try:
        machine = _target_machine(numba_config.OPT if part.optimize else 0)
        simplify = part.simplify if part.simplify is not None else [True] * len(part.texts)
        for text, simplified in zip(part.texts, simplify, strict=True):
            parsed = _parse(text, context)
            parsed.data_layout = str(machine.target_data)
            _link(module, _function_passes(parsed, machine) if part.optimize and simplified else parsed)
        for library in part.libraries:
            _link(module, ll.parse_bitcode(library, context=context))
        for manager, builder in _pipelines(machine, part.level) if part.optimize else []:
            _unlocked("LLVMPY_RunNewModulePassManager")(manager, module, builder)
        with _without_loop_strength_reduction():
            code = _emit(machine, module, as_object=True)
            text = _emit(machine, module, as_object=False).decode() if assembly else None
        return ObjectCode(code, module.as_bitcode(), text)
    finally:
        module.close()  # why: a module must go before its context
        context.close()


def _target_machine(opt: int) -> Any:
    """A target machine of the host, set up as the one of Numba's JIT (CPU, features, relocation), at
    code-generation optimisation level ``opt``."""
    codegen = cpu_target.target_context.codegen()
    options: dict[str, Any] = {}
    codegen._customize_tm_options(options)
    options["opt"] = opt
    return ll.Target.from_triple(ll.get_process_triple()).create_target_machine(**options)


def _parse(text: str, context: Any) -> Any:
    """The module of IR ``text`` in ``context``, checked (as ``CodeLibrary.add_ir_module`` does)."""
    with ffi.OutputString() as error:
        module = ll.ModuleRef(_unlocked("LLVMPY_ParseAssembly")(context, ctypes.c_char_p(text.encode()), error),
                              context)
        if error:
            module.close()
            raise RuntimeError(f"LLVM IR parsing error\n{error}")
    module.verify()
    return module


def _function_passes(module: Any, machine: Any) -> Any:
    """``module`` after Numba's function-level passes on each of its functions."""
    run = _unlocked("LLVMPY_RunNewFunctionPassManager")
    for function in module.functions:  # why a builder per function: as Numba's add_ir_module does
        builder = _full_builder(machine)
        run(_with_refprune(builder.getFunctionPassManager()), function, builder)
    return module


def _link(into: Any, module: Any) -> None:
    """Link ``module`` into ``into`` (both in one context); ``module`` is consumed."""
    with ffi.OutputString() as error:
        failed = _unlocked("LLVMPY_LinkModules")(into, module, error)
        module.detach()  # why: LLVM destroyed it
        if failed:
            raise RuntimeError(str(error))


def _pipelines(machine: Any, level: int | None = None) -> list[tuple[Any, Any]]:
    """Numba's final-module pipelines for ``machine`` as (pass manager, builder): the cheap one, then
    the full one (at ``level``, None: Numba's)."""
    codegen = cpu_target.target_context.codegen()
    cheap = create_pass_builder(machine, opt=codegen._opt_level, loop_vectorize=codegen._loopvect,
                                slp_vectorize=False)
    cheap_manager = cheap.getModulePassManager()
    if numba_config.OPT != 0:
        cheap_manager.add_loop_rotate_pass()
        cheap_manager.add_instruction_combine_pass()
        cheap_manager.add_jump_threading_pass()
    full = _full_builder(machine, level)
    return [(_with_refprune(cheap_manager), cheap), (_with_refprune(full.getModulePassManager()), full)]


def _full_builder(machine: Any, level: int | None = None) -> Any:
    """A pass builder at optimisation ``level`` (None: Numba's; never above it) with Numba's vectoriser
    settings."""
    return create_pass_builder(machine, opt=numba_config.OPT if level is None else min(level, numba_config.OPT),
                               loop_vectorize=numba_config.LOOP_VECTORIZE,
                               slp_vectorize=numba_config.SLP_VECTORIZE)


def _with_refprune(manager: Any) -> Any:
    """``manager`` with Numba's reference-count pruning pass added, when Numba uses it."""
    if numba_config.LLVM_REFPRUNE_PASS:
        manager.add_refprune_pass(_parse_refprune_flags())
    return manager


_LSR_LOCK = threading.Lock()
_lsr_off = 0  # parts being emitted without loop strength reduction


@contextlib.contextmanager
def _without_loop_strength_reduction() -> Iterator[None]:
    """Emit code inside the block without LLVM's loop strength reduction. why a switch and not a
    setting made once: the option is LLVM's, for the whole process, and other code there (the user's
    own Numba functions) keeps it; it is off while any part is being emitted, on again after."""
    global _lsr_off
    with _LSR_LOCK:
        if _lsr_off == 0:
            ll.set_option("", "-disable-lsr=true")
        _lsr_off += 1
    try:
        yield
    finally:
        with _LSR_LOCK:
            _lsr_off -= 1
            if _lsr_off == 0:
                ll.set_option("", "-disable-lsr=false")


def _emit(machine: Any, module: Any, as_object: bool) -> bytes:
    """``machine``'s object code (or assembly) for ``module``, emitted without llvmlite's lock."""
    with ffi.OutputString() as error:
        buffer = _unlocked("LLVMPY_TargetMachineEmitToMemory")(machine, module, int(as_object), error)
        if not buffer:
            raise RuntimeError(str(error))
    try:
        return ctypes.string_at(ffi.lib.LLVMPY_GetBufferStart(buffer), ffi.lib.LLVMPY_GetBufferSize(buffer))
    finally:
        ffi.lib.LLVMPY_DisposeMemoryBuffer(buffer)


def _unlocked(name: str) -> Any:
    """llvmlite's C function ``name`` without its process-wide lock (see the module docstring); the
    locked one if this llvmlite does not expose it."""
    function = getattr(ffi.lib, name)
    return getattr(function, "_cfn", function)
