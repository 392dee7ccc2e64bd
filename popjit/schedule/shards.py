"""Scheduling a program that spans several IPUs (sharding, pipelining): one tile space per IPU.

Every computing statement runs on one IPU: where the graph placed it (``ipu.scopes.ipu_shard``, a
pipeline stage's device, the forward op of a gradient), or, when nothing placed it, where its data is
(:func:`place_statements`; Graphcore's sharding pass gives unplaced ops their operands' shard the same
way). Every buffer has a home IPU: the IPU of the first statement writing it (or reading it, for one
that is only read). Each IPU has its own :class:`~popjit.schedule.computesets.Builder` over its own
tiles, so mappings, matmul plans and compute sets are those of one IPU.

A statement reading a buffer that lives on another IPU first receives a copy of it over the IPU-Links
(an *inter-IPU copy* step), laid out on its own IPU as the original is on its home; the copy stays valid
until the buffer is written again (or, in a loop, for one iteration of a loop that writes it). A
statement writing a buffer that lives elsewhere writes its own IPU's copy, which is then sent home. A
loop-IR ``Copy`` between buffers on two IPUs is itself the inter-IPU copy. The steps are finally put in
one tile space of ``IPUs x tiles``: IPU ``k``'s tile ``t`` is tile ``k * T + t``, which memory,
liveness and profiles see like any other tile.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import replace

import numpy as np

from popjit.ir.loop import Buffer, Collective, Copy, Kernel, MatMul, Program, Stmt
from popjit.schedule import cost
from popjit.schedule.computesets import INTER_IPU_COPY, Builder, ComputeSet
from popjit.schedule.intervals import Exchange
from popjit.schedule.mapping import TileMapping
from popjit.schedule.program import Pipeline
from popjit.schedule.target import Target

Computing = Kernel | MatMul | Copy | Collective


def computing_statements(program: Program) -> list[Computing]:
    """The program's statements that compute or move data (not the control statements), in order."""
    return [s for s in program.walk() if isinstance(s, (Kernel, MatMul, Copy, Collective))]


def _by_uid(buffers: set[Buffer]) -> list[Buffer]:
    return sorted(buffers, key=lambda b: b.uid)


def _follow(stmt: Stmt, home: dict[int, int]) -> int | None:
    """Where an unplaced statement goes: the IPU holding most of the bytes it touches (of the buffers
    placed so far), the one of what it writes on a tie; None if it touches nothing placed."""
    votes: dict[int, int] = {}
    for b in stmt.reads() | stmt.writes():
        if b.uid in home:
            votes[home[b.uid]] = votes.get(home[b.uid], 0) + b.size * b.dtype.size
    if not votes:
        return None
    written = {home[b.uid] for b in stmt.writes() if b.uid in home}
    return max(sorted(votes), key=lambda ipu: (votes[ipu], ipu in written))


def place_statements(program: Program) -> dict[int, int]:
    """The IPU of every computing statement (by ``id``): its own placement, else that of the data it
    touches, found by propagating from the placed statements; what nothing reaches goes on IPU 0."""
    stmts = computing_statements(program)
    where: dict[int, int] = {}
    home: dict[int, int] = {}

    def settle(stmt: Stmt, ipu: int) -> None:
        where[id(stmt)] = ipu
        for b in _by_uid(stmt.writes()) + _by_uid(stmt.reads()):
            home.setdefault(b.uid, ipu)

    for s in stmts:
        if s.shard is not None:
            settle(s, s.shard)
    pending = [s for s in stmts if s.shard is None]
    while pending:
        left = []
        for s in pending:
            ipu = _follow(s, home)
            if ipu is None:
                left.append(s)
            else:
                settle(s, ipu)
        if len(left) == len(pending):  # nothing placed connects to these: start again from IPU 0
            settle(left.pop(0), 0)
        pending = left
    return where


def buffer_homes(program: Program, where: dict[int, int]) -> dict[int, int]:
    """Each buffer's home IPU: its first writer's, or its first reader's if nothing writes it."""
    written: dict[int, int] = {}
    read: dict[int, int] = {}
    for s in computing_statements(program):
        for b in s.writes():
            written.setdefault(b.uid, where[id(s)])
        for b in s.reads():
            read.setdefault(b.uid, where[id(s)])
    return {**read, **written}


def on_ipu(mapping: TileMapping, ipu: int, tiles_per_ipu: int, ipus: int) -> TileMapping:
    """A mapping onto one IPU's tiles as a mapping onto the tiles of all ``ipus`` IPUs."""
    return TileMapping(mapping.size, mapping.starts, mapping.tiles + ipu * tiles_per_ipu, tiles_per_ipu * ipus)


class ShardedBuilder:
    """Builds the steps of a multi-IPU program (see the module docstring): the same interface as
    :class:`Builder`, over the tiles of all its IPUs."""

    def __init__(self, target: Target, program: Program) -> None:
        self.target = target
        self.ipus = target.num_ipus
        self.tiles_per_ipu = target.tiles // target.num_ipus
        one = replace(target, tiles=self.tiles_per_ipu, num_ipus=1)
        self.local = [Builder(one) for _ in range(self.ipus)]
        self.where = place_statements(program)
        self.home = buffer_homes(program, self.where)
        self.copies: dict[tuple[int, int], Buffer] = {}  # (buffer uid, IPU) -> its copy there
        self.valid: set[tuple[int, int]] = set()  # copies holding the buffer's current value

    # -- buffers ------------------------------------------------------------------------------------
    def home_of(self, buf: Buffer) -> int:
        return self.home.get(buf.uid, 0)

    def mapped(self, buf: Buffer) -> bool:
        return self.local[self.home_of(buf)].mapped(buf)

    def mapping(self, buf: Buffer) -> TileMapping:
        """The buffer's mapping on its home IPU (its own tile numbers), allocated if it has none."""
        return self.local[self.home_of(buf)].mapping(buf)

    def allocate_for_matmul(self, buf: Buffer, mm: MatMul) -> None:
        ipu = self.home_of(buf)
        if self.where[id(mm)] == ipu:
            self.local[ipu].allocate_for_matmul(buf, mm)
        else:
            self.local[ipu].mapping(buf)

    def copy_of(self, buf: Buffer, ipu: int) -> Buffer:
        """The buffer holding ``buf``'s copy on ``ipu``."""
        key = (buf.uid, ipu)
        if key not in self.copies:
            self.copies[key] = Buffer(f"{buf.name}@ipu{ipu}", buf.shape, buf.dtype, "temp")
        return self.copies[key]

    def as_on(self, buf: Buffer, ipu: int) -> Buffer:
        """What holds ``buf`` on ``ipu``: itself on its home, else its copy there."""
        return buf if self.home_of(buf) == ipu else self.copy_of(buf, ipu)

    def _uid_on(self, uid: int, ipu: int) -> int:
        return self.as_on(self.local[ipu].buffers[uid], ipu).uid

    # -- statements ---------------------------------------------------------------------------------
    def steps_of(self, stmt: Computing) -> list[ComputeSet]:
        """The statement's steps on its IPU, with the inter-IPU copies it needs before and after."""
        if isinstance(stmt, Copy) and self.home_of(stmt.src) != self.home_of(stmt.dst):
            return [self._copy_between(stmt)]
        ipu = self.where[id(stmt)]
        builder = self.local[ipu]
        before = [self._bring(b, ipu, stmt.backward) for b in _by_uid(stmt.reads()) if self.home_of(b) != ipu]
        steps = [self._globalize(cs, ipu) for cs in builder.steps_of(stmt)]
        after = []
        for b in _by_uid(stmt.writes()):
            self._written(b)
            home = self.home_of(b)
            if home != ipu:
                if not self.local[home].mapped(b):
                    self.local[home].assign(b, builder.mapping(b), f"sent from IPU {ipu}")
                after.append(self._link_copy(b, ipu, b, home, stmt.backward))
                self.valid.add((b.uid, ipu))
        return [cs for cs in before if cs is not None] + steps + after

    def _bring(self, buf: Buffer, ipu: int, backward: bool) -> ComputeSet | None:
        """An inter-IPU copy of ``buf`` from its home to ``ipu``, unless ``ipu`` holds a valid one."""
        if (buf.uid, ipu) in self.valid:
            return None
        home = self.home_of(buf)
        laid_out = self.local[home].mapping(buf)
        if not self.local[ipu].mapped(buf):
            self.local[ipu].assign(buf, laid_out, f"copy of {buf.name} from IPU {home}")
        self.valid.add((buf.uid, ipu))
        return self._link_copy(buf, home, buf, ipu, backward)

    def _copy_between(self, c: Copy) -> ComputeSet:
        """A loop-IR ``Copy`` from a buffer on one IPU to a buffer on another: one inter-IPU copy."""
        src, dst = self.home_of(c.src), self.home_of(c.dst)
        laid_out = self.local[src].mapping(c.src)
        if not self.local[dst].mapped(c.dst) and c.dst.size == c.src.size:
            self.local[dst].assign(c.dst, laid_out, f"copy of {c.src.name} from IPU {src}")
        self.local[dst].mapping(c.dst)
        self._written(c.dst)
        return self._link_copy(c.src, src, c.dst, dst, c.backward)

    def _written(self, buf: Buffer) -> None:
        """``buf`` has a new value: its copies on other IPUs are out of date."""
        self.valid = {key for key in self.valid if key[0] != buf.uid}

    def _link_copy(self, src_buf: Buffer, src: int, dst_buf: Buffer, dst: int, backward: bool) -> ComputeSet:
        """The step sending ``src_buf`` as laid out on IPU ``src`` (its home, or its copy there) into
        ``dst_buf`` as laid out on IPU ``dst``: each tile sends its part, the IPU-Links carry the whole."""
        t, T, n = self.target, self.tiles_per_ipu, self.ipus
        sent = on_ipu(self.local[src].mappings[src_buf.uid], src, T, n)
        received = on_ipu(self.local[dst].mappings[dst_buf.uid], dst, T, n)
        bytes_out, bytes_in = sent.bytes_per_tile(src_buf.dtype), received.bytes_per_tile(dst_buf.dtype)
        ex = Exchange(bytes_in, bytes_out, (bytes_in > 0).astype(np.int64), (bytes_out > 0).astype(np.int64))
        nbytes = src_buf.size * src_buf.dtype.size
        source, target = self.as_on(src_buf, src), self.as_on(dst_buf, dst)
        return ComputeSet(
            f"copy {target.name} <- {source.name} (IPU {src} to IPU {dst})", INTER_IPU_COPY, {},
            np.zeros(t.tiles, np.int64), ex, t, temp_bytes=np.zeros(t.tiles, np.int64),
            copy_descriptor_bytes=received.regions_per_tile * cost.COPY_DESCRIPTOR_BYTES,
            elements=received.elements_per_tile, reads=frozenset({source.uid}), writes=frozenset({target.uid}),
            program="Copy", link_cycles=cost.link_copy_cycles(nbytes, t.link_bytes_per_cycle, t.link_latency_cycles),
            note=f"{nbytes:,} B over IPU-Links", ipu=dst, backward=backward,
        )

    def _globalize(self, cs: ComputeSet, ipu: int) -> ComputeSet:
        """A step built on one IPU's tiles, on the tiles of all of them (its buffers' copies named as such)."""
        T, n = self.tiles_per_ipu, self.ipus

        def pad(a: np.ndarray | None) -> np.ndarray | None:
            if a is None:
                return None
            out = np.zeros(T * n, np.asarray(a).dtype)
            out[ipu * T:(ipu + 1) * T] = a
            return out

        def exchange(e: Exchange | None) -> Exchange | None:
            return None if e is None else Exchange(pad(e.bytes_in), pad(e.bytes_out), pad(e.msgs_in), pad(e.msgs_out),
                                                   pad(e.paired_in))

        return replace(
            cs, target=self.target, codelets={k: pad(v) for k, v in cs.codelets.items()},
            compute_cycles=pad(cs.compute_cycles), exchange_in=exchange(cs.exchange_in),
            exchange_out=exchange(cs.exchange_out), temp_bytes=pad(cs.temp_bytes), state_bytes=pad(cs.state_bytes),
            copy_descriptor_bytes=pad(cs.copy_descriptor_bytes), elements=pad(cs.elements),
            reads=frozenset(self._uid_on(u, ipu) for u in cs.reads),
            writes=frozenset(self._uid_on(u, ipu) for u in cs.writes), ipu=ipu,
            note=f"IPU {ipu}" + (f"; {cs.note}" if cs.note else ""),
        )

    # -- control flow ---------------------------------------------------------------------------------
    def enter_loop(self, body: list[Stmt]) -> None:
        """A loop's body runs again after it writes its buffers: copies of those are not valid on entry."""
        for s in body:
            for inner in s.walk():
                for b in inner.writes():
                    self._written(b)

    @contextlib.contextmanager
    def branch(self) -> Iterator[None]:
        """A branch may not run: copies it makes are not valid after it, those it spoils stay spoilt."""
        before = set(self.valid)
        yield
        self.valid &= before

    # -- results --------------------------------------------------------------------------------------
    @property
    def mappings(self) -> dict[int, TileMapping]:
        """Every buffer's (and copy's) mapping on the tiles of all the IPUs."""
        out: dict[int, TileMapping] = {}
        for ipu, b in enumerate(self.local):
            for uid, m in b.mappings.items():
                out[self._uid_on(uid, ipu)] = on_ipu(m, ipu, self.tiles_per_ipu, self.ipus)
        return out

    @property
    def buffers(self) -> dict[int, Buffer]:
        out: dict[int, Buffer] = {}
        for ipu, b in enumerate(self.local):
            for buf in b.buffers.values():
                mine = self.as_on(buf, ipu)
                out[mine.uid] = mine
        return out

    @property
    def origin(self) -> dict[int, str]:
        out: dict[int, str] = {}
        for ipu, b in enumerate(self.local):
            for uid, how in b.origin.items():
                out[self._uid_on(uid, ipu)] = f"IPU {ipu}: {how}"
        return out


def pipeline_stashes(steps: list[ComputeSet], pipe: Pipeline, buffers: dict[int, Buffer],
                     mappings: dict[int, TileMapping]) -> list[tuple[Buffer, TileMapping]]:
    """What a pipeline's stages keep for the micro-batches in flight [U: Graphcore's stashes, modelled]: each
    activation a stage's forward pass writes on its IPU and its backward pass reads there is kept for the
    ``in_flight - 1`` other micro-batches between them, on the activation's own tiles; recomputing stages keep
    only their inputs (what arrives over the IPU-Links). ``steps``: the pipeline body's steps."""
    first_stage = {d: pipe.mapping.index(d) for d in set(pipe.mapping)}
    written: dict[int, ComputeSet] = {}
    for cs in steps:
        if not cs.backward:
            for uid in cs.writes:
                written[uid] = cs
    kept = sorted({(uid, cs.ipu) for cs in steps if cs.backward for uid in cs.reads
                   if uid in written and written[uid].ipu == cs.ipu and buffers[uid].kind == "temp"})
    out = []
    for uid, ipu in kept:
        if pipe.recompute and written[uid].kind != INTER_IPU_COPY:
            continue
        extra = pipe.in_flight(first_stage.get(ipu, 0)) - 1
        if extra <= 0:
            continue
        buf, m = buffers[uid], mappings[uid]
        stash = Buffer(f"{buf.name} stashed for {extra} micro-batches", (extra, *buf.shape), buf.dtype, "temp")
        out.append((stash, TileMapping(m.size * extra, m.starts * extra, m.tiles, m.num_tiles)))
    return out
