"""``tf.compat.v1.ConfigProto``, ``RunOptions`` and ``RunMetadata``: session configuration and step timings.

A ``ConfigProto`` option either does what TensorFlow's does on popjit or raises naming itself:
``allow_soft_placement`` (every popjit op runs on the CPU and the IPU, so placement never fails
either way), ``gpu_options`` and ``device_count`` (there is no GPU; they configure GPUs) are kept;
``log_device_placement=True`` and the thread-pool options raise ``UnimplementedError``.
``Session.run(run_metadata=...)`` fills ``step_stats`` with the run's phases and their times.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from popjit.errors import UnimplementedError

_KEPT = ("allow_soft_placement", "gpu_options", "device_count")
_REFUSED = ("log_device_placement", "isolate_session_state", "intra_op_parallelism_threads",
            "inter_op_parallelism_threads",
            "use_per_session_threads", "session_inter_op_thread_pool", "graph_options", "experimental",
            "operation_timeout_in_ms", "rpc_options", "cluster_def", "placement_period", "device_filters")


class ConfigProto:
    """Session options (see the module docstring for which popjit honours)."""

    def __init__(self, **options: Any) -> None:
        for name, value in options.items():
            if name in _REFUSED:
                if value:
                    raise UnimplementedError(f"tf.compat.v1.ConfigProto({name}=...) is not supported by popjit: "
                                             "remove it (popjit sizes its own thread pool to the cores it may use).")
            elif name not in _KEPT:
                raise ValueError(f'Protocol message ConfigProto has no "{name}" field.')
            setattr(self, name, value)

    def __repr__(self) -> str:
        return f"ConfigProto({', '.join(f'{k}={v!r}' for k, v in vars(self).items())})"


class RunOptions:
    """``Session.run`` options: ``trace_level`` (any level fills a given ``RunMetadata`` with step timings)."""

    NO_TRACE, SOFTWARE_TRACE, HARDWARE_TRACE, FULL_TRACE = 0, 1, 2, 3

    def __init__(self, trace_level: int = 0, timeout_in_ms: int = 0, **options: Any) -> None:
        if timeout_in_ms or options:
            raise UnimplementedError("tf.compat.v1.RunOptions: only trace_level is supported by popjit.")
        self.trace_level = trace_level


@dataclass
class NodeExecStats:
    node_name: str
    all_start_micros: int
    all_end_rel_micros: int


@dataclass
class DeviceStepStats:
    device: str
    node_stats: list[NodeExecStats] = field(default_factory=list)


@dataclass
class StepStats:
    dev_stats: list[DeviceStepStats] = field(default_factory=list)


class RunMetadata:
    """What a ``Session.run`` given it reports: ``step_stats.dev_stats``, one entry per device with the
    phases of the run (host actions, the program, host fetches) and their start and duration in µs."""

    def __init__(self) -> None:
        self.step_stats = StepStats()
        self.partition_graphs: list[Any] = []

    @contextmanager
    def timed(self, device: str, name: str) -> Iterator[None]:
        start = time.time()
        try:
            yield
        finally:
            stats = next((d for d in self.step_stats.dev_stats if d.device == device), None)
            if stats is None:
                stats = DeviceStepStats(device)
                self.step_stats.dev_stats.append(stats)
            stats.node_stats.append(NodeExecStats(name, int(start * 1e6), int((time.time() - start) * 1e6)))
