"""Movement ops: they only change which element goes where.

Lowering never copies when it can avoid it: a transpose, slice or broadcast of a buffer is a new
strided view, and of a fused expression a new index map; a reshape of contiguous data is free.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from popjit.dtypes import bool_, int64
from popjit.errors import InvalidArgumentError
from popjit.ir.graph import Aval
from popjit.ir.lazy import Lazy, broadcast_to
from popjit.ir.loop import (
    Apply,
    Const,
    ILin,
    IndexValue,
    Kernel,
    Store,
    as_index,
    flat_index,
    iclamp,
    imax,
    imin,
    ivar,
    row_major_strides,
)
from popjit.ir.opdef import MOVEMENT, REGISTRY, OpDef, register
from popjit.ops.shapes import broadcast_shapes, normalize_axis, same_dtype

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


def nocopy_strides(old_shape: Sequence[int], old_strides: Sequence[int],
                   new_shape: Sequence[int]) -> tuple[int, ...] | None:
    """Strides that view the same elements with ``new_shape`` (row-major order), or None.

    NumPy's ``_attempt_nocopy_reshape``: each group of old dimensions that merges into or splits
    from a group of new dimensions must be contiguous within itself.
    """
    if 0 in old_shape or 0 in new_shape:
        return None
    old = [(int(d), int(s)) for d, s in zip(old_shape, old_strides) if d != 1]
    new = [int(d) for d in new_shape]
    strides = [0] * len(new)
    oi, ni = 0, 0
    while oi < len(old) and ni < len(new):
        oj, nj = oi + 1, ni + 1
        o_size, n_size = old[oi][0], new[ni]
        while o_size != n_size:
            if n_size < o_size:
                n_size *= new[nj]
                nj += 1
            else:
                o_size *= old[oj][0]
                oj += 1
        if any(old[k][1] != old[k + 1][0] * old[k + 1][1] for k in range(oi, oj - 1)):
            return None
        strides[nj - 1] = old[oj - 1][1]
        for k in range(nj - 1, ni, -1):
            strides[k - 1] = strides[k] * new[k]
        oi, ni = oj, nj
    return tuple(strides)


def split_dims(old: Sequence[int], new: Sequence[int]) -> list[slice] | None:
    """If reshaping ``old`` to ``new`` only splits dimensions (each old dimension becomes a run of new
    ones): for each old dimension, the slice of new dimensions it becomes; else None. Such a reshape
    of a computed value reads it at an affine index (a merge would need a quotient and remainder)."""
    runs, j = [], 0
    for d in old:
        start, size = j, 1
        while j < len(new) and (size < d or (size == d and j == start)) and size * new[j] <= d:
            size *= new[j]
            j += 1
        while j < len(new) and new[j] == 1 and size == d and d != 1:
            j += 1
        if size != d:
            return None
        runs.append(slice(start, j))
    return runs if j == len(new) else None


def reshape_groups(old: Sequence[int], new: Sequence[int]) -> list[tuple[slice, slice]] | None:
    """The runs of dimensions a reshape of ``old`` to ``new`` maps onto each other: pairs of a slice of
    old dimensions and a slice of new ones with the same number of elements, in order, each as short as
    can be (size-1 dimensions join a neighbour's run); None when a size is 0."""
    if 0 in old or 0 in new:
        return None
    groups, i, j = [], 0, 0
    while i < len(old) or j < len(new):
        start_old, start_new, old_size, new_size = i, j, 1, 1
        if i < len(old):
            old_size, i = old_size * int(old[i]), i + 1
        if j < len(new):
            new_size, j = new_size * int(new[j]), j + 1
        while old_size != new_size:
            if old_size < new_size and i < len(old):
                old_size, i = old_size * int(old[i]), i + 1
            elif new_size < old_size and j < len(new):
                new_size, j = new_size * int(new[j]), j + 1
            else:
                return None
        groups.append((slice(start_old, i), slice(start_new, j)))
    return groups


def _merging_index_map(old: Sequence[int], new: Sequence[int]) -> Any:
    """For a reshape that keeps the innermost dimension (its run of dimensions is that one dimension on
    both sides), the index map of the old value from the new index: each run's flat index, split into
    the run's old dimensions by quotients and remainders of constants; else None. why: a max-pool's
    gradient flattens each window (``[..., 2, 2, C]`` to ``[..., 4, C]``) for its argmax, and without this
    the window patches were stored first; the innermost dimension keeps its affine, contiguous index."""
    groups = reshape_groups(old, new)
    if not groups or not new:
        return None
    inner_old, inner_new = groups[-1]
    if inner_old.stop - inner_old.start != 1 or inner_new.stop - inner_new.start != 1:
        return None
    strides = [(row_major_strides(old[o]), row_major_strides(new[n])) for o, n in groups]

    def index_map(idx: tuple) -> tuple:
        out: list[ILin] = []
        for (o, n), (old_strides, new_strides) in zip(groups, strides):
            flat = flat_index(idx[n], new_strides)
            out += [flat // stride if k == 0 else flat // stride % int(old[o][k])
                    for k, stride in enumerate(old_strides)]
        return tuple(out)

    return index_map


def _unit_dims_map(old: Sequence[int], new: Sequence[int]) -> list[int | None] | None:
    """If ``new`` only inserts or drops size-1 dimensions of ``old``: for each new dimension, the old
    dimension it is (None for an inserted 1)."""
    kept_old = [k for k, d in enumerate(old) if d != 1]
    kept_new = [k for k, d in enumerate(new) if d != 1]
    if [old[k] for k in kept_old] != [new[k] for k in kept_new]:
        return None
    out: list[int | None] = [None] * len(new)
    for o, n in zip(kept_old, kept_new):
        out[n] = o
    return out


def _reshape_lower(ctx: Any, node: Any, args: list[Lazy]) -> list[Lazy]:
    (x,) = args
    shape = node.outputs[0].aval.shape
    if x.view is not None and x.view.is_contiguous:
        return [Lazy.of_buffer(x.view.buffer, shape)]
    if x.view is not None:
        strides = nocopy_strides(x.shape, x.view.strides, shape)
        if strides is not None:
            return [x.restrided(shape, strides, x.view.offset)]
    units = _unit_dims_map(x.shape, shape)
    if units is not None and x.view is None:
        def index_map(idx: tuple) -> tuple:
            old = [as_index(0)] * x.ndim
            for i, o in zip(idx, units):
                if o is not None:
                    old[o] = i
            return tuple(old)

        return [x.remap(shape, index_map)]
    at = flat_reindex(x) if x.view is None else None
    if at is not None:
        strides = row_major_strides(shape)
        return [Lazy(shape, x.dtype, lambda idx: at(flat_index(idx, strides)), None, x.ops)]
    splits = split_dims(x.shape, shape) if x.view is None else None
    if splits is not None:
        strides = [row_major_strides(shape[run]) for run in splits]
        return [x.remap(shape, lambda idx: tuple(flat_index(idx[run], s) for run, s in zip(splits, strides)))]
    merging = _merging_index_map(x.shape, shape) if x.view is None else None
    if merging is not None:
        return [x.remap(shape, merging)]
    dense = ctx.materialize(x, "reshape")
    assert dense.view is not None
    return [Lazy.of_buffer(dense.view.buffer, shape)]


register(OpDef("reshape", MOVEMENT, _reshape_infer, lambda x, shape: np.reshape(x, shape), _reshape_lower,
               doc="tf.reshape: a view of contiguous data, else a copy"))

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


register(OpDef("transpose", MOVEMENT, _transpose_infer, lambda x, perm: np.transpose(x, perm), _transpose_lower,
               doc="tf.transpose: a permuted view (strides), fused into consumers"))

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
               _broadcast_lower, doc="tf.broadcast_to: stride-0 view"))

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
    return [slice_lazy(x, node.attrs["begin"], node.attrs["size"], node.attrs["step"])]


register(OpDef("slice", MOVEMENT, _slice_infer, _slice_ref, _slice_lower,
               doc="begin/size/step per axis (negative steps walk backwards): a strided view"))

# ----------------------------------------------------------------------------------------------
# concat

_MAX_SELECT_CONCAT = 4


def _concat_infer(*xs: Aval, axis: int) -> Aval:
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
    out = node.outputs[0].aval
    ax = node.attrs["axis"] % out.ndim
    parts = [a for a in args if a.shape[ax] > 0]
    offsets = np.cumsum([0] + [a.shape[ax] for a in parts])
    if len(parts) == 1:
        return [parts[0]]
    if len(parts) <= _MAX_SELECT_CONCAT and all(a.view is not None for a in parts):
        # why: a select evaluates every part at every element; that is cheap only when the parts are
        # stored values (computed parts, such as an LSTM's four gate gradients, get a kernel each)
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


register(OpDef("concat", MOVEMENT, _concat_infer, lambda *xs, axis: np.concatenate(xs, axis=axis), _concat_lower,
               doc="tf.concat: a select over the axis index (a few stored inputs) or one kernel per input"))

# ----------------------------------------------------------------------------------------------
# split: consecutive pieces along one axis (tf.split, tf.unstack); each piece is a view


def _split_infer(x: Aval, axis: int, sizes: tuple[int, ...]) -> tuple[Aval, ...]:
    if x.ndim == 0:
        raise InvalidArgumentError("Can't split a scalar (rank 0) tensor; give it at least one dimension [Op:Split]")
    ax = normalize_axis(axis, x.ndim, "Split")
    if any(int(s) < 0 for s in sizes) or sum(int(s) for s in sizes) != x.shape[ax]:
        raise InvalidArgumentError(
            f"Determined shape must either match input shape along split_dim exactly if fully specified, or be "
            f"less than the size of the input along split_dim if not fully specified.  Got: {sum(sizes)} "
            f"(sizes {list(sizes)} along dimension {ax} of size {x.shape[ax]}) [Op:SplitV]"
        )
    if not sizes:
        raise InvalidArgumentError("split needs at least one piece [Op:SplitV]")
    return tuple(Aval(tuple(int(s) if k == ax else d for k, d in enumerate(x.shape)), x.dtype) for s in sizes)


def _split_ref(x: np.ndarray, axis: int, sizes: tuple[int, ...]) -> tuple[np.ndarray, ...]:
    cuts = np.cumsum(sizes)[:-1]
    return tuple(p.copy() for p in np.split(x, cuts, axis=axis % x.ndim))


def slice_lazy(x: Lazy, begin: Sequence[int], size: Sequence[int], step: Sequence[int]) -> Lazy:
    """The strided slice of ``x``: a new view of a buffer, else an index remap."""
    if x.view is not None:
        v = x.view
        offset = v.offset + sum(b * s for b, s in zip(begin, v.strides))
        return x.restrided(size, [s * st for s, st in zip(v.strides, step)], offset)
    return x.remap(size, lambda idx: tuple(i * st + b for i, b, st in zip(idx, begin, step)), ("slice",))


def _split_lower(ctx: Any, node: Any, args: list[Lazy]) -> list[Lazy]:
    (x,) = args
    ax = node.attrs["axis"] % x.ndim
    outs, lo = [], 0
    for s in node.attrs["sizes"]:
        begin = [lo if k == ax else 0 for k in range(x.ndim)]
        size = [int(s) if k == ax else d for k, d in enumerate(x.shape)]
        outs.append(slice_lazy(x, begin, size, [1] * x.ndim))
        lo += int(s)
    return outs


register(OpDef("split", MOVEMENT, _split_infer, _split_ref, _split_lower, extra={"tuple_output": True},
               doc="tf.split / tf.unstack: pieces of the given sizes along an axis"))

# ----------------------------------------------------------------------------------------------
# tile: repeat the whole tensor along each axis (index modulo the input's size)


def _tile_infer(x: Aval, multiples: tuple[int, ...]) -> Aval:
    if len(multiples) != x.ndim:
        raise InvalidArgumentError(
            f"Expected multiples argument to be a vector of length {x.ndim} but got length {len(multiples)} [Op:Tile]"
        )
    if any(int(m) < 0 for m in multiples):
        raise InvalidArgumentError(f"Expected multiples[i] >= 0, but got multiples {list(multiples)} [Op:Tile]")
    return Aval(tuple(d * int(m) for d, m in zip(x.shape, multiples)), x.dtype)


def _tile_lower(ctx: Any, node: Any, args: list[Lazy]) -> list[Lazy]:
    (x,) = args
    shape = node.outputs[0].aval.shape

    def index_map(idx: tuple) -> tuple:
        return tuple(as_index(0) if d == 1 else (i if d == n else i % d) for i, d, n in zip(idx, x.shape, shape))

    return [x.remap(shape, index_map, ("tile",))]


register(OpDef("tile", MOVEMENT, _tile_infer, lambda x, multiples: np.tile(x, multiples).reshape(
    tuple(d * int(m) for d, m in zip(x.shape, multiples))), _tile_lower, doc="tf.tile"))

# ----------------------------------------------------------------------------------------------
# pad: CONSTANT (a select on the in-range test), REFLECT and SYMMETRIC (mirrored indices)

PAD_MODES = ("CONSTANT", "REFLECT", "SYMMETRIC")


def _pad_infer(x: Aval, paddings: tuple[tuple[int, int], ...], mode: str = "CONSTANT", constant_value: Any = 0) -> Aval:
    if mode not in PAD_MODES:
        raise InvalidArgumentError(f"mode must be one of {', '.join(PAD_MODES)}, not {mode!r} [Op:Pad]")
    if len(paddings) != x.ndim or any(len(p) != 2 for p in paddings):
        raise InvalidArgumentError(
            f"The first dimension of paddings must be the rank of inputs[{len(paddings)},2] {list(x.shape)} [Op:Pad]"
        )
    for d, (lo, hi) in zip(x.shape, paddings):
        if lo < 0 or hi < 0:
            raise InvalidArgumentError(f"Paddings must be non-negative: {lo} {hi} [Op:Pad]")
        limit = d - 1 if mode == "REFLECT" else d
        if mode != "CONSTANT" and (lo > limit or hi > limit):
            rel = "less than" if mode == "REFLECT" else "no greater than"
            raise InvalidArgumentError(
                f"paddings must be {rel} the dimension size: {lo}, {hi} {'not less than' if mode == 'REFLECT' else '>'}"
                f" {d} [Op:MirrorPad]"
            )
    return Aval(tuple(d + lo + hi for d, (lo, hi) in zip(x.shape, paddings)), x.dtype)


def _pad_ref(x: np.ndarray, paddings: tuple[tuple[int, int], ...], mode: str = "CONSTANT",
             constant_value: Any = 0) -> np.ndarray:
    if mode == "CONSTANT":
        return np.pad(x, paddings, mode="constant", constant_values=np.asarray(constant_value, dtype=x.dtype))
    return np.pad(x, paddings, mode=mode.lower())


def _mirror(j: ILin, d: int, mode: str) -> ILin:
    """Index ``j`` (``-d < j < 2d``) mirrored into ``[0, d)``."""
    if mode == "REFLECT":  # ... 2 1 | 0 1 2 | 1 0 ...
        a = imax(j, j * -1)
        return imax(a * -1 + (d - 1), a - (d - 1)) * -1 + (d - 1)
    a = imax(j, j * -1 - 1)  # SYMMETRIC: ... 1 0 | 0 1 2 | 2 1 ...
    return imin(a, a * -1 + (2 * d - 1))


def _pad_lower(ctx: Any, node: Any, args: list[Lazy]) -> list[Lazy]:
    (x,) = args
    out = node.outputs[0].aval
    pads, mode = node.attrs["paddings"], node.attrs.get("mode", "CONSTANT")
    padded = [k for k, (lo, hi) in enumerate(pads) if lo or hi]
    if mode != "CONSTANT":
        def mirrored(idx: tuple) -> tuple:
            return tuple(_mirror(i - pads[k][0], x.shape[k], mode) if k in padded else i for k, i in enumerate(idx))

        return [x.remap(out.shape, mirrored, ("pad",))]
    return [pad_constant(x, pads, node.attrs.get("constant_value", 0))]


def pad_constant(x: Lazy, pads: Sequence[tuple[int, int]], value: Any) -> Lazy:
    """``x`` with ``(before, after)`` elements of the constant ``value`` around each axis, fused: a
    padded element is a select between ``value`` and the clamped load."""
    shape = tuple(d + lo + hi for d, (lo, hi) in zip(x.shape, pads))
    fill = Const(value, x.dtype)
    if x.size == 0:
        return Lazy(shape, x.dtype, lambda idx: fill, None, ("pad",))
    padded = [k for k, (lo, hi) in enumerate(pads) if lo or hi]
    if not padded:
        return x

    def build(idx: tuple) -> Any:
        local = [i - pads[k][0] if k in padded else i for k, i in enumerate(idx)]
        inside = None
        for k in padded:
            clamped = iclamp(local[k], 0, x.shape[k] - 1)
            test = Apply("equal", (IndexValue(clamped, int64), IndexValue(local[k], int64)), bool_)
            inside = test if inside is None else Apply("logical_and", (inside, test), bool_)
            local[k] = clamped
        return Apply("select", (inside, x.build(tuple(local)), fill), x.dtype)

    return Lazy(shape, x.dtype, build, None, (*x.ops, "pad"))


register(OpDef("pad", MOVEMENT, _pad_infer, _pad_ref, _pad_lower, doc="tf.pad: CONSTANT, REFLECT, SYMMETRIC"))

# ----------------------------------------------------------------------------------------------
# identity and stop_gradient: the same value (stop_gradient blocks gradients)


def _identity_lower(ctx: Any, node: Any, args: list[Lazy]) -> list[Lazy]:
    return [args[0]]


def _identity_infer(x: Aval) -> Aval:
    return x


register(OpDef("identity", MOVEMENT, _identity_infer, lambda x: x.copy(), _identity_lower, doc="tf.identity"))
register(OpDef("stop_gradient", MOVEMENT, _identity_infer, lambda x: x.copy(), _identity_lower,
               doc="tf.stop_gradient: the value, with no gradient through it",
               vjp=lambda t, primals, outputs, cts: [None]))


# ----------------------------------------------------------------------------------------------
# Gradient rules (see popjit.autodiff): each moves the cotangent back to where its elements came
# from, with zeros where an input element was not used (slice) and sums where it was used several
# times (tile, mirrored padding).


def _reshape_vjp(t: Any, primals: list, outputs: list, cts: list, shape: tuple[int, ...]) -> list[Any]:
    return [t.reshape(cts[0], t.shape_of(primals[0]))]


def _broadcast_vjp(t: Any, primals: list, outputs: list, cts: list, shape: tuple[int, ...]) -> list[Any]:
    return [t.unbroadcast(cts[0], t.shape_of(primals[0]))]


def _transpose_vjp(t: Any, primals: list, outputs: list, cts: list, perm: tuple[int, ...]) -> list[Any]:
    return [t.transpose(cts[0], [int(k) for k in np.argsort(perm)])]


def _dilate(t: Any, g: Any, strides: Sequence[int]) -> Any:
    """``g`` with ``strides[k] - 1`` zeros between neighbours along each axis ``k`` (none after the last)."""
    shape = t.shape_of(g)
    if all(s == 1 for s in strides):
        return g
    split, pads = [], []
    for n, s in zip(shape, strides):
        split.append(n)
        pads.append((0, 0))
        if s > 1:
            split.append(1)
            pads.append((0, s - 1))
    spread = t.pad(t.reshape(g, split), pads)
    full = t.reshape(spread, [n * s for n, s in zip(shape, strides)])
    return t.slice(full, [0] * len(shape), [(n - 1) * s + 1 for n, s in zip(shape, strides)])


def _slice_vjp(t: Any, primals: list, outputs: list, cts: list, begin: tuple[int, ...], size: tuple[int, ...],
               step: tuple[int, ...]) -> list[Any]:
    """The cotangent placed back at the sliced positions, zeros elsewhere: axes walked backwards are
    reversed, strided axes get zeros between elements, then everything is padded into place."""
    (x,), (g,) = primals, cts
    shape = t.shape_of(x)
    if not shape:
        return [g]
    if 0 in size:
        return [t.zeros_like(x)]
    backwards = [k for k, s in enumerate(step) if s < 0]
    if backwards:
        g = t.reverse(g, backwards)
    lows = [b + (n - 1) * s if s < 0 else b for b, n, s in zip(begin, size, step)]
    g = _dilate(t, g, [abs(s) for s in step])
    spans = t.shape_of(g)
    return [t.pad(g, [(lo, d - lo - n) for lo, d, n in zip(lows, shape, spans)])]


def _concat_vjp(t: Any, primals: list, outputs: list, cts: list, axis: int) -> list[Any]:
    """The pieces of the cotangent along the concatenation axis."""
    ax = axis % len(t.shape_of(primals[0]))
    return list(t.split(cts[0], [t.shape_of(x)[ax] for x in primals], axis=ax))


def _split_vjp(t: Any, primals: list, outputs: list, cts: list, axis: int, sizes: tuple[int, ...]) -> list[Any]:
    """The pieces' cotangents joined back (zeros for the pieces nothing depends on)."""
    pieces = [c if c is not None else t.zeros_like(o) for c, o in zip(cts, outputs)]
    return [t.concat(pieces, axis=axis % len(t.shape_of(primals[0])))]


def _tile_vjp(t: Any, primals: list, outputs: list, cts: list, multiples: tuple[int, ...]) -> list[Any]:
    """Each input element's copies summed: the cotangent viewed as ``[m0, d0, m1, d1, ...]`` and summed
    over the ``m`` axes."""
    (x,), (g,) = primals, cts
    shape = t.shape_of(x)
    split, axes = [], []
    for d, m in zip(shape, multiples):
        if m != 1:
            axes.append(len(split))
            split.append(int(m))
        split.append(d)
    if not axes:
        return [g]
    return [t.reshape(t.reduce_sum(t.reshape(g, split), axes), shape)]


def _unpad_axis(t: Any, g: Any, k: int, lo: int, hi: int, d: int, mode: str) -> Any:
    """The cotangent of one axis' padding: the centre, plus (REFLECT, SYMMETRIC) the padded borders
    mirrored back onto the elements they copy."""
    n = t.shape_of(g)[k]
    rank = len(t.shape_of(g))

    def part(start: int, count: int) -> Any:
        begin = [start if j == k else 0 for j in range(rank)]
        size = [count if j == k else e for j, e in enumerate(t.shape_of(g))]
        return t.slice(g, begin, size)

    def place(piece: Any, before: int, after: int) -> Any:
        return t.pad(t.reverse(piece, [k]), [(before, after) if j == k else (0, 0) for j in range(rank)])

    out = part(lo, d)
    if mode == "CONSTANT":
        return out
    shift = 1 if mode == "REFLECT" else 0  # REFLECT skips the edge element, SYMMETRIC repeats it
    if lo:
        out = out + place(part(0, lo), shift, d - shift - lo)
    if hi:
        out = out + place(part(n - hi, hi), d - shift - hi, shift)
    return out


def _pad_vjp(t: Any, primals: list, outputs: list, cts: list, paddings: tuple[tuple[int, int], ...],
             mode: str = "CONSTANT", constant_value: Any = 0) -> list[Any]:
    """Undo the padding one axis at a time (the padding is separable); the constant gets nothing."""
    (x,), (g,) = primals, cts
    for k, ((lo, hi), d) in enumerate(zip(paddings, t.shape_of(x))):
        if lo or hi:
            g = _unpad_axis(t, g, k, int(lo), int(hi), d, mode)
    return [g]


REGISTRY["reshape"].vjp = _reshape_vjp
REGISTRY["broadcast_to"].vjp = _broadcast_vjp
REGISTRY["identity"].vjp = lambda t, primals, outputs, cts: [cts[0]]
REGISTRY["transpose"].vjp = _transpose_vjp
REGISTRY["slice"].vjp = _slice_vjp
REGISTRY["concat"].vjp = _concat_vjp
REGISTRY["split"].vjp = _split_vjp
REGISTRY["tile"].vjp = _tile_vjp
REGISTRY["pad"].vjp = _pad_vjp
