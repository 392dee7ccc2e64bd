"""``ipu.ipu_outfeed_queue``: values a compiled program streams back to the host.

``outfeed.enqueue(x)`` inside a ``tf.function`` run on the IPU adds an outfeed to the program: the
engine writes each enqueued value into a buffer preallocated for the whole execution (mode ALL:
``[n_enqueues, ...]``; LAST: only the final value), with no Python per step. After each execution
the values are appended here; ``dequeue()`` returns and empties them, ``for x in outfeed:`` yields
them one enqueue at a time.
"""

from __future__ import annotations

import enum
from typing import Any

import numpy as np

from popjit.errors import FailedPreconditionError, missing_attributes
from popjit.frontend import graph_mode, nest
from popjit.frontend.convert import convert_to_tensor
from popjit.frontend.tracing import current_trace
from popjit.ipu.ipu_infeed_queue import legacy_feed_options
from popjit.ir.graph import Aval
from popjit.runtime import streams
from popjit.source import where


class IPUOutfeedMode(enum.Enum):
    """ALL keeps every enqueued value; LAST only the most recent one."""

    ALL = "all"
    LAST = "get_last"


class IPUOutfeedQueue:
    """A stream of values from the device to the host."""

    def __init__(self, outfeed_mode: IPUOutfeedMode | None = None, device_ordinal: int = 0, buffer_depth: int = 1,
                 **kwargs: Any) -> None:
        legacy = legacy_feed_options("IPUOutfeedQueue", kwargs, ("feed_name", "replication_factor", "outfeed_all",
                                                                 "io_batch_size"))
        if outfeed_mode is None and "outfeed_all" in legacy:  # SDK 1.x: outfeed_all=False kept the last value
            outfeed_mode = IPUOutfeedMode.ALL if legacy["outfeed_all"] else IPUOutfeedMode.LAST
        mode = IPUOutfeedMode.ALL if outfeed_mode is None else outfeed_mode
        if not isinstance(mode, IPUOutfeedMode):
            raise ValueError("Expected `outfeed_mode` value to be of `ipu_outfeed_queue.IPUOutfeedMode` type, but is "
                             f"{outfeed_mode}.")
        if not isinstance(device_ordinal, int):
            raise ValueError("Device ordinal must be an integer")
        if device_ordinal < 0:
            raise ValueError("Device ordinal must be >= 0")
        if buffer_depth < 1:
            raise ValueError("Outfeed buffer depth cannot be less than 1")
        self._mode = mode
        self._device_ordinal = device_ordinal
        self.replication_factor: int | None = legacy.get("replication_factor")  # SDK 1.x: the replicas writing it
        self._id = streams.register(self)
        self._tree: Any = None
        self._avals: list[Aval] = []
        self._data: list[list[np.ndarray]] = []
        self._last: list[np.ndarray] | None = None
        self._enqueued = False
        self._deleted = False
        self._replicas = 1  # the replicas of the last program that wrote to it

    @property
    def enqueued(self) -> bool:
        """Whether a program has enqueued to this outfeed."""
        return self._enqueued

    def enqueue(self, tensors: Any) -> Any:
        """Add ``tensors`` (a tensor, or a list, tuple or dict of them) to the outfeed, once per program."""
        trace = current_trace()
        if trace is None:
            raise ValueError("IPUOutfeedQueue.enqueue must be called inside a tf.function run on the IPU "
                             "(e.g. through IPUStrategy.run), where it adds the outfeed to the compiled program.")
        used = trace.extra.setdefault("outfeeds_enqueued", set())
        if self._id in used:
            raise ValueError("An outfeed can only be enqueued once. Enqueue every value of the program in one "
                             "call (a tuple or dict of them), or use another IPUOutfeedQueue" + where())
        used.add(self._id)
        leaves, tree = nest.flatten_with_tree(tensors)
        values = [trace.value_of(convert_to_tensor(x)) for x in leaves]
        self._tree, self._avals = tree, [v.aval for v in values]
        mode = "all" if self._mode is IPUOutfeedMode.ALL else "last"
        node = trace.add_node("outfeed_enqueue", values, {"feed": self._id, "mode": mode}, [])
        trace.extra.setdefault("streams", []).append(self)  # a TF1 graph keeps its outfeeds, as TensorFlow's does
        self._enqueued = True
        if isinstance(trace, graph_mode.GraphTrace):  # TF1: the enqueue is an operation a session runs
            return graph_mode.Operation(trace, "outfeed_enqueue", nodes=[node] if trace.at_top else [])
        return None

    # -- the host side ---------------------------------------------------------------------------
    def put(self, arrays: list[np.ndarray]) -> None:
        """Receive one execution's values (called by the runtime)."""
        if self._mode is IPUOutfeedMode.ALL:
            self._data.append(arrays)
        else:
            self._last = arrays

    def put_replicated(self, per_replica: list[list[np.ndarray]]) -> None:
        """Receive one execution's values from every replica of a replicated program (called by the runtime):
        they gain a replica dimension, after the enqueue dimension in ALL mode (``[n, replicas, ...]``) and
        first in LAST mode (``[replicas, ...]``)."""
        axis = 1 if self._mode is IPUOutfeedMode.ALL else 0
        self._replicas = len(per_replica)
        self.put([np.stack(values, axis=axis) for values in zip(*per_replica)])

    def dequeue(self, wait_for_completion: bool = False) -> Any:
        """Everything enqueued since the last dequeue, structured as enqueued (NumPy arrays): stacked on a
        new leading axis in ALL mode, only the final value in LAST mode."""
        if not self._enqueued:
            raise ValueError("Trying to dequeue an outfeed which has not been enqueued.")
        trace = graph_mode.current_graph_trace()
        if trace is not None:  # TF1: an operation whose fetched value is what the runs so far enqueued
            return graph_mode.Operation(trace, "outfeed_dequeue", fetch=self._dequeue_now)
        return self._dequeue_now()

    def _dequeue_now(self) -> Any:
        if self._mode is IPUOutfeedMode.LAST:
            return nest.unflatten(self._tree, self._take_last())
        replicas = (self._replicas,) if self._replicas > 1 else ()
        stacked = [np.concatenate([d[k] for d in self._data]) if self._data
                   else np.zeros((0, *replicas, *a.shape), a.dtype.np) for k, a in enumerate(self._avals)]
        self._data = []
        return nest.unflatten(self._tree, stacked)

    def _take_last(self) -> list[Any]:
        if self._last is None:
            raise FailedPreconditionError(
                f"Trying to get the last value from an outfeed (id={self._id}) that has no data: no program has "
                "run since the last dequeue."
            )
        values, self._last = self._last, None
        return [a[()] if a.ndim == 0 else a for a in values]

    def __iter__(self) -> Any:
        """Each enqueued value in order (dequeues everything, then unstacks it)."""
        if self._mode is IPUOutfeedMode.LAST:
            yield self.dequeue()
            return
        leaves = nest.flatten(self.dequeue())
        count = leaves[0].shape[0] if leaves else 0
        for i in range(count):
            yield nest.unflatten(self._tree, [a[i] for a in leaves])

    @property
    def deleter(self) -> None:
        """Delete the host side of the outfeed (programs using it can no longer run)."""
        self._deleted = True


class ScopedIPUOutfeedQueue(IPUOutfeedQueue):
    """An outfeed that deletes itself when its ``with`` block ends."""

    def __enter__(self) -> ScopedIPUOutfeedQueue:
        return self

    def __exit__(self, *exc: Any) -> None:
        self._deleted = True

__getattr__ = missing_attributes("ipu.ipu_outfeed_queue")
