"""Host sides of the infeeds and outfeeds a compiled program uses.

Feed objects (an infeed iterator, an ``IPUOutfeedQueue``) register here for an id that the graph's
stream ops carry. Before an execution the host takes from each infeed exactly the elements the
program will read (``feed.take(count)``: one array ``[count, ...]`` per component; an infeed that
has fewer left raises ``OutOfRangeError`` before anything runs, so variables stay as they were);
after it, each outfeed receives the values the program wrote (``feed.put(arrays)``).
"""

from __future__ import annotations

import itertools
import weakref
from typing import Any

import numpy as np

from popjit.errors import InvalidArgumentError, NotFoundError
from popjit.ir.loop import Buffer, Program

_FEEDS: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
_ids = itertools.count(1)


def register(feed: Any) -> int:
    """A new id for ``feed`` (kept only while the feed object lives)."""
    feed_id = next(_ids)
    _FEEDS[feed_id] = feed
    return feed_id


def lookup(kind: str, feed_id: int) -> Any:
    """The live feed with this id; ``NotFoundError`` if it was deleted."""
    feed = _FEEDS.get(feed_id)
    if feed is None or getattr(feed, "_deleted", False):
        raise NotFoundError(f"{kind.capitalize()} with id={feed_id} was deleted (or never existed); create the "
                            f"{kind} again before running a program that uses it.")
    return feed


def by_feed(buffers: list[Buffer]) -> dict[int, list[Buffer]]:
    """Stream buffers grouped by feed id, each feed's in component order."""
    grouped: dict[int, list[Buffer]] = {}
    for b in buffers:
        grouped.setdefault(b.binding[1], []).append(b)
    return {k: sorted(v, key=lambda b: b.binding[2]) for k, v in grouped.items()}


def lookup_for(kind: str, feed_id: int, replicas: int) -> Any:
    """The live feed with this id, for a program run as ``replicas`` replicas: an SDK 1.x feed made for
    another replication factor (``replication_factor=``) is an ``InvalidArgumentError``."""
    feed = lookup(kind, feed_id)
    factor = getattr(feed, "replication_factor", None)
    if factor is not None and factor != replicas:
        raise InvalidArgumentError(
            f"The {kind} with id={feed_id} was created with replication_factor={factor}, but the program using it runs "
            f"as {replicas} replica{'s' if replicas > 1 else ''} (one per IPU of its device). Give the {kind} the "
            f"device's replication factor, or attach a device of {factor} IPUs.")
    return feed


class RegisteredFeeds:
    """The feeds registered here, as the :class:`~popjit.pipeline.executable.HostFeeds` executables run with."""

    def take_inputs(self, program: Program) -> dict[int, np.ndarray]:
        """The infeed elements for one execution, by buffer uid (``OutOfRangeError`` when a feed runs dry)."""
        arrays: dict[int, np.ndarray] = {}
        for feed_id, bufs in by_feed(program.stream_in).items():
            parts = lookup_for("infeed", feed_id, 1).take(bufs[0].shape[0])
            for b, a in zip(bufs, parts):
                arrays[b.uid] = np.ascontiguousarray(a, dtype=b.dtype.np)
        return arrays

    def deliver_outputs(self, program: Program, arrays: dict[int, np.ndarray]) -> None:
        """Hand each outfeed the values this execution wrote."""
        for feed_id, bufs in by_feed(program.stream_out).items():
            lookup_for("outfeed", feed_id, 1).put([arrays[b.uid] for b in bufs])


FEEDS = RegisteredFeeds()


class InterpreterStreams:
    """The graph interpreter's effect handler: the same feeds, one element per dequeue/enqueue."""

    def run(self, node: Any, args: list[np.ndarray]) -> list[np.ndarray]:
        feed_id = node.attrs["feed"]
        if node.op == "infeed_dequeue":
            return [a[0] for a in lookup("infeed", feed_id).take(1)]
        if node.attrs["mode"] == "all":
            lookup("outfeed", feed_id).put([np.asarray(a)[None] for a in args])
        else:
            lookup("outfeed", feed_id).put([np.asarray(a) for a in args])
        return []
