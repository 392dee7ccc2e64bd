"""Replicated execution: a program run by every IPU of a device, each IPU a replica of it.

A device of N IPUs runs a one-IPU program as N replicas (spec §1.12). Each replica is a real copy of
the program's state: its own variable buffers (:class:`ReplicaStore`), its own infeed elements, its own
random generator and stochastic-rounding state, its own engine run on its own thread, all at once on
the host's cores. Replica 0's variables are the variables' own buffers, so reading a variable on the
host reads replica 0, as on the IPU; a value the host writes reaches every replica before the next run
(each variable's version says when it changed).

- Infeeds: replica ``r`` gets elements ``i*R + r`` (one element per replica per dequeue, in order).
- Outfeeds: every replica's values, stacked by the outfeed (``[n, R, ...]`` in ALL mode, ``[R, ...]`` in LAST).
- Collectives (:class:`~popjit.ir.loop.Collective`): the engine calls the collective host function
  (:mod:`popjit.codegen.host`). When every replica runs in this process, its native entry point does it all
  without the GIL (:mod:`popjit.codegen.collective`: a barrier on an atomic counter, then each replica
  does its part straight from the others' buffers). Otherwise (replicas spanning several instances
  under PopDist, a collective native code does not perform, ``POPJIT_DISABLE_NUMBA``) the Python host
  function :func:`_collective` puts this replica's source in a shared slot, waits for the other replicas
  at a barrier, and computes this replica's result from all of theirs
  (:func:`~popjit.ops.collectives.collective_result`; every replica does the same arithmetic in the same
  order); with several instances (:mod:`popjit.runtime.instances`) replica 0 of each instance gathers
  the other instances' slots over MPI first. A debug log line says which path a run took.

A replica that fails (an error, a floating-point trap, Ctrl-C) breaks the barrier and raises the shared
stop flag, so the others stop at their next loop iteration or collective instead of waiting forever; the
run then raises the first replica's error.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from popjit import config
from popjit.buffers import aligned_copy
from popjit.codegen import collective, host
from popjit.codegen.engine import collectives
from popjit.ir.loop import Buffer, Collective, Program
from popjit.kernels.jit import single_threaded
from popjit.ops.collectives import statement_result
from popjit.pipeline import interrupts
from popjit.pipeline.executable import engine_guard
from popjit.runtime.streams import by_feed, lookup_for

#: A special per-replica variable: its buffer for a (global) replica index.
ReplicaView = Callable[[int], np.ndarray]

_log = logging.getLogger("popjit")


@dataclass
class ReplicaStore:
    """The variable buffers of a device's replicas ``1..`` (replica 0's are the variables' own), each with the
    version of the host value it last received, and their stochastic-rounding states by global replica."""

    buffers: dict[int, tuple[int, list[np.ndarray]]] = field(default_factory=dict)
    rounding: dict[int, np.ndarray] = field(default_factory=dict)
    rounding_reseeds: int = 0  # the generator's reseed count the rounding states were derived at

    def variables(self, replica0: dict[int, np.ndarray], versions: dict[int, int],
                  replicas: int) -> list[dict[int, np.ndarray]]:
        """One variable dict for each of ``replicas`` replicas: ``replica0`` first, then each other replica's
        own buffers, which take replica 0's value when the variable is new to them or the host wrote it since."""
        others: list[dict[int, np.ndarray]] = [{} for _ in range(replicas - 1)]
        for vid, buf in replica0.items():
            version = versions.get(vid, 0)
            kept = self.buffers.get(vid)
            if kept is None or kept[0] != version or (kept[1] and kept[1][0].shape != buf.shape):
                kept = (version, [])
                self.buffers[vid] = kept
            kept[1].extend(aligned_copy(buf) for _ in range(len(kept[1]), replicas - 1))
            for r in range(replicas - 1):
                others[r][vid] = kept[1][r]
        return [replica0, *others]


@dataclass
class ReplicatedRun:
    """The replicas of one execution: their shared stop flag, barrier and collective slots."""

    program: Program
    count: int  # replicas in this process
    first: int  # the global index of this process's replica 0
    total: int  # replicas in every process together
    stop: np.ndarray
    world: Any = None  # the instances (popjit.runtime.instances), when more than one
    table: list[Collective] = field(init=False)
    barrier: threading.Barrier = field(init=False)
    slots: list[list[Any]] = field(init=False)
    gathered: list[Any] = field(init=False)
    calls: list[int] = field(init=False)
    native: collective.Exchange | None = field(init=False)  # the native path's state (None: the Python path)
    error: BaseException | None = None

    def __post_init__(self) -> None:
        self.table = collectives(self.program)
        self.barrier = threading.Barrier(self.count)
        self.slots = [[None] * self.count, [None] * self.count]  # why two: see exchange()
        self.gathered = [None, None]
        self.calls = [0] * self.count
        self.native = None
        if self.table:
            self.native = self._native_exchange()

    def _native_exchange(self) -> collective.Exchange | None:
        """The native path's state when it can perform this run's collectives (logged either way)."""
        why = ("the replicas span several instances" if self.total != self.count else
               "POPJIT_DISABLE_NUMBA is set" if config.get("DISABLE_NUMBA") else None)
        plans = collective.plans_for(self.program, self.count) if why is None else None
        if why is None and plans is None:
            why = "native code does not perform one of its collectives"
        _log.debug("'%s' as %d replicas: collectives %s", self.program.name, self.count,
                   "in native code" if why is None else f"by the Python host function ({why})")
        return None if plans is None else collective.Exchange(plans, self.count, self.stop)

    def context(self, replica: int) -> int:
        """The collectives' context of local replica ``replica``'s engine (0: the Python path)."""
        return 0 if self.native is None else self.native.context(replica)

    def fail(self, error: BaseException) -> None:
        """Record the first failure and stop every replica."""
        if self.error is None:
            self.error = error
        self.stop[0] = 1
        self.barrier.abort()

    def exchange(self, replica: int, index: int, dst: np.ndarray, src: np.ndarray) -> int:
        """Collective ``index`` of the program, as replica ``replica`` (local) performs it: 0, or 1 when the
        run is failing and the engine must stop.

        why two sets of slots: a replica leaves the barrier of call ``n`` and may write its slot for call
        ``n + 1`` while a slower one still reads the slots of call ``n``; it cannot reach call ``n + 2``
        before every replica has passed the barrier of ``n + 1``, so alternating sets never overlap."""
        parity = self.calls[replica] & 1
        self.calls[replica] += 1
        stmt = self.table[index]
        self.slots[parity][replica] = src.copy()
        self.barrier.wait()
        contributions = self.slots[parity]
        if self.world is not None and self.world.count > 1:
            if replica == 0:
                everyone = self.world.allgather(np.stack(contributions))
                self.gathered[parity] = list(everyone.reshape(self.total, *src.shape))
            self.barrier.wait()
            contributions = self.gathered[parity]
        position = self.first + replica
        group = stmt.group or self.total
        start = position - position % group
        dst[...] = statement_result(stmt, contributions[start:start + group], position - start)
        return 0


_CURRENT = threading.local()  # .run (ReplicatedRun) and .replica (its local index) on a replica's thread


def _view(data: Any, buf: Buffer) -> np.ndarray:
    """A buffer the engine passed: its data address (compiled engine) or the array itself (Python engine),
    as an array of the buffer's dtype and shape (float16 as float16, not its storage bits)."""
    if isinstance(data, np.ndarray):
        return data.view(buf.dtype.np).reshape(buf.shape)
    raw = _bytes_type(buf.size * buf.dtype.np.itemsize).from_address(int(data))
    return np.frombuffer(raw, dtype=buf.dtype.np, count=buf.size).reshape(buf.shape)


def _operands(stmt: Collective, dst: Any, src: Any) -> tuple[np.ndarray, np.ndarray]:
    """The destination and the operand of a collective the engine passed, as arrays of their shapes."""
    return _view(dst, stmt.dst), _view(src, stmt.src).reshape(stmt.operand_shape)


@functools.lru_cache(maxsize=256)
def _bytes_type(nbytes: int) -> Any:
    """The ctypes array type of ``nbytes`` bytes. why cached: making the type costs 20 us, as much as the rest
    of a small collective."""
    return ctypes.c_char * max(nbytes, 1)


def _collective(index: Any, dst: Any, src: Any, context: Any) -> int:
    """The engine's host function for collectives (runs on the replica's thread, with the GIL); the calls of a
    run on the native path never reach it (``context`` is 0 here)."""
    run: ReplicatedRun | None = getattr(_CURRENT, "run", None)
    if run is None:
        return _alone(int(index), dst, src)
    try:
        return run.exchange(_CURRENT.replica, int(index), *_operands(run.table[int(index)], dst, src))
    except threading.BrokenBarrierError:
        return 1
    except BaseException as e:  # why: an exception must not cross the C call; the run raises it
        run.fail(e)
        return 1


_ALONE = threading.local()  # .table: the collectives of a program run without replicas


def _alone(index: int, dst: Any, src: Any) -> int:
    """A collective of a program run by one replica (a device of one IPU): a group of one."""
    stmt = _ALONE.table[index]
    out, operand = _operands(stmt, dst, src)
    out[...] = statement_result(stmt, [operand], 0)
    return 0


host.register("collective", 4, _collective, native=collective.entry)


def run_alone(executable: Any, run: Callable[[], list[np.ndarray]]) -> list[np.ndarray]:
    """``run()`` of a program on one replica, its collectives (if any) acting on that replica alone."""
    _ALONE.table = collectives(executable.program)
    return run()


class _ReplicaFeeds:
    """One replica's view of the host feeds: its own infeed elements, taken before any replica started."""

    def __init__(self, inputs: dict[int, np.ndarray]) -> None:
        self.inputs = inputs
        self.outputs: dict[int, np.ndarray] = {}

    def take_inputs(self, program: Program) -> dict[int, np.ndarray]:
        return self.inputs

    def deliver_outputs(self, program: Program, arrays: dict[int, np.ndarray]) -> None:
        self.outputs = arrays


def take_replicated(program: Program, replicas: int) -> list[dict[int, np.ndarray]]:
    """Each replica's infeed elements for one execution: element ``i*R + r`` of each feed goes to
    replica ``r`` (``OutOfRangeError`` before anything runs when a feed has too few)."""
    per: list[dict[int, np.ndarray]] = [{} for _ in range(replicas)]
    for feed_id, bufs in by_feed(program.stream_in).items():
        count = bufs[0].shape[0]
        parts = lookup_for("infeed", feed_id, replicas).take(count * replicas)
        for b, a in zip(bufs, parts):
            a = np.asarray(a, dtype=b.dtype.np).reshape(count, replicas, *b.shape[1:])
            for r in range(replicas):
                per[r][b.uid] = np.ascontiguousarray(a[:, r])
    return per


def deliver_replicated(program: Program, outputs: list[dict[int, np.ndarray]]) -> None:
    """Hand each outfeed every local replica's values (the outfeed stacks them along its replica axis; an
    instance with one local replica, under PopDist, has none)."""
    for feed_id, bufs in by_feed(program.stream_out).items():
        feed = lookup_for("outfeed", feed_id, len(outputs))
        per_replica = [[o[b.uid] for b in bufs] for o in outputs]
        if len(outputs) == 1:
            feed.put(per_replica[0])
        else:
            feed.put_replicated(per_replica)


_POOLS: dict[int, ThreadPoolExecutor] = {}
_POOLS_LOCK = threading.Lock()


def _pool(replicas: int) -> ThreadPoolExecutor:
    with _POOLS_LOCK:
        pool = _POOLS.get(replicas)
        if pool is None:
            pool = _POOLS[replicas] = ThreadPoolExecutor(replicas, thread_name_prefix="popjit-replica")
        return pool


def run_replicated(executable: Any, args: Any, variables: list[dict[int, np.ndarray]], rounding: list[Any],
                   first: int = 0, total: int | None = None, world: Any = None,
                   feeds: Any = None) -> list[np.ndarray]:
    """Run ``executable`` as ``len(variables)`` replicas, each with its own variables and rounding state
    (``first``: the global index of the first, ``total``: all replicas of every instance); replica 0's
    results. ``feeds``: whether the program's streams are the host's (the registered feeds)."""
    replicas = len(variables)
    program = executable.program
    inputs = take_replicated(program, replicas) if feeds is not None and program.stream_in else \
        [{} for _ in range(replicas)]
    replica_feeds = [_ReplicaFeeds(i) for i in inputs]
    with engine_guard(), interrupts.watching() as stop:
        run = ReplicatedRun(program, replicas, first, total or replicas, stop, world)

        def replica(r: int) -> list[np.ndarray]:
            _CURRENT.run, _CURRENT.replica = run, r
            try:
                with single_threaded():
                    return executable.run(args, variables[r], replica_feeds[r] if feeds is not None else None,
                                          rounding[r], stop=stop, context=run.context(r))
            except BaseException as e:
                run.fail(e)
                raise
            finally:
                _CURRENT.run = None

        futures = [_pool(replicas).submit(replica, r) for r in range(replicas)]
        try:
            results = [f.result() for f in futures]
        except BaseException:
            run.fail(KeyboardInterrupt())
            for f in futures:
                f.exception()  # wait for every replica to stop
            raise run.error or KeyboardInterrupt() from None
    if feeds is not None and program.stream_out:
        deliver_replicated(program, [f.outputs for f in replica_feeds])
    return results[0]
