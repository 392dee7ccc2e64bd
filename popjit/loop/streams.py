"""Lowering the host streams: infeed dequeues and outfeed enqueues.

Each feed gets host buffers shaped ``[count, *element]`` (``Program.stream_in`` / ``stream_out``)
and an int64 position counter that starts at 0 with every execution. A dequeue copies the counter
to a per-site position, advances the counter, and reads its element at that position (the read
fuses into its consumers); an enqueue stores each value at the counter's position and advances
it. ``count`` is how many times the site runs per execution: the product of the static trip
counts of the loops around it, summed over sites. A stream inside a loop whose trip count is only
known at run time, or inside a conditional, cannot be sized before the run and is refused.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from popjit import dtypes
from popjit.errors import UnimplementedError
from popjit.ir.graph import Aval
from popjit.ir.lazy import Lazy
from popjit.ir.loop import Apply, Buffer, Const, Kernel, Load, Store, flat_index, ivalue, ivar, row_major_strides

I64 = dtypes.int64


class StreamLowering:
    """The stream buffers and counters of one program being lowered."""

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx
        self.counts: dict[tuple[str, int], int] = {}
        self.buffers: dict[tuple[str, int], list[Buffer]] = {}
        self.counters: dict[tuple[str, int], Buffer] = {}
        self.modes: dict[int, str] = {}
        self.trips: list[int | None] = []  # trip counts of the enclosing loops (None: unknown)

    # -- bookkeeping ---------------------------------------------------------------------------
    def _runs(self, what: str) -> int:
        """How many times a site at the current position runs per execution."""
        if any(t is None for t in self.trips):
            raise UnimplementedError(
                f"{what} inside a loop whose trip count is only known at run time, or inside a conditional: "
                "popjit fills and drains streams once per execution, so it must know how many elements the "
                "program uses. Loop over tf.range with a Python int (or a constant) bound instead."
            )
        return math.prod(t for t in self.trips if t is not None)

    def _counter(self, key: tuple[str, int]) -> Buffer:
        if key not in self.counters:
            buf = self.ctx.new_temp((), I64, "stream_counter")
            init = Kernel(self.ctx.name("stream_init", ()), (), [Store(buf, ivalue(Const(0, I64)), Const(0, I64))])
            self.ctx.program.body.insert(0, init)
            self.counters[key] = buf
        return self.counters[key]

    def _advance(self, counter: Buffer) -> None:
        here = Load(counter, ivalue(Const(0, I64)))
        nxt = Apply("add", (here, Const(1, I64)), I64)
        self.ctx.emit(Kernel(self.ctx.name("stream_advance", ()), (), [Store(counter, here.index, nxt)]))

    def _buffers(self, key: tuple[str, int], avals: Sequence[Aval], kind: str) -> list[Buffer]:
        if key not in self.buffers:
            direction, feed = key
            made = [Buffer(f"{direction[:2]}{feed}_{c}", (0, *a.shape), a.dtype, kind, binding=(direction, feed, c))
                    for c, a in enumerate(avals)]
            (self.ctx.program.stream_in if kind == "arg" else self.ctx.program.stream_out).extend(made)
            self.buffers[key] = made
        return self.buffers[key]

    # -- the two effects -------------------------------------------------------------------------
    def dequeue(self, feed: int, avals: Sequence[Aval]) -> list[Lazy]:
        """The next element of infeed ``feed``: one lazy value per component."""
        key = ("infeed", feed)
        self.counts[key] = self.counts.get(key, 0) + self._runs("An infeed dequeue (next(iterator))")
        bufs = self._buffers(key, avals, "arg")
        counter = self._counter(key)
        pos = self.ctx.new_temp((), I64, "stream_pos")
        zero = ivalue(Const(0, I64))
        self.ctx.emit(Kernel(self.ctx.name("stream_pos", ()), (), [Store(pos, zero, Load(counter, zero))]))
        self._advance(counter)
        at = ivalue(Load(pos, zero))
        return [_element(buf, a, at) for buf, a in zip(bufs, avals)]

    def enqueue(self, feed: int, mode: str, values: Sequence[Lazy]) -> None:
        """Append ``values`` to outfeed ``feed`` (``all``: at the counter; ``last``: overwrite)."""
        key = ("outfeed", feed)
        self.modes[feed] = mode
        runs = self._runs("An outfeed enqueue") if mode == "all" else 1
        self.counts[key] = self.counts.get(key, 0) + runs
        avals = [Aval(v.shape, v.dtype) for v in values]
        bufs = self._buffers(key, avals, "out")
        counter = self._counter(key) if mode == "all" else None
        base = ivalue(Load(counter, ivalue(Const(0, I64)))) if counter is not None else ivalue(Const(0, I64))
        for buf, v in zip(bufs, values):
            idx = tuple(ivar(f"i{k}") for k in range(v.ndim))
            where = base * max(1, v.size) + flat_index(idx, row_major_strides(v.shape))
            self.ctx.emit(Kernel(self.ctx.name("outfeed", v.ops), v.shape, [Store(buf, where, v.build(idx))], None,
                                 v.ops + ("outfeed",)))
        if counter is not None:
            self._advance(counter)

    def finish(self) -> None:
        """Give each stream buffer its final ``[count, ...]`` shape (``[...]`` for LAST outfeeds)."""
        for (direction, feed), bufs in self.buffers.items():
            count = self.counts[(direction, feed)]
            last = direction == "outfeed" and self.modes.get(feed) == "last"
            for buf in bufs:
                buf.shape = buf.shape[1:] if last else (count, *buf.shape[1:])


def _element(buf: Buffer, aval: Aval, at: Any) -> Lazy:
    strides = row_major_strides(aval.shape)
    size = max(1, aval.size)
    return Lazy(aval.shape, aval.dtype, lambda idx: Load(buf, at * size + flat_index(idx, strides)), None,
                ("infeed",))
