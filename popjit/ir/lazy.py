"""Tensors during lowering: an expression builder over the tensor's index space.

A :class:`Lazy` is what a graph value becomes while lowering to loop IR: given an index (one
:class:`ILin` per dimension) it builds the scalar :class:`Expr` of that element. A value that
is in a buffer builds a :class:`Load` through a strided *view*; an element-wise op builds an
:class:`Apply` of its inputs' expressions, which is how chains of element-wise ops fuse into
one loop nest. Movement ops (transpose, slice, broadcast, reshape of contiguous data) only
change how indices map, so they fuse for free.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from popjit.dtypes import DType
from popjit.ir.loop import Apply, Buffer, Expr, ILin, Load, as_index, flat_index, freeze_attrs, row_major_strides

Index = tuple[ILin, ...]


@dataclass
class View:
    """A strided window onto a flat buffer: element ``idx`` is at ``offset + sum(idx * strides)``."""

    buffer: Buffer
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int = 0

    @property
    def is_contiguous(self) -> bool:
        """Row-major, dense, starting at 0 and covering the whole buffer."""
        dims = [(d, s) for d, s in zip(self.shape, self.strides) if d != 1]
        expected = row_major_strides([d for d, _ in dims])
        return self.offset == 0 and all(s == e for (_, s), e in zip(dims, expected)) and self.size == self.buffer.size

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def load(self, idx: Index) -> Expr:
        return Load(self.buffer, flat_index(idx, self.strides, self.offset))


@dataclass
class Lazy:
    """A tensor being lowered: its shape, dtype and how to build any element's expression."""

    shape: tuple[int, ...]
    dtype: DType
    build: Callable[[Index], Expr]
    view: View | None = None
    ops: tuple[str, ...] = field(default=())

    @staticmethod
    def of_view(view: View, dtype: DType | None = None) -> Lazy:
        return Lazy(view.shape, dtype or view.buffer.dtype, view.load, view)

    @staticmethod
    def of_buffer(buf: Buffer, shape: Sequence[int] | None = None) -> Lazy:
        shape = tuple(buf.shape if shape is None else shape)
        return Lazy.of_view(View(buf, shape, row_major_strides(shape), 0))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def is_materialized(self) -> bool:
        return self.view is not None

    def restrided(self, shape: Sequence[int], strides: Sequence[int], offset: int) -> Lazy:
        """A new view of the same buffer (only for materialized values)."""
        assert self.view is not None, "restrided needs a materialized value"
        return Lazy.of_view(View(self.view.buffer, tuple(shape), tuple(strides), offset), self.dtype)

    def remap(self, shape: Sequence[int], index_map: Callable[[Index], Index], ops: tuple[str, ...] = ()) -> Lazy:
        """A movement: element ``idx`` of the result is element ``index_map(idx)`` of this value."""
        src = self
        return Lazy(tuple(shape), self.dtype, lambda idx: src.build(index_map(idx)), None, self.ops + ops)


def broadcast_to(x: Lazy, shape: Sequence[int]) -> Lazy:
    """NumPy broadcasting of ``x`` to ``shape`` (stride 0 along broadcast dimensions)."""
    shape = tuple(shape)
    if x.shape == shape:
        return x
    lead = len(shape) - x.ndim
    assert lead >= 0, f"cannot broadcast {x.shape} to {shape}"
    if x.view is not None:
        v = x.view
        strides = [0] * lead + [0 if (d == 1 and t != 1) else s for d, s, t in zip(v.shape, v.strides, shape[lead:])]
        return x.restrided(shape, strides, v.offset)

    def index_map(idx: Index) -> Index:
        return tuple(as_index(0) if d == 1 else i for d, i in zip(x.shape, idx[lead:]))

    return x.remap(shape, index_map)


def elementwise(op: str, args: Sequence[Lazy], out_shape: Sequence[int], out_dtype: DType,
                attrs: dict | None = None) -> Lazy:
    """The fused element-wise application of a registry op to (broadcast) inputs."""
    ins = [broadcast_to(a, out_shape) for a in args]
    frozen = freeze_attrs(attrs or {})
    fused = tuple(o for a in args for o in a.ops) + (op,)

    def build(idx: Index) -> Expr:
        return Apply(op, tuple(a.build(idx) for a in ins), out_dtype, frozen)

    return Lazy(tuple(out_shape), out_dtype, build, None, fused)
