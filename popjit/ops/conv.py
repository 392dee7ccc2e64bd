"""Sliding windows: the patches of an image and their transpose, from which convolutions and
pooling are built.

``extract_patches(x)`` takes ``x`` of shape ``[N, *spatial, C]`` to ``[N, *out, *window, C]``:
element ``(n, o, k, c)`` is ``x[n, o * strides + k * dilations - pads_before, c]``, or ``fill``
where that position lies in the padding. It lowers to an index map (a fused view, no copy), so a
convolution is a matrix product reading its operand straight through the window (the product's
operand buffer is the classic im2col matrix) and a pooling is a reduction over the window axes.

``patches_transpose(ct)`` is its linear transpose, the gradient of a convolution with respect to
its input ("col2im"): every input position sums the window entries that read it. It lowers to a
fused sum over the window offsets, each a load guarded by the stride and bounds conditions. (A
stride-one convolution's input gradient of 64 input channels or more does not reach it: the graph pass
:mod:`popjit.graph.passes.conv_gradient` makes it a convolution.)
The two ops are each other's gradient.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from popjit.dtypes import bool_, int64
from popjit.errors import InvalidArgumentError
from popjit.ir.graph import Aval
from popjit.ir.lazy import Lazy
from popjit.ir.loop import Apply, Const, ILin, IndexValue, as_index, iclamp
from popjit.ir.opdef import MOVEMENT, OpDef, register
from popjit.ops.movement import pad_constant

Pads = tuple[tuple[int, int], ...]


def output_size(size: int, window: int, stride: int, dilation: int, lo: int, hi: int) -> int:
    """How many windows fit along an axis of ``size`` padded by ``lo``/``hi``."""
    span = (window - 1) * dilation + 1
    return max(0, (size + lo + hi - span) // stride + 1)


def _check(shape: Sequence[int], window: Sequence[int], strides: Sequence[int], dilations: Sequence[int],
           pads: Pads, op: str) -> None:
    spatial = len(shape) - 2
    if spatial < 1 or not (len(window) == len(strides) == len(dilations) == len(pads) == spatial):
        raise InvalidArgumentError(f"{op}: the input must be [batch, *spatial, channels] with one window size, "
                                   f"stride, dilation and padding per spatial axis; got input shape {list(shape)}, "
                                   f"window {list(window)} [Op:{op}]")
    if any(k < 1 for k in window) or any(s < 1 for s in strides) or any(d < 1 for d in dilations):
        raise InvalidArgumentError(f"{op}: window sizes, strides and dilations must be positive, got window "
                                   f"{list(window)}, strides {list(strides)}, dilations {list(dilations)} [Op:{op}]")
    if any(lo < 0 or hi < 0 for lo, hi in pads):
        raise InvalidArgumentError(f"{op}: paddings must be non-negative, got {list(pads)} [Op:{op}]")


# ----------------------------------------------------------------------------------------------
# extract_patches


def _patches_infer(x: Aval, window: tuple[int, ...], strides: tuple[int, ...], dilations: tuple[int, ...],
                   pads: Pads, fill: float = 0.0) -> Aval:
    _check(x.shape, window, strides, dilations, pads, "ExtractImagePatches")
    out = tuple(output_size(d, k, s, r, lo, hi)
                for d, k, s, r, (lo, hi) in zip(x.shape[1:-1], window, strides, dilations, pads))
    return Aval((x.shape[0], *out, *window, x.shape[-1]), x.dtype)


def _window_slices(out: Sequence[int], offset: Sequence[int], strides: Sequence[int],
                   dilations: Sequence[int]) -> tuple[slice, ...]:
    """The positions (in the padded input) that window offset ``offset`` reads, one slice per axis."""
    return tuple(slice(k * r, k * r + (o - 1) * s + 1, s) if o else slice(0, 0)
                 for o, k, s, r in zip(out, offset, strides, dilations))


def patches_reference(x: np.ndarray, window: tuple[int, ...], strides: tuple[int, ...], dilations: tuple[int, ...],
                      pads: Pads, fill: float = 0.0) -> np.ndarray:
    """The NumPy meaning of ``extract_patches``."""
    spatial = len(window)
    out_spatial = tuple(output_size(d, k, s, r, lo, hi)
                        for d, k, s, r, (lo, hi) in zip(x.shape[1:-1], window, strides, dilations, pads))
    padded = np.pad(x, ((0, 0), *pads, (0, 0)), constant_values=np.asarray(fill, x.dtype))
    result = np.empty((x.shape[0], *out_spatial, *window, x.shape[-1]), x.dtype)
    for offset in itertools.product(*(range(k) for k in window)):
        picked = padded[(slice(None), *_window_slices(out_spatial, offset, strides, dilations))]
        result[(slice(None),) * (1 + spatial) + offset] = picked
    return result


def _patches_lower(ctx: Any, node: Any, args: list[Lazy]) -> list[Lazy]:
    (x,) = args
    a = node.attrs
    spatial = len(a["window"])
    padded = pad_constant(x, ((0, 0), *a["pads"], (0, 0)), a.get("fill", 0.0))

    def index_map(idx: tuple) -> tuple:
        o, k = idx[1:1 + spatial], idx[1 + spatial:1 + 2 * spatial]
        pos = tuple(oi * s + ki * r for oi, ki, s, r in zip(o, k, a["strides"], a["dilations"]))
        return (idx[0], *pos, idx[-1])

    return [padded.remap(node.outputs[0].aval.shape, index_map, ("patches",))]


def _patches_vjp(t: Any, primals: list, outputs: list, cts: list, window: tuple[int, ...],
                 strides: tuple[int, ...], dilations: tuple[int, ...], pads: Pads, fill: float = 0.0) -> list:
    (x,) = primals
    spatial = tuple(t.shape_of(x)[1:-1])
    return [t.patches_transpose(cts[0], spatial, window, strides, dilations, pads)]


register(OpDef("extract_patches", MOVEMENT, _patches_infer, patches_reference, _patches_lower, vjp=_patches_vjp,
               doc="[N, *S, C] -> [N, *O, *window, C]: every window of a strided, dilated, padded sweep (a view)"))

# ----------------------------------------------------------------------------------------------
# patches_transpose


def _transpose_infer(ct: Aval, spatial: tuple[int, ...], window: tuple[int, ...], strides: tuple[int, ...],
                     dilations: tuple[int, ...], pads: Pads) -> Aval:
    shape = (ct.shape[0], *spatial, ct.shape[-1])
    expected = _patches_infer(Aval(shape, ct.dtype), window, strides, dilations, pads)
    if ct.shape != expected.shape:
        raise InvalidArgumentError(f"patches_transpose: the patches of an input of shape {list(shape)} have shape "
                                   f"{list(expected.shape)}, got {list(ct.shape)} [Op:Col2Im]")
    return Aval(shape, ct.dtype)


def _transpose_ref(ct: np.ndarray, spatial: tuple[int, ...], window: tuple[int, ...], strides: tuple[int, ...],
                   dilations: tuple[int, ...], pads: Pads) -> np.ndarray:
    n = len(window)
    out_spatial = ct.shape[1:1 + n]
    acc = np.float32 if ct.dtype == np.float16 else ct.dtype
    padded = np.zeros((ct.shape[0], *(d + lo + hi for d, (lo, hi) in zip(spatial, pads)), ct.shape[-1]), acc)
    for offset in itertools.product(*(range(k) for k in window)):
        where = (slice(None), *_window_slices(out_spatial, offset, strides, dilations))
        padded[where] += ct[(slice(None),) * (1 + n) + offset]
    crop = tuple(slice(lo, lo + d) for d, (lo, _) in zip(spatial, pads))
    return padded[(slice(None), *crop)].astype(ct.dtype)


def _index_test(op: str, a: ILin | int, b: ILin | int) -> Any:
    return Apply(op, (IndexValue(as_index(a), int64), IndexValue(as_index(b), int64)), bool_)


def _transpose_lower(ctx: Any, node: Any, args: list[Lazy]) -> list[Lazy]:
    (ct,) = args
    a = node.attrs
    window, strides, dilations, pads = a["window"], a["strides"], a["dilations"], a["pads"]
    n = len(window)
    out_spatial = ct.shape[1:1 + n]
    out = node.outputs[0].aval
    zero = Const(0, out.dtype)

    def term(idx: tuple, offset: tuple[int, ...]) -> Any:
        """Window entry ``offset`` of the patch that reads input position ``idx`` (zero if none does)."""
        tests, where = [], []
        for p, k, s, r, (lo, _), o in zip(idx[1:-1], offset, strides, dilations, pads, out_spatial):
            q = p + (lo - k * r)  # this position's offset from the first window's start
            w = q // s
            where.append(iclamp(w, 0, o - 1))
            if s > 1:
                tests.append(_index_test("equal", q % s, 0))
            tests += [_index_test("greater_equal", q, 0), _index_test("less", w, o)]
        value = ct.build((idx[0], *where, *(as_index(k) for k in offset), idx[-1]))
        inside = tests[0]
        for test in tests[1:]:
            inside = Apply("logical_and", (inside, test), bool_)
        return Apply("select", (inside, value, zero), out.dtype)

    def only_term(idx: tuple) -> Any:
        """Windows that do not overlap: the one window entry that reads input position ``idx``."""
        tests, where, entries = [], [], []
        for p, k, s, r, (lo, _), o in zip(idx[1:-1], window, strides, dilations, pads, out_spatial):
            q = p + lo  # this position's offset from the first window's start
            w, e = q // s, q % s
            where.append(iclamp(w, 0, o - 1))
            entries.append(iclamp(e // r if r > 1 else e, 0, k - 1))
            if r > 1:
                tests.append(_index_test("equal", e % r, 0))
            tests += [_index_test("greater_equal", q, 0), _index_test("less", w, o),
                      _index_test("less", e, (k - 1) * r + 1)]
        value = ct.build((idx[0], *where, *entries, idx[-1]))
        inside = tests[0]
        for test in tests[1:]:
            inside = Apply("logical_and", (inside, test), bool_)
        return Apply("select", (inside, value, zero), out.dtype)

    def build(idx: tuple) -> Any:
        total = None
        for offset in itertools.product(*(range(k) for k in window)):
            value = term(idx, offset)
            total = value if total is None else Apply("add", (total, value), out.dtype)
        return total

    disjoint = all(s >= (k - 1) * r + 1 for k, s, r in zip(window, strides, dilations))
    return [Lazy(out.shape, out.dtype, only_term if disjoint else build, None, (*ct.ops, "col2im"))]


def _transpose_vjp(t: Any, primals: list, outputs: list, cts: list, spatial: tuple[int, ...],
                   window: tuple[int, ...], strides: tuple[int, ...], dilations: tuple[int, ...], pads: Pads) -> list:
    return [t.extract_patches_nd(cts[0], window, strides, dilations, pads)]


def _transpose_fused_ops(spatial: tuple[int, ...], window: tuple[int, ...], strides: tuple[int, ...],
                         dilations: tuple[int, ...], pads: Pads) -> int:
    """Ops per element in a fused expression: the window entries that can read one input position
    (``ceil(window / stride)`` per dimension), each a load and an add."""
    return math.prod(-(-w // s) for w, s in zip(window, strides))


register(OpDef("patches_transpose", MOVEMENT, _transpose_infer, _transpose_ref, _transpose_lower, vjp=_transpose_vjp,
               doc="the transpose of extract_patches (col2im): each input position sums the window entries "
                   "reading it", extra={"fused_ops": _transpose_fused_ops}))
