"""The instances of one program: the processes ``popjit poprun`` (or any MPI launcher) started together,
and the collectives between them.

    world = instances.world()          # this process's place: world.count, world.index
    total = world.allreduce_sum(x)     # elementwise sum of every instance's x (same shape and dtype)
    rows = world.allgather(x)          # every instance's x, stacked on a new axis 0, in instance order
    x0 = world.broadcast(x, root=0)    # instance 0's x, everywhere
    world.barrier()

Where a process stands comes from its environment, read once: ``POPDIST_NUM_INSTANCES`` and
``POPDIST_INSTANCE_INDEX`` (what ``popjit poprun`` sets for each instance), else the size and rank an MPI
launcher gives every process it starts (``PMI_SIZE``/``PMI_RANK`` from MPICH's ``mpiexec``,
``OMPI_COMM_WORLD_SIZE``/``OMPI_COMM_WORLD_RANK`` from Open MPI's, ``MV2_COMM_WORLD_*`` from MVAPICH's), so
``mpiexec -n 2 python -m popjit run script.py`` works too. Anything else is instance 0 of 1: the collectives
return a copy of their input, and mpi4py is never imported.

With several instances the collectives are MPI's, over ``MPI.COMM_WORLD`` (mpi4py, initialised by
:meth:`World.connect`, which ``popjit run`` calls as the program starts). They may be called from any thread,
one call at a time (a lock serialises them; MPI is initialised at the ``MPI_THREAD_SERIALIZED`` level for
that), and every instance must make the same calls in the same order, as with MPI. An instance waiting for
the others polls MPI's non-blocking calls and sleeps between polls (MPI's blocking calls would spin a core).
Each call first checks that every instance passed the same shape and dtype, and raises the same
``ValueError`` in all of them if not. The dtypes are float32, float16 (summed in float32, rounded once),
float64, int32, int64 and bool (not summed).

A failure in one instance stops all of them: once connected, an uncaught exception (after its traceback
is printed) or a non-zero ``sys.exit`` in ``popjit run`` ends the whole program through :func:`abort`
(``MPI_Abort``, which makes the launcher stop every other instance), instead of leaving the others
waiting in a collective forever. Under ``popjit poprun`` the instance exits with its status instead, and the
instance's relay (which forwards its output, see :mod:`popjit.poprun`) stops the others once every line the
instance wrote has been forwarded.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NoReturn

import numpy as np

from popjit.errors import FailedPreconditionError

#: Set by ``popjit poprun`` for every instance: how many there are, and which one this is.
NUM_INSTANCES_ENV = "POPDIST_NUM_INSTANCES"
INSTANCE_INDEX_ENV = "POPDIST_INSTANCE_INDEX"
#: Set by poprun's relay for the instance it starts: the relay, not ``MPI_Abort``, stops the other instances.
RELAYED_ENV = "POPRUN_RELAYED"
#: (size, rank) variables MPI launchers set in every process they start: MPICH/Intel MPI, Open MPI, MVAPICH.
LAUNCHER_ENV = (("PMI_SIZE", "PMI_RANK"), ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"),
                ("MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_RANK"))
#: ... and (size, rank) among the processes on the same host.
LOCAL_ENV = (("MPI_LOCALNRANKS", "MPI_LOCALRANKID"), ("OMPI_COMM_WORLD_LOCAL_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
             ("MV2_COMM_WORLD_LOCAL_SIZE", "MV2_COMM_WORLD_LOCAL_RANK"))

#: The dtypes the collectives take; the sum of bool is not defined.
DTYPES = tuple(np.dtype(t) for t in ("float32", "float16", "float64", "int32", "int64", "bool"))
_MAX_RANK = 32
#: Seconds a failing instance waits before MPI_Abort: MPICH's mpiexec drops output it has not forwarded yet.
_ABORT_GRACE = 0.25
_SPINS, _MAX_SLEEP = 200, 1e-3  # measured: 20 us per small allreduce between 2 local instances, ~0 CPU waiting
_INSTALL = "pip install 'popjit[distributed]'"


# -- where this process stands -------------------------------------------------------------------------


def int_env(env: Mapping[str, str], name: str) -> int | None:
    """The whole number in the environment variable ``name``, None when it is unset or empty."""
    value = env.get(name, "").strip()
    if not value:
        return None
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{name}={env[name]!r} is not a whole number") from None


def _first_pair(env: Mapping[str, str], names: tuple[tuple[str, str], ...]) -> tuple[int, int] | None:
    for size_name, rank_name in names:
        size, rank = int_env(env, size_name), int_env(env, rank_name)
        if size is not None and rank is not None:
            return size, rank
    return None


def launcher_placement(env: Mapping[str, str] = os.environ) -> tuple[int, int] | None:
    """``(size, rank)`` as an MPI launcher set them for this process, or None outside one."""
    return _first_pair(env, LAUNCHER_ENV)


def local_placement(env: Mapping[str, str] = os.environ) -> tuple[int, int]:
    """``(size, rank)`` among the instances on this process's host (``(1, 0)`` outside a launcher)."""
    return _first_pair(env, LOCAL_ENV) or (1, 0)


def placement(env: Mapping[str, str] = os.environ) -> tuple[int, int]:
    """``(count, index)`` of this process among the instances of its program (``(1, 0)`` for a lone one).

    ``POPDIST_NUM_INSTANCES``/``POPDIST_INSTANCE_INDEX`` win; an MPI launcher's size and rank fill what
    they leave out, and must agree with them.
    """
    launched = launcher_placement(env)
    count, index = int_env(env, NUM_INSTANCES_ENV), int_env(env, INSTANCE_INDEX_ENV)
    if count is None:
        count = launched[0] if launched else 1
    if index is None:
        index = launched[1] if launched else 0
    if count < 1 or not 0 <= index < count:
        raise ValueError(f"instance {index} of {count} ({NUM_INSTANCES_ENV}, {INSTANCE_INDEX_ENV}): the index must "
                         "be in the range [0, count)")
    if launched is not None and launched != (count, index):
        raise ValueError(f"{NUM_INSTANCES_ENV}/{INSTANCE_INDEX_ENV} say instance {index} of {count}, but the MPI "
                         f"launcher started this process as rank {launched[1]} of {launched[0]}")
    if count > 1 and launched is None:
        raise ValueError(f"{NUM_INSTANCES_ENV}={count}, but no MPI launcher started this process: start the "
                         f"program with `popjit poprun --num-instances {count} ...`")
    return count, index


# -- the world -----------------------------------------------------------------------------------------


class World:
    """This process's place among the instances of its program (``count``, ``index``), and the
    collectives between them (see the module's docstring)."""

    def __init__(self, count: int, index: int) -> None:
        self.count = count
        self.index = index
        self._comm: Any = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"World(count={self.count}, index={self.index})"

    def connect(self) -> None:
        """Initialise MPI between the instances now (nothing for a lone instance): mpi4py's ``MPI.COMM_WORLD``,
        and the hooks by which a failing instance stops the others (see :func:`abort`)."""
        with self._lock:
            if self.count > 1 and self._comm is None:
                self._comm = _connect(self.count, self.index)

    # -- collectives --------------------------------------------------------------------------------
    def allreduce_sum(self, a: np.ndarray) -> np.ndarray:
        """The elementwise sum of every instance's ``a`` (a new array; float16 is summed in float32)."""
        a = _checked(a, "allreduce_sum")
        if a.dtype == np.bool_:
            raise TypeError("allreduce_sum: the sum of bool arrays is not defined; cast them to int32 first")
        if self.count == 1:
            return a.copy()
        wide = a.astype(np.float32) if a.dtype == np.float16 else a
        out = np.empty_like(wide)
        with self._collective("allreduce_sum", a) as comm:
            _wait(comm.Iallreduce(wide, out))
        return out.astype(a.dtype, copy=False)

    def allgather(self, a: np.ndarray) -> np.ndarray:
        """Every instance's ``a``, stacked on a new axis 0 in instance order: shape ``(count, *a.shape)``."""
        a = _checked(a, "allgather")
        if self.count == 1:
            return a[np.newaxis].copy()
        out = np.empty((self.count, *a.shape), a.dtype)
        with self._collective("allgather", a) as comm:
            _wait(comm.Iallgather(_bytes(a), _bytes(out)))
        return out

    def broadcast(self, a: np.ndarray, root: int = 0) -> np.ndarray:
        """Instance ``root``'s ``a`` in every instance (a new array; the others' ``a`` gives its shape)."""
        a = _checked(a, "broadcast")
        if not 0 <= root < self.count:
            raise ValueError(f"broadcast: root {root} is not an instance (there are {self.count})")
        out = a.copy()
        if self.count > 1:
            with self._collective("broadcast", a) as comm:
                _wait(comm.Ibcast(_bytes(out), root=root))
        return out

    def barrier(self) -> None:
        """Return once every instance has called it."""
        if self.count > 1:
            with self._collective("barrier", None) as comm:
                _wait(comm.Ibarrier())

    # -- plumbing -----------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _collective(self, what: str, a: np.ndarray | None) -> Iterator[Any]:
        """One call at a time, after checking that every instance passed the same kind of array."""
        self.connect()
        with self._lock:
            if a is not None:
                _agree(self._comm, self.count, what, a)
            yield self._comm


@functools.cache
def world() -> World:
    """The instances this process belongs to (read from the environment once, see the module's docstring)."""
    return World(*placement())


def writes_checkpoints() -> bool:
    """Whether this instance writes the checkpoints and summaries that training writes on its own (Keras's
    ``ModelCheckpoint``, an estimator's): instance 0, as TensorFlow's chief worker (files a program writes
    itself are written by every instance that asks)."""
    return world().index == 0


def _checked(a: Any, what: str) -> np.ndarray:
    a = np.asarray(a, order="C")
    if a.dtype not in DTYPES:
        names = ", ".join(d.name for d in DTYPES)
        raise TypeError(f"{what}: arrays of {a.dtype} cannot be exchanged between instances (use {names})")
    if a.ndim > _MAX_RANK:
        raise ValueError(f"{what}: arrays of rank {a.ndim} cannot be exchanged between instances (at most "
                         f"{_MAX_RANK})")
    return a


def _wait(request: Any) -> None:
    """Wait for a non-blocking MPI call, polling, then sleeping between polls: MPI's blocking calls spin, and an
    instance waiting for a slower one would take a core from the threads computing beside it."""
    for _ in range(_SPINS):
        if request.Test():
            return
    delay = 1e-5
    while not request.Test():
        time.sleep(delay)
        delay = min(2 * delay, _MAX_SLEEP)


def _bytes(a: np.ndarray) -> np.ndarray:
    """``a``'s memory as bytes (MPI moves them whatever the dtype)."""
    return a.reshape(-1).view(np.uint8)


def _header(a: np.ndarray) -> np.ndarray:
    """``a``'s dtype and shape as a row of int64s, equal on two instances exactly when they agree."""
    row = np.full(2 + _MAX_RANK, -1, np.int64)
    row[0], row[1] = DTYPES.index(a.dtype), a.ndim
    row[2:2 + a.ndim] = a.shape
    return row


def _describe(row: np.ndarray) -> str:
    return f"{DTYPES[row[0]].name} {tuple(int(d) for d in row[2:2 + row[1]])}"


def _agree(comm: Any, count: int, what: str, a: np.ndarray) -> None:
    """Raise the same ValueError in every instance unless they all passed arrays of one shape and dtype."""
    mine = _header(a)
    rows = np.empty((count, mine.size), np.int64)
    _wait(comm.Iallgather(mine, rows))
    if (rows != rows[0]).any():
        passed = ", ".join(f"instance {i} {_describe(r)}" for i, r in enumerate(rows))
        raise ValueError(f"{what}: every instance must pass an array of the same shape and dtype, but {passed}")


# -- MPI -----------------------------------------------------------------------------------------------


def _connect(count: int, index: int) -> Any:
    """``MPI.COMM_WORLD`` (initialising MPI at the serialized thread level), checked against the environment,
    with the abort hooks installed."""
    if "mpi4py.MPI" not in sys.modules:
        try:
            import mpi4py  # why: MPI is only for programs of several instances; a lone one never loads it
        except ImportError:
            raise FailedPreconditionError(
                f"This process is instance {index} of {count}, and the instances talk through MPI, which needs "
                f"mpi4py: {_INSTALL}") from None
        mpi4py.rc.thread_level = "serialized"  # the replica threads call MPI, one at a time
    from mpi4py import MPI  # why: as above

    if MPI.Query_thread() < MPI.THREAD_SERIALIZED:
        raise FailedPreconditionError(
            "MPI was initialised at a thread level below MPI_THREAD_SERIALIZED, but popjit calls it from its "
            "replica threads: let popjit initialise MPI, or set mpi4py.rc.thread_level = 'serialized' before "
            "`from mpi4py import MPI`")
    comm = MPI.COMM_WORLD
    if (comm.Get_size(), comm.Get_rank()) != (count, index):
        raise FailedPreconditionError(
            f"This process is instance {index} of {count}, but MPI says rank {comm.Get_rank()} of "
            f"{comm.Get_size()}: start the program with `popjit poprun` or `mpiexec -n N python -m popjit run`")
    _install_abort_hook(index, count)
    return comm


def exit_status(code: object) -> int:
    """The status python exits with for ``sys.exit(code)``."""
    if code is None:
        return 0
    return code if isinstance(code, int) else 1


def abort(status: int, reason: str) -> NoReturn:
    """End this instance with ``status`` and make the launcher stop every other one (``MPI_Abort``; under
    ``popjit poprun``, a plain exit that poprun's relay turns into the same once it has forwarded this
    instance's output)."""
    w = world()
    print(f"popjit: instance {w.index} of {w.count} failed ({reason}); stopping every instance of the program",
          file=sys.stderr)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed stream has nothing left to lose
            stream.flush()
    if os.environ.get(RELAYED_ENV):
        os._exit(status)
    from mpi4py import MPI  # why: connected already (abort is only installed then)

    time.sleep(_ABORT_GRACE)  # the launcher forwards what this instance wrote before it stops everything
    MPI.COMM_WORLD.Abort(status)
    os._exit(status)  # Abort does not return; this is for an MPI that lets it


def abort_on_failure(status: int, reason: str) -> None:
    """:func:`abort` if this instance is connected to others and ``status`` is a failure."""
    if status != 0 and world()._comm is not None:
        abort(status, reason)


ExceptHook = Callable[[type[BaseException], BaseException, types.TracebackType | None], Any]


def _install_abort_hook(index: int, count: int) -> None:
    """Wrap ``sys.excepthook`` (once): after the traceback is printed, :func:`abort`."""
    previous: ExceptHook = sys.excepthook
    if getattr(previous, "popjit_aborts_instances", False):
        return

    def excepthook(etype: type[BaseException], value: BaseException, tb: types.TracebackType | None) -> None:
        previous(etype, value, tb)
        interrupted = issubclass(etype, KeyboardInterrupt)
        abort(130 if interrupted else 1, "interrupted" if interrupted else f"uncaught {etype.__name__}")

    excepthook.popjit_aborts_instances = True  # type: ignore[attr-defined]
    sys.excepthook = excepthook
