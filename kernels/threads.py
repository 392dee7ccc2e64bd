"""How many threads popjit's parallel codelets and matmuls use: the cores this process may run on.

A machine's core count is not what a process gets: a CPU affinity mask (``taskset``, a batch
scheduler) or a container's cgroup CPU quota gives it fewer, and threads beyond those only take
turns. popjit sizes Numba's thread pool to :func:`threads_to_use`, once per process, before the first
parallel code runs (its matmuls run on that pool, or on as many OpenBLAS threads);
``POPJIT_NUM_THREADS`` sets it explicitly. The user's ``OPENBLAS_NUM_THREADS``/``OMP_NUM_THREADS``
(often set to 1 for other programs) do not apply.
Numba-free, so reading it compiles nothing.
"""

from __future__ import annotations

import functools
import math
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from popjit import config

CGROUP_ROOT = Path("/sys/fs/cgroup")


def cgroup_cpu_limit(root: Path = CGROUP_ROOT) -> float | None:
    """The CPU quota of this process's cgroup in cores (``cpu.max`` of cgroup v2, or v1's
    ``cpu.cfs_quota_us``/``cpu.cfs_period_us``), or None when there is none."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota_us = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period_us = int((root / "cpu" / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return quota_us / period_us if quota_us > 0 and period_us > 0 else None


@functools.lru_cache(maxsize=1)
def available_cores() -> int:
    """The cores this process may use: its CPU affinity, capped by its cgroup's CPU quota (read once)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # why: not on Linux
        cores = os.cpu_count() or 1
    limit = cgroup_cpu_limit()
    if limit is not None:
        cores = min(cores, max(1, math.ceil(limit)))
    return max(1, cores)


def threads_to_use() -> int:
    """``POPJIT_NUM_THREADS`` if set, else :func:`available_cores`."""
    chosen = config.get("NUM_THREADS")
    return available_cores() if chosen is None else max(1, chosen)


def runnable_elsewhere(samples: int = 20, interval: float = 1e-4, proc: Path = Path("/proc")) -> float | None:
    """How many threads of other processes are running or waiting for a core right now: the median of
    ``samples`` readings, ``interval`` seconds apart, of the kernel's count of runnable threads (the fourth
    field of ``/proc/loadavg``, machine-wide) less this process's own running ones. None where it cannot
    be read (not Linux). A few milliseconds; a median, so a process that runs for a moment does not count."""
    counts = []
    for _ in range(samples):
        try:
            runnable = int((proc / "loadavg").read_text().split()[3].split("/")[0])
        except (OSError, ValueError, IndexError):
            return None
        # why only above one: one runnable thread is the reader itself, and scanning this process's threads
        # each time took 30 ms in all beside TensorFlow (8 threads), against 6 ms
        counts.append(runnable - _own_running(proc) if runnable > 1 else 0)
        time.sleep(interval)
    return max(0.0, statistics.median(counts))


def _own_running(proc: Path) -> int:
    """This process's threads that are running or runnable (at least the one reading)."""
    running = 0
    for task in (proc / "self" / "task").iterdir():
        try:
            state = (task / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue  # why: a thread that ended while we looked
        running += state == "R"
    return max(running, 1)


def cores_to_spare(threads: int, others: float | None) -> bool:
    """Whether ``threads`` threads of popjit's pool would each have a core of their own beside ``others``
    runnable threads of other processes (:func:`runnable_elsewhere`; None: unknown, so no)."""
    return others is not None and others + threads <= machine_cores()


@functools.lru_cache(maxsize=1)
def machine_cores() -> int:
    """The machine's cores (read once: ``os.cpu_count`` took microseconds of every engine run)."""
    return os.cpu_count() or 1


#: How long (seconds) popjit trusts its last look at whether other processes need the cores
#: (:class:`ContentionWatch`): engines started within it reuse the answer.
CONTENTION_RECHECK_S = 0.5


class ContentionWatch:
    """Whether other processes' runnable threads leave popjit's threads a core each, looked at again
    (:func:`runnable_elsewhere`, three readings: about a millisecond) when the last look is older than
    ``every`` seconds. ``look`` returns the runnable threads of other processes, None where unknown
    (then never contended)."""

    def __init__(self, every: float = CONTENTION_RECHECK_S,
                 look: Callable[[], float | None] = lambda: runnable_elsewhere(samples=3)) -> None:
        self.every = every
        self.look = look
        self.others: float | None = None  # the last look's count
        self._stale_at = -math.inf

    def contended(self, threads: int, now: float | None = None) -> bool:
        """Whether ``threads`` threads of popjit would share a core with another process's runnable
        thread (:func:`cores_to_spare`), by a look at most ``every`` seconds old at ``now``."""
        now = time.monotonic() if now is None else now
        if now >= self._stale_at:
            self.others = self.look()
            self._stale_at = now + self.every
        return self.others is not None and not cores_to_spare(threads, self.others)
