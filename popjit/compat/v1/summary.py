"""``tf.compat.v1.summary``: TensorBoard summaries of a TF1 graph, written by tensorboardX.

``scalar``/``histogram`` return an operation whose fetched value is a serialized ``Summary``
protocol buffer (bytes), as TF1's summary ops do; ``merge``/``merge_all`` combine them; a
``FileWriter`` appends them to a real TensorBoard event file (``events.out.tfevents.*``) that
TensorBoard and ``tf.compat.v1.train.summary_iterator`` read. The graph itself is not written
(popjit's graphs are not TensorFlow GraphDefs).
"""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from popjit.compat.v1 import graph_ops
from popjit.errors import missing_attributes
from popjit.frontend import graph_mode
from popjit.frontend.convert import convert_to_tensor

_log = logging.getLogger("popjit")


def _tensorboardx() -> Any:
    # why: tensorboardX (and protobuf) cost 0.2 s to import: only programs that write summaries pay it
    import tensorboardX
    import tensorboardX.proto.summary_pb2

    return tensorboardX


def scalar_summary(tag: str, value: Any) -> bytes:
    """A serialized ``Summary`` holding the scalar ``value`` under ``tag`` (what a run of :func:`scalar` gives)."""
    return _tensorboardx().summary.scalar(tag, float(np.asarray(value))).SerializeToString()


def _summary_proto() -> Any:
    return _tensorboardx().proto.summary_pb2.Summary


def _summary_op(name: str, tensor: Any, make: Any, collections: Sequence[str] | None) -> Any:
    trace = graph_ops._graph(f"summary.{name}")
    op = graph_mode.Operation(trace, name, fetch=make, fetch_inputs=[convert_to_tensor(tensor)])
    for key in collections if collections is not None else [graph_ops.GraphKeys.SUMMARIES]:
        trace.collection(key).append(op)
    return op


def scalar(name: str, tensor: Any, collections: Sequence[str] | None = None, family: str | None = None) -> Any:
    """A summary of the scalar ``tensor`` under the tag ``name``."""
    tag = f"{family}/{name}" if family else name
    return _summary_op(tag, tensor, lambda value: scalar_summary(tag, value), collections)


def histogram(name: str, values: Any, collections: Sequence[str] | None = None, family: str | None = None) -> Any:
    """A histogram summary of ``values`` under the tag ``name``."""
    tag = f"{family}/{name}" if family else name
    return _summary_op(tag, values, lambda array: _tensorboardx().summary.histogram(
        tag, np.asarray(array, np.float64), bins="auto").SerializeToString(), collections)


def merge(inputs: Sequence[Any], collections: Sequence[str] | None = None, name: str | None = None) -> Any:
    """One summary holding the values of all of ``inputs`` (summary operations)."""
    trace = graph_ops._graph("summary.merge")
    ops = list(inputs)
    op = graph_mode.Operation(trace, name or "Merge/MergeSummary", fetch=_merged_fetch(ops),
                              fetch_inputs=[t for o in ops for t in o.fetch_inputs])
    for key in collections or ():
        trace.collection(key).append(op)
    return op


def _merged_fetch(ops: list[Any]) -> Any:
    """A fetch given the arrays of all of ``ops``' inputs in order: their summaries merged into one."""
    counts = [len(o.fetch_inputs) for o in ops]

    def fetch(*arrays: Any) -> bytes:
        merged, start = _summary_proto()(), 0
        for o, n in zip(ops, counts):
            merged.MergeFromString(o.fetch(*arrays[start:start + n]))
            start += n
        return merged.SerializeToString()

    return fetch


def merge_all(key: str = graph_ops.GraphKeys.SUMMARIES, scope: str | None = None, name: str | None = None) -> Any:
    """All the summaries in collection ``key`` merged into one (None if there are none)."""
    ops = graph_ops.get_collection(key, scope)
    return merge(ops, name=name) if ops else None


_WRITERS = itertools.count()


class FileWriter:
    """Writes summaries to an event file in ``logdir`` (created if missing)."""

    def __init__(self, logdir: str, graph: Any = None, max_queue: int = 10, flush_secs: int = 120,
                 graph_def: Any = None, filename_suffix: str | None = None, session: Any = None) -> None:
        self._logdir = os.fspath(logdir)
        os.makedirs(self._logdir, exist_ok=True)
        # why: as TensorFlow's, each writer has a file of its own (its name ends with the process and a count), so
        # two writers started in the same second do not write over each other
        unique = f".{os.getpid()}.{next(_WRITERS)}{filename_suffix or ''}"
        self._writer = _tensorboardx().FileWriter(self._logdir, max_queue=max_queue, flush_secs=flush_secs,
                                      filename_suffix=unique)
        if graph is not None or graph_def is not None:
            self.add_graph(graph, graph_def=graph_def)

    def get_logdir(self) -> str:
        return self._logdir

    def add_summary(self, summary: Any, global_step: int | None = None) -> None:
        """Append a summary (the bytes a summary op's run returned, or a ``Summary``) at ``global_step``."""
        proto = _summary_proto().FromString(summary) if isinstance(summary, (bytes, bytearray)) else summary
        self._writer.add_summary(proto, None if global_step is None else int(global_step))

    def add_graph(self, graph: Any, global_step: int | None = None, graph_def: Any = None) -> None:
        """popjit's graphs are not TensorFlow GraphDefs, so none is written (logged once)."""
        _log.info("FileWriter: the graph is not written to %s (popjit's graphs are not TensorFlow GraphDefs)",
                  self._logdir)

    def flush(self) -> None:
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()

    def reopen(self) -> None:
        self._writer.reopen()

    def __enter__(self) -> FileWriter:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


__all__ = ["FileWriter", "histogram", "merge", "merge_all", "scalar"]

__getattr__ = missing_attributes("tf.compat.v1.summary")
