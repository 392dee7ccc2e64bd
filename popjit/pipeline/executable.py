"""A compiled program: its IRs, its schedule, and the native engine that runs it.

An IPU program has a tile schedule (mapping, memory, cycles); a host program (a ``tf.function`` run
on the CPU without ``jit_compile=True``) has none: ``schedule`` is None.

A program with infeeds or outfeeds exchanges data with the host around each run through a
:class:`HostFeeds` (the runtime's feed registry, :data:`popjit.runtime.streams.FEEDS`).

A program compiled with floating-point traps (``IPUConfig.floating_point_behaviour``) that raises
one stops there; ``run`` then puts its variables back as they were before the call and raises
TensorFlow's error for a Poplar runtime exception (:func:`trap_error`).
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from popjit.buffers import AlignedLayout, aligned_arrays, data_addresses
from popjit.codegen.compile import buffer_kind
from popjit.codegen.engine import COLLECTIVE_CALLEE, EngineSource, storage_dtype
from popjit.codegen.library import LibraryStore
from popjit.codegen.native import buffer_sizes
from popjit.codegen.numerics import TRAPPED, trap_names
from popjit.errors import FailedPreconditionError, InternalError
from popjit.ir.graph import Graph
from popjit.ir.loop import Buffer, Program
from popjit.kernels.jit import threading_layer
from popjit.kernels.traps import DIV0, INV, OFLO
from popjit.pipeline import interrupts
from popjit.schedule import Schedule, Target, schedule_program


def device_view(array: np.ndarray, buf: Buffer, in_place: bool = False) -> np.ndarray:
    """A flat, contiguous view of ``array`` in the engine's storage type (float16 as uint16).

    ``in_place``: the engine writes the result into ``array`` (a variable), so it must be a view, not a
    copy: ``array`` has to be C-contiguous already."""
    return _flat_view(array, storage_dtype(buf.dtype), in_place)


def _flat_view(array: np.ndarray, want: np.dtype, in_place: bool = False) -> np.ndarray:
    """:func:`device_view` with the storage type known."""
    if in_place:
        assert array.flags.c_contiguous, "a variable's buffer must be C-contiguous: the engine updates it in place"
    flat = np.ascontiguousarray(array).reshape(-1)
    return flat if flat.dtype == want else flat.view(want)


@dataclass(frozen=True)
class _BufferKinds:
    """An executable's buffers by kind, each with its storage type (:func:`storage_dtype`), and the constants'
    addresses."""

    args: list[tuple[Buffer, np.dtype]]
    variables: list[tuple[Buffer, np.dtype]]
    out_types: list[np.dtype]
    stream_in: list[tuple[Buffer, np.dtype]]
    stream_out: list[tuple[Buffer, np.dtype]]
    const_addresses: np.ndarray


def _allocated(bufs: Sequence[Buffer]) -> tuple[list[np.ndarray], np.ndarray]:
    """New uninitialised arrays of ``bufs``' shapes, each starting on a cache line, and their addresses."""
    return aligned_arrays([b.shape for b in bufs], [b.dtype.np for b in bufs])


class HostFeeds(Protocol):
    """The host side of a program's streams: what its infeeds read and where its outfeeds go."""

    def take_inputs(self, program: Program) -> dict[int, np.ndarray]:
        """The infeed elements one execution reads, by stream buffer uid (may raise ``OutOfRangeError``)."""
        ...

    def deliver_outputs(self, program: Program, arrays: dict[int, np.ndarray]) -> None:
        """Hand the outfeeds what one execution wrote, by stream buffer uid."""
        ...


_ENGINE_LOCK = threading.Lock()


def engine_guard() -> contextlib.AbstractContextManager:
    """Serialise engines under Numba's workqueue layer, which aborts the process when two threads
    launch parallel code at once; other layers let engines from different threads overlap."""
    return _ENGINE_LOCK if threading_layer() == "workqueue" else contextlib.nullcontext()


@dataclass
class Executable:
    """One compiled function. ``run`` executes it natively; ``as_text`` shows any stage."""

    graph: Graph
    program: Program
    target: Target | None  # None: a host program
    engine_source: EngineSource
    engine: Any
    compile_seconds: float = 0.0
    runs: int = 0
    _schedule: Schedule | None = None  # computed again on first use for a program from the executable cache
    library_store: LibraryStore | None = None  # where its machine code is kept (None: the program library cache)
    loaded: bool = False  # it came from the on-disk executable cache
    _const_views: list[np.ndarray] = field(default_factory=list)
    _fixed: tuple[tuple[int, ...], np.ndarray] | None = None  # the buffers' kind and sizes (_call_engine)

    def __post_init__(self) -> None:
        self._const_views = [device_view(b.value, b) for b in self.program.consts]  # type: ignore[arg-type]

    @functools.cached_property
    def program_has_collectives(self) -> bool:
        """Whether the program exchanges values with other replicas (calls the collective host function)."""
        return any(c.name == COLLECTIVE_CALLEE for c in self.engine_source.callees)

    @property
    def schedule(self) -> Schedule | None:
        """The program's tile schedule on its IPU (None for a host program)."""
        if self._schedule is None and self.target is not None:
            self._schedule = schedule_program(self.program, self.target)
        return self._schedule

    def run(self, args: Sequence[np.ndarray], variables: dict[int, np.ndarray],
            feeds: HostFeeds | None = None, rounding: np.ndarray | None = None,
            stop: np.ndarray | None = None, context: int = 0) -> list[np.ndarray]:
        """Run with positional ``args``; ``variables`` (id → device buffer) are updated in place; a
        program with streams reads and writes them through ``feeds``. ``rounding``: the device's
        stochastic-rounding state (int64 ``[key word, key word, call number]``), for a program
        compiled with stochastic rounding. ``stop``: the flag the engine polls, when the caller (the
        replicas of a replicated run, :mod:`popjit.runtime.replicas`) shares one between engines and
        watches for Ctrl-C and for the workqueue layer itself; by default the run does both. ``context``: the
        collectives' context this replica's engine passes them (:mod:`popjit.codegen.collective`; 0: the
        Python host function performs them)."""
        p = self._check_feeds(feeds)
        fed = feeds.take_inputs(p) if p.stream_in else {}  # first: a dry infeed fails before anything runs
        outs, outs_at = _allocated(p.outs)
        drained_arrays, drained_at = _allocated(p.stream_out)
        drained = {b.uid: d for b, d in zip(p.stream_out, drained_arrays)}
        state = self._rounding_state(rounding)
        saved = self._saved_state(variables, state)
        with self._temporaries.lent() as temporaries:
            buffers, addresses = self._buffers(args, variables, outs, fed, drained, (outs_at, drained_at), temporaries)
            if stop is None:
                with engine_guard(), interrupts.watching() as flag:
                    stopped = self._call_engine(buffers, addresses, state, context, flag)
            else:
                stopped = self._call_engine(buffers, addresses, state, context, stop)
        if stopped & TRAPPED:
            for buf, before in saved:
                buf[...] = before
            raise trap_error(self.graph.name, self.engine_source, stopped)
        if stopped:  # Ctrl-C (Python raises KeyboardInterrupt itself as soon as it can; this is the backstop)
            raise KeyboardInterrupt
        self.runs += 1
        if drained:
            feeds.deliver_outputs(p, drained)
        return outs

    def _call_engine(self, buffers: list[np.ndarray], addresses: np.ndarray, state: tuple[np.ndarray, ...],
                     context: int, stop: np.ndarray) -> int:
        if self._fixed is None:  # why once: the buffers' dtypes and sizes are the program's
            self._fixed = buffer_kind(buffers), buffer_sizes(buffers)
        kind, sizes = self._fixed
        return self.engine(buffers, self._ints(context), self.engine_source.floats, stop, state,
                           program=self.graph.name, store=self.library_store, addresses=addresses,
                           kind=kind, sizes=sizes)

    def _ints(self, context: int) -> np.ndarray:
        """The engine's ``P`` with the collectives' ``context`` in its slot."""
        ints, slot = self.engine_source.ints, self.engine_source.context_slot
        if not context or slot is None:
            return ints
        ints = ints.copy()
        ints[slot] = context
        return ints

    def precompile(self, variables: dict[int, np.ndarray], feeds: HostFeeds | None = None,
                   deliver: bool = True) -> list[np.ndarray]:
        """What a run on a device in ``DeviceConnectionType.PRE_COMPILE`` mode does: the program's machine
        code is compiled (and kept in the executable cache) but nothing runs. Its results are zeros of
        their shapes and dtypes, and (with ``deliver``) each outfeed receives zeros of what one run
        would write; no infeed is read and no variable changes, as in Graphcore's pre-compile mode."""
        p = self._check_feeds(feeds)
        outs = [np.zeros(b.shape, b.dtype.np) for b in p.outs]
        fed = {b.uid: np.zeros(b.shape, b.dtype.np) for b in p.stream_in}
        drained = {b.uid: np.zeros(b.shape, b.dtype.np) for b in p.stream_out}
        args = {b.binding: np.zeros(b.shape, b.dtype.np) for b in p.args}
        allocated_at = data_addresses(outs), data_addresses(list(drained.values()))
        buffers = self._buffers(args, variables, outs, fed, drained, allocated_at, self._temporaries.allocate())[0]
        self.engine.link(buffers, self.graph.name, self.library_store)
        if drained and deliver:
            feeds.deliver_outputs(p, drained)
        return outs

    def _check_feeds(self, feeds: HostFeeds | None) -> Program:
        """The program, once it is known that ``feeds`` is given if it has streams."""
        p = self.program
        if (p.stream_in or p.stream_out) and feeds is None:
            raise FailedPreconditionError(
                f"'{self.graph.name}' uses infeeds or outfeeds: run it with the host's feeds.")
        return p

    def _buffers(self, args: Any, variables: dict[int, np.ndarray], outs: list[np.ndarray],
                 fed: dict[int, np.ndarray], drained: dict[int, np.ndarray],
                 allocated_at: tuple[np.ndarray, np.ndarray],
                 temporaries: tuple[list[np.ndarray], np.ndarray]) -> tuple[list[np.ndarray], np.ndarray]:
        """The engine's buffers, in its order (arguments, variables, constants, results, streams,
        temporaries), and the addresses of their data. ``allocated_at``: those of ``outs`` and of
        ``drained``, as their allocation found them; ``temporaries``: the temporaries and their addresses
        (:class:`~popjit.buffers.AlignedLayout`)."""
        kinds = self._kinds
        given = [_flat_view(np.asarray(args[b.binding], dtype=b.dtype.np), want) for b, want in kinds.args]
        given += [_flat_view(variables[b.binding], want, in_place=True) for b, want in kinds.variables]
        results = [_flat_view(o, want) for o, want in zip(outs, kinds.out_types)]
        streamed_in = [_flat_view(fed[b.uid], want) for b, want in kinds.stream_in]
        streamed_out = [_flat_view(drained[b.uid], want) for b, want in kinds.stream_out]
        outs_at, drained_at = allocated_at
        temps, temps_at = temporaries
        addresses = np.concatenate((data_addresses(given), kinds.const_addresses, outs_at, data_addresses(streamed_in),
                                    drained_at, temps_at))
        return [*given, *self._const_views, *results, *streamed_in, *streamed_out, *temps], addresses

    @functools.cached_property
    def _kinds(self) -> _BufferKinds:
        """The engine's buffers by kind (fixed for the executable, so looked up once)."""
        p = self.program

        def stored(bufs: Sequence[Buffer]) -> list[tuple[Buffer, np.dtype]]:
            return [(b, storage_dtype(b.dtype)) for b in bufs]

        return _BufferKinds(stored(p.args), stored(p.variables), [storage_dtype(b.dtype) for b in p.outs],
                            stored(p.stream_in), stored(p.stream_out), data_addresses(self._const_views))

    @functools.cached_property
    def _temporaries(self) -> AlignedLayout:
        """Where the engine's temporaries lie in the one allocation a run makes for them."""
        unmaterialised = self.engine_source.unmaterialised  # why: never written, so never allocated
        temps = [*self.program.temps, *self.engine_source.scratch]
        return AlignedLayout([0 if b.uid in unmaterialised else b.size for b in temps],
                             [storage_dtype(b.dtype) for b in temps])

    def _rounding_state(self, rounding: np.ndarray | None) -> tuple[np.ndarray, ...]:
        """The extra engine argument of a program that rounds stochastically (none otherwise)."""
        if not self.engine_source.rounding_state:
            return ()
        if rounding is None:
            raise FailedPreconditionError(
                f"'{self.graph.name}' rounds stochastically: run it on an IPU device, which holds the rounding seed.")
        return (rounding,)

    def _saved_state(self, variables: dict[int, np.ndarray], state: tuple[np.ndarray, ...]) -> list[tuple[Any, Any]]:
        """Copies of what a trapping run must restore (variables, the rounding state): only when traps are on."""
        if not self.engine_source.numerics.traps:
            return []
        return [(buf, buf.copy()) for buf in [*(variables[b.binding] for b in self.program.variables), *state]]

    def as_text(self, stage: str = "graph") -> str:
        """``graph``, ``loop``, ``schedule``, ``engine`` or ``codelets``."""
        if stage == "graph":
            return self.graph.as_text()
        if stage == "loop":
            return self.program.as_text()
        if stage == "schedule":
            if self.schedule is None:
                raise ValueError(
                    f"'{self.graph.name}' is a host program (a tf.function run on the CPU without jit_compile=True): "
                    "it has no IPU schedule. Run it with IPUStrategy.run, under tf.device('/device:IPU:0'), or "
                    "with jit_compile=True to compile it for the IPU.")
            return self.schedule.as_text()
        if stage == "engine":
            legend = [f"# K[{i}]: {c.name}" for i, c in enumerate(self.engine_source.callees)]
            return "\n".join([self.engine_source.source.rstrip("\n"), *legend, ""])
        if stage == "codelets":
            return "\n".join(r.source for r in self.engine_source.codelets.values())
        raise ValueError(f"unknown stage {stage!r}; use graph, loop, schedule, engine or codelets")


def trap_error(program: str, source: EngineSource, status: int) -> InternalError:
    """TensorFlow's error when a floating-point trap stops an IPU program: Poplar's
    ``application_runtime_error`` as Graphcore's TensorFlow reports it (an ``InternalError``)."""
    mask, index = status & (INV | DIV0 | OFLO), status >> 8
    where = source.compute_sets[index] if 0 <= index < len(source.compute_sets) else "?"
    kinds = " and ".join(trap_names(mask))
    options = ", ".join(f"floating_point_behaviour.{o}" for o in ("inv", "div0", "oflo")
                        if getattr(source.numerics, o))
    return InternalError(
        "[Poplar][Execute engine] application_runtime_error: [Recovery action: IPU_RESET] Tiles in excepted state: "
        f"a floating-point exception ({kinds}) was raised in compute set '{where}' of program '{program}' "
        f"({options} traps it; the variables are as they were before this call). IPU will be reset the next time "
        "a program is executed.")
