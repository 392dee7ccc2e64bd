"""The virtual IPU system: which IPU devices exist, their targets, and their compiled programs.

``configure_ipu_system`` (from :mod:`popjit.ipu.config`) calls :func:`configure` with the options
that matter here. Each device ``/device:IPU:k`` is a group of virtual IPUs (``auto_select_ipus``);
running on an IPU device before the system is configured raises an error that says so.

Each device also holds what its programs' floating-point behaviour needs: the
:class:`~popjit.codegen.numerics.Numerics` they compile with, and the state of its hardware random
generator (:class:`GeneratorState`), which ``ipu.utils.reset_ipu_seed`` reseeds.

Programs run through :func:`execute`, which honours the device's connection type
(``IPUConfig.device_connection.type``, Graphcore's ``DeviceConnectionType``): ``ALWAYS`` attaches the
device when the system is configured, ``ON_DEMAND`` when a program first runs on it (each logs
"Device /device:IPU:0 attached to IPU: 0" then), ``PRE_COMPILE`` never attaches: a program compiles
(machine code included, into the executable cache) and returns zeros without running, and ``NEVER``
compiles it the same way and then raises Graphcore's "configured for compilation only" error.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from popjit import config
from popjit.codegen.numerics import DEFAULT, Numerics
from popjit.errors import InternalError, InvalidArgumentError, UnimplementedError
from popjit.flags import poplar_flags
from popjit.runtime import instances
from popjit.runtime.replicas import ReplicaStore, ReplicaView, deliver_replicated, run_alone, run_replicated
from popjit.schedule.target import DEFAULT_PLAN_OPTIONS, PlanOptions, Target, make_target
from popjit.source import where

log = logging.getLogger("popjit")

CPU = "/job:localhost/replica:0/task:0/device:CPU:0"
_IPU_RE = re.compile(r"(?:^|/)device:IPU:(\d+)$", re.IGNORECASE)


@functools.lru_cache(maxsize=256)
def canonical(name: str | None) -> str:
    """``'/device:IPU:0'`` → ``'/job:localhost/replica:0/task:0/device:IPU:0'``; ``'cpu'`` → CPU:0."""
    if not name:
        return CPU
    n = name.strip()
    low = n.lower()
    if low in ("cpu", "/cpu:0", "cpu:0", "/device:cpu:0"):
        return CPU
    m = re.search(r"device:(cpu|ipu|gpu|xla_cpu):(\d+)", n, re.IGNORECASE)
    if m:
        return f"/job:localhost/replica:0/task:0/device:{m.group(1).upper()}:{m.group(2)}"
    m = re.fullmatch(r"/?(cpu|ipu|gpu):(\d+)", low)
    if m:
        return f"/job:localhost/replica:0/task:0/device:{m.group(1).upper()}:{m.group(2)}"
    raise ValueError(f"Cannot parse device name {name!r}; use e.g. '/device:IPU:0' or '/device:CPU:0'.")


@functools.lru_cache(maxsize=256)
def ipu_ordinal(name: str) -> int | None:
    """The IPU number in a device name, or None for other devices."""
    m = _IPU_RE.search(name)
    return int(m.group(1)) if m else None


def is_ipu_device(name: str) -> bool:
    """Whether ``name`` is an IPU device."""
    return ipu_ordinal(name) is not None


RECENT_PROGRAMS = 16
_record_lock = threading.Lock()


@dataclass
class ProgramRuns:
    """An executable run on a device, and how many times it ran."""

    executable: Any
    runs: int = 0


def _random_words(n: int) -> np.ndarray:
    return np.frombuffer(os.urandom(4 * n), dtype=np.int32).copy()


def _seed_words(seed: int, n: int) -> np.ndarray:
    """``n`` int32 words derived from an integer seed (any sign), the same in every process."""
    return np.random.SeedSequence(seed % 2**64).generate_state(n, np.uint32).view(np.int32)


@dataclass
class GeneratorState:
    """A device's random generator, as the programs on it read it.

    ``words`` (int32 ``[4]``) is mixed into the key of every stateful random op compiled for the
    device: words 0-1 for ops seeded through ``tf.random`` (zero until ``reset_ipu_seed``, so those
    follow ``tf.random.set_seed`` alone), words 2-3 for unseeded ones (random until
    ``reset_ipu_seed``). ``rounding`` (int64 ``[key, key, call number]``) drives stochastic rounding.
    As on the IPU, the seed is random unless reset; resetting it makes both reproducible.
    """

    words: np.ndarray = field(default_factory=lambda: np.concatenate([np.zeros(2, np.int32), _random_words(2)]))
    rounding: np.ndarray = field(default_factory=lambda: np.append(_random_words(2).astype(np.int64), 0))
    identical_replicas: bool = False
    reseeds: int = 0  # how many times it was reseeded (replicas' own states follow)

    def reseed(self, seed: int, identical_replicas: bool = False) -> None:
        """Start again from ``seed`` (``ipu.utils.reset_ipu_seed``); with ``identical_replicas`` every
        replica of a replicated program draws what replica 0 draws."""
        words = _seed_words(seed, 4)
        self.words[:] = np.concatenate([words[:2], words[:2]])
        self.rounding[:] = [words[2], words[3], 0]
        self.identical_replicas = identical_replicas
        self.reseeds += 1

    def replica_words(self, replica: int) -> np.ndarray:
        """The words replica ``replica`` (global index) reads: replica 0's are these; the others differ,
        as each IPU's generator has its own seed, unless the seed was reset with identical replicas."""
        if replica == 0 or self.identical_replicas:
            return self.words
        return self.words ^ _seed_words(replica, 4)

    def replica_rounding(self, replica: int) -> np.ndarray:
        """A new rounding state for replica ``replica``, derived as :meth:`replica_words` is."""
        state = self.rounding.copy()
        if replica and not self.identical_replicas:
            state[:2] ^= _seed_words(replica, 2).astype(np.int64)
        state[2] = 0
        return state


#: The host's generator, read by random ops in programs that run on the CPU (never reseeded).
HOST_GENERATOR = GeneratorState()


@dataclass
class VirtualDevice:
    """``/device:IPU:<ordinal>``: ``num_ipus`` virtual IPUs of one target."""

    ordinal: int
    num_ipus: int
    target: Target
    executions: int = 0
    compilations: int = 0
    first_ipu: int = 0
    recent_programs: OrderedDict[int, ProgramRuns] = field(default_factory=OrderedDict)
    numerics: Numerics = DEFAULT
    generator: GeneratorState = field(default_factory=GeneratorState)
    connection: str = "ALWAYS"  # a DeviceConnectionType's name
    attached: bool = False
    replica_store: ReplicaStore | None = None  # the variables of replicas 1.. (a device of several IPUs)

    @property
    def store(self) -> ReplicaStore:
        """The variables and rounding states of its replicas other than replica 0."""
        if self.replica_store is None:
            self.replica_store = ReplicaStore()
        return self.replica_store

    def replica_rounding(self, first: int, count: int) -> list[np.ndarray]:
        """The stochastic-rounding state of each of the ``count`` replicas from global replica ``first`` on:
        replica 0 (of all instances) the device generator's, the others their own (keys of their own unless
        the seed was reset with identical replicas)."""
        store = self.store
        if store.rounding_reseeds != self.generator.reseeds:
            store.rounding, store.rounding_reseeds = {}, self.generator.reseeds
        states = []
        for r in range(first, first + count):
            if r == 0:
                states.append(self.generator.rounding)
            else:
                states.append(store.rounding.setdefault(r, self.generator.replica_rounding(r)))
        return states

    def attach(self) -> None:
        """Attach the device's IPUs (once), logging it as Graphcore's executor does."""
        if not self.attached:
            self.attached = True
            ipus = ", ".join(str(self.first_ipu + i) for i in range(self.num_ipus))
            log.info("Device /device:IPU:%d attached to IPU%s: %s", self.ordinal, "s" if self.num_ipus > 1 else "",
                     ipus)

    def record_run(self, executable: Any) -> None:
        """Count a run of ``executable`` among the device's most recent programs (the last
        ``RECENT_PROGRAMS`` distinct ones, so the executable cache can still drop old programs)."""
        self.executions += 1
        with _record_lock:
            entry = self.recent_programs.pop(id(executable), None) or ProgramRuns(executable)
            entry.runs += 1
            self.recent_programs[id(executable)] = entry
            while len(self.recent_programs) > RECENT_PROGRAMS:
                self.recent_programs.popitem(last=False)

    def last_program(self, name: str) -> Any:
        """The most recently run executable called ``name`` (a ``tf.function``'s name), or None."""
        for entry in reversed(self.recent_programs.values()):
            if entry.executable.graph.name == name:
                return entry.executable
        return None

    @property
    def name(self) -> str:
        return f"/device:IPU:{self.ordinal}"


@dataclass
class IPUSystem:
    """The configured system (None until ``configure_ipu_system``)."""

    devices: list[VirtualDevice] = field(default_factory=list)
    options: Any = None
    lock: threading.Lock = field(default_factory=threading.Lock)


_system = IPUSystem()


def system() -> IPUSystem:
    return _system


def is_configured() -> bool:
    return bool(_system.devices)


def configured_option(name: str, default: Any) -> Any:
    """An option of the configured system's ``IPUConfig`` (``default`` before it is configured, or when it was
    configured without one)."""
    options = _system.options if is_configured() else None
    return default if options is None else getattr(options, name)


def device_targets(counts: list[int], version: str = "ipu2", tiles_per_ipu: int = 0,
                   ipu_model: bool = False, matmul_options: PlanOptions = DEFAULT_PLAN_OPTIONS,
                   convolution_options: PlanOptions = DEFAULT_PLAN_OPTIONS) -> list[Target]:
    """The target of each device ``configure`` would attach (one per entry of ``counts``, IPUs per
    device; the planner's options of ``IPUConfig.matmuls``/``convolutions``), after the checks it makes:
    ``InvalidArgumentError`` for more IPUs than the virtual system
    has, or a device whose IPU count is not a power of two. Nothing changes."""
    total = sum(counts)
    available = config.get("NUM_IPUS")
    if total > available:
        raise InvalidArgumentError(
            f"Could not attach to {total} IPUs: the virtual system has {available} (set POPJIT_NUM_IPUS to add more)."
        )
    for n in counts:
        if n & (n - 1):
            raise InvalidArgumentError(
                f"Could not find a device with {n} IPUs: multi-IPU devices have a power-of-two number of IPUs."
            )
    return [make_target(version, tiles_per_ipu, n, ipu_model, matmul_options, convolution_options) for n in counts]


def default_target(version: str = "ipu2", tiles_per_ipu: int = 0) -> Target:
    """One IPU of ``version``: what a program compiled for the IPU estimates against when no device is attached."""
    return make_target(version, tiles_per_ipu)


def program_target(device: str, jit_compile: bool | None, shards: int = 1) -> Target | None:
    """What a function called on ``device`` compiles for: an IPU device's own target; on the host, one
    IPU when ``jit_compile`` asks for it (of the first attached device's kind, else the default ipu2),
    or None: a host program, with no IPU schedule, report or out-of-memory check.

    A program spans ``shards`` IPUs (``ipu.scopes.ipu_shard``, pipeline stages); on a device of N IPUs it
    runs as ``N / next_pow2(shards)`` replicas, each on its own IPUs (Graphcore's rule; the IPU Model
    cannot replicate, as Graphcore's cannot). Its target has the tiles of all its shards (one IPU's tile
    memory each) and ``replicas`` set to the replicas of every instance together."""
    ordinal = ipu_ordinal(device)
    if ordinal is not None:
        dev = get_device(ordinal)
        local = local_replicas(dev, shards)
        if local > 1 and dev.target.ipu_model:
            raise UnimplementedError(
                f"{dev.name} is an IPU Model device of {dev.num_ipus} IPUs: replicated programs are not supported "
                f"on the IPU Model (as in Graphcore's SDK). Use hardware IPUs (ipu_model off) to replicate.{where()}")
        return _sharded_target(dev.target, shards, local * _instance_count())
    if shards > 1:
        raise InternalError(f"Trying to compile a graph for the host, but its ipu_shard scopes or pipeline stages "
                            f"place it on {shards} IPUs: run it on an IPU device of at least {shards} IPUs.{where()}")
    if not jit_compile:
        return None
    return replace(_system.devices[0].target, num_ipus=1) if _system.devices else default_target()


def local_replicas(dev: VirtualDevice, shards: int) -> int:
    """How many replicas of a program spanning ``shards`` IPUs ``dev`` runs: its IPUs over the shards
    rounded up to a power of two; an ``InternalError`` when they do not fit (Graphcore's compile error)."""
    span = ipus_per_replica(shards)
    if dev.num_ipus < shards or dev.num_ipus % span:
        raise InternalError(
            f"Trying to compile a graph for an IPU device with {dev.num_ipus} IPUs, but the graph spans {shards} "
            f"shards (ipu_shard scopes or pipeline stages), which need {span} IPUs per replica: {dev.name} must "
            f"have a multiple of {span} IPUs (cfg.auto_select_ipus).{where()}")
    return dev.num_ipus // span


def ipus_per_replica(shards: int) -> int:
    """The IPUs one replica of a program spanning ``shards`` IPUs takes: ``shards`` rounded up to a power of two."""
    return 1 << max(shards - 1, 0).bit_length()


@functools.lru_cache(maxsize=64)
def _sharded_target(target: Target, shards: int, replicas: int) -> Target:
    if shards == 1 and replicas == 1:
        return target
    return replace(target, num_ipus=shards, tiles=target.tiles * shards, replicas=replicas)


def configure(counts: list[int], version: str = "ipu2", tiles_per_ipu: int = 0, ipu_model: bool = False,
              options: Any = None, numerics: Numerics = DEFAULT, connection: str = "ALWAYS",
              matmul_options: PlanOptions = DEFAULT_PLAN_OPTIONS,
              convolution_options: PlanOptions = DEFAULT_PLAN_OPTIONS) -> list[VirtualDevice]:
    """Make one virtual device per entry of ``counts`` (IPUs per device); their programs compile with
    ``numerics`` (``IPUConfig.floating_point_behaviour``). ``connection``: the name of their
    ``DeviceConnectionType`` (``ALWAYS`` attaches them now)."""
    targets = device_targets(counts, version, tiles_per_ipu, ipu_model, matmul_options, convolution_options)
    if _system.devices:
        log.info("Resetting existing IPU configuration before applying new configuration")
    devices, first = [], 0
    for ordinal, (n, target) in enumerate(zip(counts, targets)):
        devices.append(VirtualDevice(ordinal, n, target, first_ipu=first, numerics=numerics, connection=connection))
        first += n
    if connection == "ALWAYS":
        for d in devices:
            d.attach()
    _system.devices = devices
    _system.options = options
    return devices


def reset() -> None:
    """Release every device (``reset_ipu_configuration``)."""
    _system.devices = []
    _system.options = None


def get_device(ordinal: int) -> VirtualDevice:
    """The device ``/device:IPU:<ordinal>``; a clear error if the system is not configured.

    Also checks ``TF_POPLAR_FLAGS`` (parsed once per value), so a bad flag fails before any IPU compile or run.
    """
    poplar_flags()
    if not _system.devices:
        raise InvalidArgumentError(
            f"No IPU devices are configured, so /device:IPU:{ordinal} does not exist. Configure the system "
            "first: `cfg = ipu.config.IPUConfig(); cfg.auto_select_ipus = 1; cfg.configure_ipu_system()`."
        )
    if not 0 <= ordinal < len(_system.devices):
        raise InvalidArgumentError(
            f"Could not satisfy device specification '/device:IPU:{ordinal}': the system has "
            f"{len(_system.devices)} IPU device(s) (/device:IPU:0..{len(_system.devices) - 1})."
        )
    return _system.devices[ordinal]


def execute(executable: Any, device: str, args: Any, variables: dict[int, np.ndarray],
            feeds: Any = None, versions: dict[int, int] | None = None,
            views: dict[int, ReplicaView] | None = None) -> list[np.ndarray]:
    """Run ``executable`` (a :class:`~popjit.pipeline.executable.Executable`) on ``device`` with ``args``,
    ``variables`` (updated in place) and the host's ``feeds``; its results. The one place programs run,
    so the IPU device's connection type is honoured for all of them (see the module docstring): with
    ``PRE_COMPILE`` its results are zeros and nothing runs; with ``NEVER`` it raises
    ``InvalidArgumentError`` without running. Variables and feeds are left as they were in both.

    On a device of several IPUs the program runs as one replica per IPU (:mod:`popjit.runtime.replicas`);
    ``variables`` are replica 0's, ``versions`` say which of them the host wrote since the other replicas
    last received them, and ``views`` give the variables whose value is each replica's own (its random
    generator's words, its replication index) by replica index."""
    ordinal = ipu_ordinal(device)
    if ordinal is None:
        return _run_one(executable, lambda: executable.run(args, variables, feeds, HOST_GENERATOR.rounding))
    dev = get_device(ordinal)
    if dev.connection == "NEVER":
        executable.precompile(variables, feeds, deliver=False)
        raise InvalidArgumentError(
            "Trying to run an executable on a device that was configured for compilation only. "
            f"({dev.name} has device_connection.type DeviceConnectionType.NEVER: '{executable.graph.name}' was "
            f"compiled, and is kept in the executable cache when TF_POPLAR_FLAGS sets --executable_cache_path.)"
            f"{where()}")
    total = executable.target.replicas
    if dev.connection == "PRE_COMPILE":
        return _precompiled(executable, variables, feeds, total)
    dev.attach()
    if total == 1:
        return _run_one(executable, lambda: executable.run(args, variables, feeds, dev.generator.rounding))
    world, local, first = local_part(total)
    per_replica = dev.store.variables(variables, versions or {}, local)
    for vid, view in (views or {}).items():
        if vid in variables:
            for r, own in enumerate(per_replica):
                own[vid] = view(first + r)
    return run_replicated(executable, args, per_replica, dev.replica_rounding(first, local), first, total, world,
                          feeds)


def _precompiled(executable: Any, variables: dict[int, np.ndarray], feeds: Any, total: int) -> list[np.ndarray]:
    """A run in ``PRE_COMPILE`` mode: compiled, nothing run, zeros out; a replicated program's outfeeds get
    every local replica's zeros (with their replica axis), as a run would give them."""
    _, local, _ = local_part(total)
    if local == 1 or feeds is None or not executable.program.stream_out:
        return executable.precompile(variables, feeds)
    outs = executable.precompile(variables, feeds, deliver=False)
    zeros = {b.uid: np.zeros(b.shape, b.dtype.np) for b in executable.program.stream_out}
    deliver_replicated(executable.program, [zeros] * local)
    return outs


def program_replicas(executable: Any) -> int:
    """How many replicas (of every instance) a compiled program runs as: 1 for a host program."""
    return executable.target.replicas if executable.target is not None else 1


def local_part(total: int) -> tuple[Any, int, int]:
    """This process's part of a program's ``total`` replicas: the instances they span (None: this process
    alone), how many replicas run here, and the global index of the first."""
    world = spanned_instances()
    local = total // _instance_count()
    return world, local, local * world.index if world is not None else 0


def _instance_count() -> int:
    world = spanned_instances()
    return world.count if world is not None else 1


def spanned_instances() -> Any:
    """The instances (:func:`popjit.runtime.instances.world`) whose devices share the replicas of every
    program, when the configured system says so (``experimental.multi_replica_distribution.process_count``
    above 1, as ``popdist.tensorflow.set_ipu_config`` sets it under ``popjit poprun``); else None."""
    distribution = getattr(getattr(_system.options, "experimental", None), "multi_replica_distribution", None)
    if distribution is None or distribution.process_count <= 1:
        return None
    return instances.world()


def _run_one(executable: Any, run: Callable[[], list[np.ndarray]]) -> list[np.ndarray]:
    """``run()``: one replica of the program (whose collectives, if any, reduce over itself alone)."""
    return run_alone(executable, run) if executable.program_has_collectives else run()


def program_numerics(device: str) -> Numerics:
    """The floating-point behaviour programs run on ``device`` compile with (the host's: the default)."""
    ordinal = ipu_ordinal(device)
    return get_device(ordinal).numerics if ordinal is not None else DEFAULT


def generator(device: str) -> GeneratorState:
    """The random generator of ``device`` (an IPU device's own, or the host's)."""
    ordinal = ipu_ordinal(device)
    return get_device(ordinal).generator if ordinal is not None else HOST_GENERATOR
