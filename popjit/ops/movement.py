"""Movement ops: they only change which element goes where.

Lowering never copies when it can avoid it: a transpose, slice or broadcast of a buffer is a new
strided view, and of a fused expression a new index map; a reshape of contiguous data is free.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from popjit.errors import InvalidArgumentError
from popjit.graph.ir import Aval
from popjit.loop.ir import ILin, as_index, flat_index, ivar, row_major_strides
from popjit.loop.lazy import Lazy, broadcast_to
from popjit.ops.registry import MOVEMENT, OpDef, register
from popjit.ops.shapes import broadcast_shapes

# ----------------------------------------------------------------------------------------------
# reshape


def _reshape_infer(x: Aval, shape: tuple[int, ...]) -> Aval:
    shape = tuple(int(d) for d in shape)
    if any(d < 0 for d in shape) or int(np.prod(shape, dtype=np.int64)) != x.size:
        raise InvalidArgumentError(
            f"Input to reshape is a tensor with {x.size} values, but the requested shape has "
            f"{int(np.prod(shape, dtype=np.int64))} [Op:Reshape]"
        )
    return Aval(shape, x.dtype)


def flat_reindex(x: Lazy) -> Any:
    """If every element of ``x`` depends on its index only through the row-major flat index of the
    whole tensor, a function from a flat index to the element expression; else None."""
    probe_vars = tuple(ivar(f"_p{k}") for k in range(x.ndim))
    probe = x.build(probe_vars)
    flat = flat_index(probe_vars, row_major_strides(x.shape))
    names = {f"_p{k}" for k in range(x.ndim)}

    def uses_probe(ix: ILin) -> bool:
        return any(getattr(a, "name", None) in names for a in ix.atoms())

    for ld in probe.loads():
        if uses_probe(ld.index) and ld.index != flat:
            return None
    if any(uses_probe(iv.index) for iv in probe.index_values()):
        return None
    if not x.ndim:
        return lambda f: probe

    def at(f: ILin) -> Any:
        mapping = {v.terms[0][0]: as_index(0) for v in probe_vars[:-1]}
        mapping[probe_vars[-1].terms[0][0]] = f
        return probe.substitute(mapping)

    return at


def _reshape_lower(ctx: Any, node: Any, args: list[Lazy]) -> list[Lazy]:
    (x,) = args
    shape = node.outputs[0].aval.shape
    if x.view is not None and x.view.is_contiguous:
        return [Lazy.of_buffer(x.view.buffer, shape)]
    at = flat_reindex(x) if x.view is None else None
    if at is not None:
        strides = row_major_strides(shape)
        return [Lazy(shape, x.dtype, lambda idx: at(flat_index(idx, strides)), None, x.ops)]
    dense = ctx.materialize(x, "reshape")
    assert dense.view is not None
    return [Lazy.of_buffer(dense.view.buffer, shape)]


register(OpDef("reshape", MOVEMENT, _reshape_infer, lambda x, shape: np.reshape(x, shape), _reshape_lower))

# ----------------------------------------------------------------------------------------------
# transpose


def _transpose_infer(x: Aval, perm: tuple[int, ...]) -> Aval:
    if sorted(perm) != list(range(x.ndim)):
        raise InvalidArgumentError(
            f"transpose expects a vector of size {x.ndim}. But input(1) is a vector of size {len(perm)} "
            f"(perm={list(perm)}) [Op:Transpose]"
        )
    return Aval(tuple(x.shape[p] for p in perm), x.dtype)


def _transpose_lower(ctx: Any, node: Any, args: list[Lazy]) -> list[Lazy]:
    (x,) = args
    perm = tuple(node.attrs["perm"])
    shape = tuple(x.shape[p] for p in perm)
    if x.view is not None:
        return [x.restrided(shape, [x.view.strides[p] for p in perm], x.view.offset)]
    inverse = np.argsort(perm)
    return [x.remap(shape, lambda idx: tuple(idx[int(inverse[k])] for k in range(len(perm))), ("transpose",))]


register(OpDef("transpose", MOVEMENT, _transpose_infer, lambda x, perm: np.transpose(x, perm), _transpose_lower))

# ----------------------------------------------------------------------------------------------
# broadcast_to


def _broadcast_infer(x: Aval, shape: tuple[int, ...]) -> Aval:
    shape = tuple(int(d) for d in shape)
    try:
        out = broadcast_shapes(x.shape, shape, op="BroadcastTo")
    except InvalidArgumentError:
        out = None
    if out != shape:
        raise InvalidArgumentError(f"Unable to broadcast tensor of shape {list(x.shape)} to tensor of shape "
                                   f"{list(shape)} [Op:BroadcastTo]")
    return Aval(shape, x.dtype)


def _broadcast_lower(ctx: Any, node: Any, args: list[Lazy]) -> list[Lazy]:
    return [broadcast_to(args[0], node.outputs[0].aval.shape)]


register(OpDef("broadcast_to", MOVEMENT, _broadcast_infer, lambda x, shape: np.broadcast_to(x, shape).copy(),
               _broadcast_lower))

# ----------------------------------------------------------------------------------------------
# slice: begin/size/step per dimension (negative steps walk backwards)


def _slice_infer(x: Aval, begin: tuple[int, ...], size: tuple[int, ...], step: tuple[int, ...]) -> Aval:
    if not (len(begin) == len(size) == len(step) == x.ndim):
        raise InvalidArgumentError(f"Expected begin, size and step of length {x.ndim} [Op:StridedSlice]")
    for d, b, n, s in zip(x.shape, begin, size, step):
        last = b + (n - 1) * s
        if n < 0 or s == 0 or (n > 0 and not (0 <= b < d and 0 <= last < d)):
            raise InvalidArgumentError(
                f"slice index out of bounds: begin {list(begin)}, size {list(size)}, step {list(step)} for "
                f"input of shape {list(x.shape)} [Op:StridedSlice]"
            )
    return Aval(tuple(int(n) for n in size), x.dtype)


def _slice_ref(x: np.ndarray, begin: tuple[int, ...], size: tuple[int, ...], step: tuple[int, ...]) -> np.ndarray:
    index = tuple(np.arange(n) * s + b for b, n, s in zip(begin, size, step))
    return x[np.ix_(*index)] if x.ndim else x.copy()


def _slice_lower(ctx: Any, node: Any, args: list[Lazy]) -> list[Lazy]:
    (x,) = args
    begin, size, step = node.attrs["begin"], node.attrs["size"], node.attrs["step"]
    if x.view is not None:
        v = x.view
        offset = v.offset + sum(b * s for b, s in zip(begin, v.strides))
        return [x.restrided(size, [s * st for s, st in zip(v.strides, step)], offset)]
    return [x.remap(size, lambda idx: tuple(i * st + b for i, b, st in zip(idx, begin, step)), ("slice",))]


register(OpDef("slice", MOVEMENT, _slice_infer, _slice_ref, _slice_lower))

# ----------------------------------------------------------------------------------------------
# concat

_MAX_SELECT_CONCAT = 4


def _concat_infer(*xs: Aval, axis: int) -> Aval:
    from popjit.ops.shapes import normalize_axis, same_dtype

    first = xs[0]
    dtype = same_dtype("ConcatV2", *xs)
    if any(x.ndim != first.ndim for x in xs) or first.ndim == 0:
        raise InvalidArgumentError(
            f"ConcatOp : Ranks of all input tensors should match: shape[0] = {list(first.shape)} vs. "
            f"{[list(x.shape) for x in xs]} [Op:ConcatV2]"
        )
    ax = normalize_axis(axis, first.ndim, "ConcatV2")
    for i, x in enumerate(xs[1:], start=1):
        if any(a != b for k, (a, b) in enumerate(zip(first.shape, x.shape)) if k != ax):
            raise InvalidArgumentError(
                f"ConcatOp : Dimension {1 - ax if first.ndim > 1 else 0} in both shapes must be equal: "
                f"shape[0] = {list(first.shape)} vs. shape[{i}] = {list(x.shape)} [Op:ConcatV2]"
            )
    shape = list(first.shape)
    shape[ax] = sum(x.shape[ax] for x in xs)
    return Aval(tuple(shape), dtype)


def _concat_lower(ctx: Any, node: Any, args: list[Lazy]) -> list[Lazy]:
    from popjit.dtypes import bool_, int64
    from popjit.loop.ir import Apply, Const, IndexValue, Kernel, Store, iclamp

    out = node.outputs[0].aval
    ax = node.attrs["axis"] % out.ndim
    parts = [a for a in args if a.shape[ax] > 0]
    offsets = np.cumsum([0] + [a.shape[ax] for a in parts])
    if len(parts) == 1:
        return [parts[0]]
    if len(parts) <= _MAX_SELECT_CONCAT:
        def build(idx: tuple) -> Any:
            j = idx[ax]
            expr = None
            for a, lo in reversed(list(zip(parts, offsets[:-1]))):
                local = tuple(iclamp(j - int(lo), 0, a.shape[ax] - 1) if k == ax else i for k, i in enumerate(idx))
                value = a.build(local)
                if expr is None:
                    expr = value
                else:
                    inside = Apply("less", (IndexValue(j, int64), Const(int(offsets[parts.index(a) + 1]), int64)),
                                   bool_)
                    expr = Apply("select", (inside, value, expr), out.dtype)
            return expr

        return [Lazy(out.shape, out.dtype, build, None, tuple(o for a in parts for o in a.ops) + ("concat",))]
    buf = ctx.new_temp(out.shape, out.dtype, "concat")
    strides = row_major_strides(out.shape)
    for a, lo in zip(parts, offsets[:-1]):
        idx = tuple(ivar(f"i{k}") for k in range(out.ndim))
        dst = tuple(i + int(lo) if k == ax else i for k, i in enumerate(idx))
        ctx.emit(Kernel(ctx.name("concat", a.ops), a.shape, [Store(buf, flat_index(dst, strides), a.build(idx))],
                        None, a.ops + ("concat",)))
    return [Lazy.of_buffer(buf, out.shape)]


register(OpDef("concat", MOVEMENT, _concat_infer, lambda *xs, axis: np.concatenate(xs, axis=axis), _concat_lower))
