"""Compile phases: each step that turns a program into machine code, timed and logged, and the compile
progress bar.

A program compiles in two steps. :func:`popjit.pipeline.compiler.compile_graph` runs the graph passes,
the lowering to loop IR (and the loop passes), the tile schedule (IPU programs only) and the code
generation; then the program's first run links its engine (:class:`popjit.codegen.compile.Engine`):
its machine code (every codelet it calls, and the engine) is compiled, or loaded from the cache. Each
step is a phase::

    phases = Phases("train_step")
    with phases.phase("graph passes"):
        graph = optimize_graph(graph)
    phases.summary()        # 'graph passes 0.004 s'

Python's cyclic garbage collector is paused while a phase runs (:func:`gc_paused`). Phases are logged on the
``popjit`` logger at INFO level (``popjit run --verbose`` prints them, as does
``logging.getLogger("popjit").setLevel(logging.INFO)`` with a handler), in the spirit of Poplar's
"Starting phase" logs::

    Starting phase: machine code of 'train_step'
    Finished phase: machine code of 'train_step' in 3.224 s (12 codelets compiled, 0 from the cache)

:class:`CompileProgress` is the progress bar of the codelets being compiled: with
``TF_POPLAR_FLAGS=--show_progress_bar=true`` (or ``auto`` on a terminal) it appears on stderr once a
program's codelets have been compiling for :data:`BAR_DELAY` seconds, so quick compiles stay silent.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from popjit.flags import poplar_flags

log = logging.getLogger("popjit")

#: Seconds of compiling codelets after which the progress bar appears.
BAR_DELAY = 1.0

# why: rich allows one live display per process; a second program linking in another thread meanwhile
# compiles without a bar
_BAR_LOCK = threading.Lock()

_GC_LOCK = threading.Lock()
_gc_pauses = 0  # blocks in gc_paused, on any thread
_gc_was_enabled = False  # whether the collector ran before the first of them


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused for the block (and the blocks nested in it or running on
    other threads meanwhile), then as it was: a collector the user switched off stays off.

    why: a compile makes many objects that live until it ends, and every full collection walks every object
    of the process, which holds Numba's and popjit's module graphs: in the Keras CNN's cold first call, the
    collector ran 220 times for 0.3 s, two full collections 0.22 s of it, against under 0.09 s with the
    compile's phases paused. The cycles a compile leaves (its LLVM IR objects) are collected after it."""
    global _gc_pauses, _gc_was_enabled
    with _GC_LOCK:
        if _gc_pauses == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_pauses += 1
    try:
        yield
    finally:
        with _GC_LOCK:
            _gc_pauses -= 1
            if _gc_pauses == 0 and _gc_was_enabled:
                gc.enable()


@dataclass
class Phase:
    """One finished (or running) phase: its name, wall time, and a note on what it did."""

    name: str
    seconds: float = 0.0
    note: str = ""


@dataclass
class Phases:
    """The timed phases of compiling one program, logged as they start and finish."""

    program: str
    done: list[Phase] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[Phase]:
        """Time the block as the phase ``name`` (with the garbage collector paused, :func:`gc_paused`); set
        ``.note`` on what it yields to extend its log line. A phase that raises is neither recorded nor
        logged as finished."""
        log.info("Starting phase: %s of '%s'", name, self.program)
        current = Phase(name)
        t0 = time.perf_counter()
        with gc_paused():
            yield current
        current.seconds = time.perf_counter() - t0
        self.done.append(current)
        note = f" ({current.note})" if current.note else ""
        log.info("Finished phase: %s of '%s' in %.3f s%s", name, self.program, current.seconds, note)

    def elapsed(self) -> float:
        """Seconds since these phases were created."""
        return time.perf_counter() - self.started

    def summary(self) -> str:
        """``graph passes 0.004 s, lowering 0.010 s, ...``: every finished phase with its time."""
        return ", ".join(f"{p.name} {p.seconds:.3f} s" for p in self.done)


def codelets_note(compiled: int, callees: int, through_numba: int = 0) -> str:
    """What the machine-code phase did for a program of ``callees`` distinct callees, ``compiled`` of
    them compiled and the others' machine code cached (the program's library, or units other programs
    share): ``12 codelets compiled, 0 from the cache, 2 through Numba`` (``through_numba``: how many went
    through Numba's pipeline rather than straight to LLVM IR), ``2 codelets compiled, 39 from the cache``."""
    numba = f", {through_numba} through Numba" if through_numba else ""
    plural = "" if compiled == 1 else "s"
    return f"{compiled} codelet{plural} compiled, {callees - compiled} from the cache{numba}"


class CompileProgress:
    """The progress bar of one program's codelets, called as ``progress(done, total)`` after each codelet
    is compiled. It appears once they have been compiling for :data:`BAR_DELAY` seconds, with
    ``TF_POPLAR_FLAGS=--show_progress_bar=true`` (or ``auto`` on a terminal), and is left complete when
    the block ends::

        with CompileProgress("train_step") as progress:
            build(progress)
    """

    def __init__(self, program: str) -> None:
        self.program = program
        self._show = poplar_flags().progress_bar
        self._started = time.perf_counter()
        self._bar: Any = None

    def __enter__(self) -> CompileProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            progress, task = self._bar
            self._bar = None
            try:
                progress.update(task, stage="codelets")
                progress.stop()
            finally:
                _BAR_LOCK.release()

    def __call__(self, done: int, total: int) -> None:
        """``done`` of the program's ``total`` codelets are compiled (when all are, LLVM optimises them
        into machine code: the bar says so until the block ends)."""
        if self._bar is None:
            self._maybe_open(done, total)
        if self._bar is not None:
            progress, task = self._bar
            stage = "codelets, optimising" if done >= total else "codelets"
            progress.update(task, completed=done, total=total, stage=stage)
            progress.tasks[0].finished_time = None  # why: the clock runs on while LLVM makes the machine code

    def _maybe_open(self, done: int, total: int) -> None:
        if not self._show or time.perf_counter() - self._started < BAR_DELAY:
            return
        self._show = False  # one attempt: another thread's bar may be showing
        if _BAR_LOCK.acquire(blocking=False):
            self._bar = _open_bar(self.program, total, done, self._started)


def _open_bar(program: str, total: int, completed: int, started: float) -> tuple[Any, Any]:
    """A started rich progress bar on stderr, and its task, its clock running from ``started``
    (``time.perf_counter``). On a terminal it redraws in place; elsewhere (a log file) rich prints it
    once, complete, when it stops."""
    # why: rich costs tens of milliseconds to import; only compiles slow enough for a bar pay for it
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    progress = Progress(TextColumn("Compiling '{task.description}'"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("{task.fields[stage]}"), TimeElapsedColumn(), console=Console(stderr=True),
                        redirect_stdout=False, redirect_stderr=False, get_time=time.perf_counter)
    task = progress.add_task(program, total=total, completed=completed, stage="codelets", start=False)
    progress.tasks[0].start_time = started  # why: the clock counts the whole compile, not from the bar's appearance
    progress.start()
    return progress, task
