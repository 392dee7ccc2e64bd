"""``tf.nn`` convolutions and pooling, and ``tf.image.extract_patches``.

All of them are built on two registered ops (:mod:`popjit.ops.conv`): ``extract_patches`` (every
window of the input, a fused view) and its transpose. A convolution is the matrix product of the
patches with the filter, so its gradients come from the product's and the patches' rules: the
filter's gradient is ``patches^T @ dy`` and the input's is the transpose of the patches of
``dy @ filter^T`` (the classic col2im; with a stride of one and 64 input channels or more the compiler
makes it a convolution of ``dy`` with the flipped filter, :mod:`popjit.graph.passes.conv_gradient`).
Pooling reduces the window axes of the patches.

Layouts are TensorFlow's: channels last (``NWC``, ``NHWC``, ``NDHWC``) natively; a channels-first
``data_format`` transposes around the channels-last op.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from popjit.errors import InvalidArgumentError
from popjit.frontend import array_ops, gather_ops, math_ops
from popjit.frontend.convert import convert_to_tensor
from popjit.frontend.gradient_tape import custom_gradient
from popjit.frontend.tensor import Tensor
from popjit.frontend.tracing import apply_op
from popjit.ops.conv import output_size, patches_reference
from popjit.source import user_location, where

Pads = tuple[tuple[int, int], ...]


# -- the two ops ----------------------------------------------------------------------------------------
def extract_patches_nd(x: Any, window: Sequence[int], strides: Sequence[int], dilations: Sequence[int],
                       pads: Pads, fill: float = 0.0) -> Tensor:
    """``[N, *S, C] -> [N, *O, *window, C]``: every window (``fill`` in the padding)."""
    return apply_op("extract_patches", [convert_to_tensor(x)], window=tuple(window), strides=tuple(strides),
                    dilations=tuple(dilations), pads=tuple(pads), fill=float(fill))


def patches_transpose(ct: Any, spatial: Sequence[int], window: Sequence[int], strides: Sequence[int],
                      dilations: Sequence[int], pads: Pads) -> Tensor:
    """The transpose of :func:`extract_patches_nd` back to an input of spatial shape ``spatial``."""
    return apply_op("patches_transpose", [convert_to_tensor(ct)], spatial=tuple(spatial), window=tuple(window),
                    strides=tuple(strides), dilations=tuple(dilations), pads=tuple(pads))


# -- arguments ---------------------------------------------------------------------------------------------
def _per_axis(value: Any, n: int, what: str, channels_last: bool = True) -> tuple[int, ...]:
    """TensorFlow's forms of strides, dilations and window sizes: an int, ``n`` ints, or ``n + 2`` ints
    with 1 for the batch and channel axes."""
    if value is None:
        return (1,) * n
    values = [int(v) for v in np.ravel(value)]
    if len(values) == 1:
        return (values[0],) * n
    if len(values) == n:
        return tuple(values)
    if len(values) == n + 2:
        outer = (values[0], values[-1]) if channels_last else (values[0], values[1])
        if outer != (1, 1):
            raise InvalidArgumentError(f"{what} in the batch and depth dimensions must be 1, got {values}"
                                       f"{where(user_location(3))}")
        return tuple(values[1:-1] if channels_last else values[2:])
    raise InvalidArgumentError(f"{what} must be an int or a list of 1, {n} or {n + 2} ints, got {values}"
                               f"{where(user_location(3))}")


def same_pads(size: int, window: int, stride: int, dilation: int) -> tuple[int, int]:
    """TensorFlow's ``SAME`` padding: ``ceil(size / stride)`` outputs, the extra row at the end."""
    span = (window - 1) * dilation + 1
    total = max((math.ceil(size / stride) - 1) * stride + span - size, 0)
    return total // 2, total - total // 2


def padding_of(padding: Any, spatial: Sequence[int], window: Sequence[int], strides: Sequence[int],
               dilations: Sequence[int], channels_last: bool = True) -> Pads:
    """``"VALID"``, ``"SAME"`` or explicit ``[[lo, hi], ...]`` (over all axes, batch and channels 0)."""
    if isinstance(padding, str):
        mode = padding.upper()
        if mode == "VALID":
            return tuple((0, 0) for _ in spatial)
        if mode == "SAME":
            return tuple(same_pads(d, k, s, r) for d, k, s, r in zip(spatial, window, strides, dilations))
        raise ValueError(f"padding must be 'SAME', 'VALID' or a list of pairs, got {padding!r}")
    pairs = [tuple(int(v) for v in p) for p in padding]
    if len(pairs) == len(spatial) + 2:
        pairs = pairs[1:-1] if channels_last else pairs[2:]
    if len(pairs) != len(spatial) or any(len(p) != 2 for p in pairs):
        raise ValueError(f"explicit padding must give a (before, after) pair per axis, got {padding!r}")
    return tuple(pairs)  # type: ignore[return-value]


def _channels_last(data_format: str | None, n: int) -> bool:
    if data_format is None or data_format.upper() in ("NWC", "NHWC", "NDHWC", "CHANNELS_LAST"):
        return True
    if data_format.upper() in ("NCW", "NCHW", "NCDHW", "CHANNELS_FIRST"):
        return False
    raise ValueError(f"data_format must be channels last (NHWC) or first (NCHW) for {n}-D data, got {data_format!r}")


def _to_last(x: Tensor, channels_last: bool) -> Tensor:
    return x if channels_last else array_ops.transpose(x, [0, *range(2, x.ndim), 1])


def _to_first(x: Tensor, channels_last: bool) -> Tensor:
    return x if channels_last else array_ops.transpose(x, [0, x.ndim - 1, *range(1, x.ndim - 1)])


def _check_rank(x: Tensor, rank: int, op: str) -> None:
    if x.ndim != rank:
        raise InvalidArgumentError(f"{op}: input must be {rank}-dimensional, got shape {x.shape.as_list()}"
                                   f"{where(user_location(3))}")


# -- convolution -------------------------------------------------------------------------------------------
def convolution_matmul(a: Tensor, b: Tensor, transpose_b: bool = False) -> Tensor:
    """``a @ b`` of a convolution's patches and filters: a matmul the IPU planner plans with
    ``IPUConfig.convolutions.poplar_options`` (and so are its gradients)."""
    return apply_op("matmul", [a, b], transpose_b=transpose_b, convolution=True)


def _convolve(x: Tensor, filters: Tensor, strides: tuple[int, ...], pads: Pads, dilations: tuple[int, ...],
              op: str) -> Tensor:
    """Channels-last convolution: ``x [N, *S, Cin]``, ``filters [*K, Cin / groups, Cout]``."""
    window = tuple(filters.shape.as_list()[:-2])
    cin, (cg, cout) = x.shape.as_list()[-1], filters.shape.as_list()[-2:]
    if cg == 0 or cin % cg:
        raise InvalidArgumentError(f"{op}: input depth must be evenly divisible by filter depth: {cin} vs {cg}"
                                   f"{where(user_location(3))}")
    groups = cin // cg
    if cout % groups:
        raise InvalidArgumentError(f"{op}: the number of filters ({cout}) must be divisible by the number of groups "
                                   f"({groups}){where(user_location(3))}")
    patches = extract_patches_nd(x, window, strides, dilations, pads)
    n, out = x.shape.as_list()[0], patches.shape.as_list()[1:1 + len(window)]
    rows, k = n * math.prod(out), math.prod(window)
    if groups == 1:
        y = convolution_matmul(array_ops.reshape(patches, [rows, k * cin]), array_ops.reshape(filters, [k * cin, cout]))
        return array_ops.reshape(y, [n, *out, cout])
    grouped = array_ops.transpose(array_ops.reshape(patches, [rows, k, groups, cg]), [2, 0, 1, 3])
    w = array_ops.transpose(array_ops.reshape(filters, [k, cg, groups, cout // groups]), [2, 0, 1, 3])
    y = convolution_matmul(array_ops.reshape(grouped, [groups, rows, k * cg]),
                           array_ops.reshape(w, [groups, k * cg, cout // groups]))
    return array_ops.reshape(array_ops.transpose(y, [1, 0, 2]), [n, *out, cout])


def convolution(input: Any, filters: Any, strides: Any = None, padding: Any = "VALID", data_format: str | None = None,
                dilations: Any = None, name: str | None = None) -> Tensor:
    """``tf.nn.convolution``: an N-D convolution (1, 2 or 3 spatial axes) with groups when the filter's
    input depth divides the input's."""
    x, w = convert_to_tensor(input), convert_to_tensor(filters)
    n = w.ndim - 2
    if n < 1 or x.ndim != n + 2:
        raise InvalidArgumentError(f"Convolution: input of shape {x.shape.as_list()} and filter of shape "
                                   f"{w.shape.as_list()} must have ranks N + 2 and N + 2{where(user_location(2))}")
    last = _channels_last(data_format, n)
    x = _to_last(x, last)
    s, d = _per_axis(strides, n, "strides", last), _per_axis(dilations, n, "dilations", last)
    spatial, window = x.shape.as_list()[1:-1], w.shape.as_list()[:-2]
    if any(si > 1 for si in s) and any(di > 1 for di in d):
        raise InvalidArgumentError("strides > 1 not supported in conjunction with dilation_rate > 1"
                                   f"{where(user_location(2))}")
    pads = padding_of(padding, spatial, window, s, d, last)
    return _to_first(_convolve(x, convert_to_tensor(w, dtype=x.dtype), s, pads, d, "Conv"), last)


def conv1d(input: Any, filters: Any, stride: Any = 1, padding: Any = "VALID", data_format: str = "NWC",
           dilations: Any = None, name: str | None = None) -> Tensor:
    """``tf.nn.conv1d``: ``input [N, W, C]``, ``filters [K, C, Cout]``."""
    _check_rank(convert_to_tensor(input), 3, "Conv1D")
    return convolution(input, filters, stride, padding, data_format, dilations)


def conv2d(input: Any, filters: Any, strides: Any = 1, padding: Any = "VALID", data_format: str = "NHWC",
           dilations: Any = None, name: str | None = None) -> Tensor:
    """``tf.nn.conv2d``: ``input [N, H, W, C]``, ``filters [KH, KW, C, Cout]``."""
    _check_rank(convert_to_tensor(input), 4, "Conv2D")
    return convolution(input, filters, strides, padding, data_format, dilations)


def conv3d(input: Any, filters: Any, strides: Any = 1, padding: Any = "VALID", data_format: str = "NDHWC",
           dilations: Any = None, name: str | None = None) -> Tensor:
    """``tf.nn.conv3d``: ``input [N, D, H, W, C]``, ``filters [KD, KH, KW, C, Cout]``."""
    _check_rank(convert_to_tensor(input), 5, "Conv3D")
    return convolution(input, filters, strides, padding, data_format, dilations)


def conv_transpose(input: Any, filters: Any, output_shape: Any, strides: Any = 1, padding: Any = "SAME",
                   data_format: str | None = None, dilations: Any = None, name: str | None = None) -> Tensor:
    """``tf.nn.conv_transpose`` (the gradient of a convolution with respect to its input): ``input
    [N, *O, Cin]``, ``filters [*K, Cout, Cin]``, ``output_shape`` the full ``[N, *S, Cout]``."""
    x, w = convert_to_tensor(input), convert_to_tensor(filters)
    n = w.ndim - 2
    last = _channels_last(data_format, n)
    x = _to_last(x, last)
    shape = [int(v) for v in np.ravel(array_ops.static_value(output_shape))]
    spatial = shape[1:-1] if last else shape[2:]
    cout = shape[-1] if last else shape[1]
    window = w.shape.as_list()[:-2]
    if w.shape.as_list()[-2] != cout or w.shape.as_list()[-1] != x.shape.as_list()[-1]:
        raise InvalidArgumentError(f"Conv2DCustomBackpropInput: filter of shape {w.shape.as_list()} does not map "
                                   f"{x.shape.as_list()[-1]} input channels to {cout} output channels"
                                   f"{where(user_location(2))}")
    s, d = _per_axis(strides, n, "strides", last), _per_axis(dilations, n, "dilations", last)
    pads = padding_of(padding, spatial, window, s, d, last)
    out = x.shape.as_list()[1:-1]
    expected = [output_size(sz, k, si, di, lo, hi) for sz, k, si, di, (lo, hi) in zip(spatial, window, s, d, pads)]
    if expected != out:
        raise InvalidArgumentError(f"Conv2DCustomBackpropInput: the input's spatial shape {out} is not what a "
                                   f"convolution of an output of shape {shape} gives ({expected})"
                                   f"{where(user_location(2))}")
    rows, k = x.shape.as_list()[0] * math.prod(out), math.prod(window)
    cols = convolution_matmul(array_ops.reshape(x, [rows, x.shape.as_list()[-1]]),
                              array_ops.reshape(convert_to_tensor(w, dtype=x.dtype), [k * cout, -1]), transpose_b=True)
    patches = array_ops.reshape(cols, [x.shape.as_list()[0], *out, *window, cout])
    return _to_first(patches_transpose(patches, spatial, window, s, d, pads), last)


def conv2d_transpose(input: Any, filters: Any, output_shape: Any, strides: Any, padding: Any = "SAME",
                     data_format: str = "NHWC", dilations: Any = None, name: str | None = None) -> Tensor:
    """``tf.nn.conv2d_transpose``: ``filters [KH, KW, Cout, Cin]``."""
    return conv_transpose(input, filters, output_shape, strides, padding, data_format, dilations)


def conv1d_transpose(input: Any, filters: Any, output_shape: Any, strides: Any, padding: Any = "SAME",
                     data_format: str = "NWC", dilations: Any = None, name: str | None = None) -> Tensor:
    """``tf.nn.conv1d_transpose``: ``filters [K, Cout, Cin]``."""
    return conv_transpose(input, filters, output_shape, strides, padding, data_format, dilations)


def depthwise_conv2d(input: Any, filter: Any, strides: Any, padding: Any, data_format: str | None = None,
                     dilations: Any = None, name: str | None = None) -> Tensor:
    """``tf.nn.depthwise_conv2d``: each input channel convolved with its own ``multiplier`` filters;
    ``filter [KH, KW, C, multiplier]``, output depth ``C * multiplier``."""
    x, w = convert_to_tensor(input), convert_to_tensor(filter)
    _check_rank(x, 4, "DepthwiseConv2dNative")
    last = _channels_last(data_format, 2)
    x = _to_last(x, last)
    c, m = w.shape.as_list()[-2:]
    if c != x.shape.as_list()[-1]:
        raise InvalidArgumentError(f"DepthwiseConv2dNative: input depth {x.shape.as_list()[-1]} does not match the "
                                   f"filter's {c}{where(user_location(2))}")
    s, d = _per_axis(strides, 2, "strides", last), _per_axis(dilations, 2, "dilations", last)
    window = w.shape.as_list()[:2]
    pads = padding_of(padding, x.shape.as_list()[1:-1], window, s, d, last)
    patches = extract_patches_nd(x, window, s, d, pads)  # [N, OH, OW, KH, KW, C]
    products = array_ops.expand_dims(patches, -1) * convert_to_tensor(w, dtype=x.dtype)  # [..., KH, KW, C, M]
    y = math_ops.reduce_sum(products, axis=[3, 4])
    shape = y.shape.as_list()
    return _to_first(array_ops.reshape(y, [*shape[:3], c * m]), last)


def separable_conv2d(input: Any, depthwise_filter: Any, pointwise_filter: Any, strides: Any, padding: Any,
                     data_format: str | None = None, dilations: Any = None, name: str | None = None) -> Tensor:
    """``tf.nn.separable_conv2d``: a depthwise convolution, then a 1x1 convolution mixing channels."""
    last = _channels_last(data_format, 2)
    depthwise = depthwise_conv2d(input, depthwise_filter, strides, padding, "NHWC" if last else "NCHW", dilations)
    return convolution(depthwise, pointwise_filter, 1, "VALID", "NHWC" if last else "NCHW")


# -- pooling --------------------------------------------------------------------------------------------
def _pool_setup(input: Any, ksize: Any, strides: Any, padding: Any, data_format: str | None, n: int | None,
                op: str) -> tuple[Tensor, bool, tuple[int, ...], tuple[int, ...], Pads]:
    x = convert_to_tensor(input)
    n = x.ndim - 2 if n is None else n
    _check_rank(x, n + 2, op)
    last = _channels_last(data_format, n)
    x = _to_last(x, last)
    window = _per_axis(ksize, n, "ksize", last)
    s = _per_axis(strides, n, "strides", last)
    return x, last, window, s, padding_of(padding, x.shape.as_list()[1:-1], window, s, (1,) * n, last)


def _window_axes(x: Tensor, n: int) -> list[int]:
    return list(range(1 + n, 1 + 2 * n))


def _max_pool(x: Tensor, window: tuple[int, ...], strides: tuple[int, ...], pads: Pads) -> Tensor:
    """The largest value of every window; the gradient goes to the first largest (TensorFlow's rule)."""
    n = len(window)
    lowest = float(np.finfo(x.dtype.np).min) if x.dtype.is_floating else float(np.iinfo(x.dtype.np).min)
    spatial = x.shape.as_list()[1:-1]

    @custom_gradient
    def pool(x: Tensor) -> Any:
        patches = extract_patches_nd(x, window, strides, (1,) * n, pads, fill=lowest)
        y = math_ops.reduce_max(patches, axis=_window_axes(patches, n))

        def grad(dy: Tensor) -> Tensor:
            shape = patches.shape.as_list()
            flat = array_ops.reshape(patches, [*shape[:1 + n], math.prod(window), shape[-1]])
            first = gather_ops.one_hot(math_ops.argmax(flat, axis=1 + n), math.prod(window), axis=1 + n,
                                       dtype=dy.dtype)
            spread = array_ops.reshape(first * array_ops.expand_dims(dy, 1 + n), shape)
            return patches_transpose(spread, spatial, window, strides, (1,) * n, pads)

        return y, grad

    return pool(x)


def _avg_pool(x: Tensor, window: tuple[int, ...], strides: tuple[int, ...], pads: Pads) -> Tensor:
    """The mean of every window over the positions inside the input (padding is not counted)."""
    n = len(window)
    patches = extract_patches_nd(x, window, strides, (1,) * n, pads)
    total = math_ops.reduce_sum(patches, axis=_window_axes(patches, n))
    if not any(lo or hi for lo, hi in pads):
        return total / convert_to_tensor(float(math.prod(window)), dtype=x.dtype)
    ones = np.ones((1, *x.shape.as_list()[1:-1], 1), x.dtype.np)
    # the count of real positions per window is a constant, computed once on the host
    counts = patches_reference(ones, window, strides, (1,) * n, pads).sum(axis=tuple(range(1 + n, 1 + 2 * n)))
    return total / convert_to_tensor(counts.astype(x.dtype.np))


def _pool(op: str, input: Any, ksize: Any, strides: Any, padding: Any, data_format: str | None,
          rank: int | None) -> Tensor:
    """Max or average pooling (``op`` is TensorFlow's name) over ``rank`` spatial axes (None: from the
    input's rank)."""
    x, last, window, s, pads = _pool_setup(input, ksize, strides, padding, data_format, rank, op)
    pooled = _max_pool(x, window, s, pads) if op == "MaxPool" else _avg_pool(x, window, s, pads)
    return _to_first(pooled, last)


def max_pool(input: Any, ksize: Any, strides: Any, padding: Any, data_format: str | None = None,
             name: str | None = None) -> Tensor:
    """``tf.nn.max_pool``: 1, 2 or 3 spatial axes (from the input's rank)."""
    return _pool("MaxPool", input, ksize, strides, padding, data_format, None)


def avg_pool(input: Any, ksize: Any, strides: Any, padding: Any, data_format: str | None = None,
             name: str | None = None) -> Tensor:
    """``tf.nn.avg_pool``: 1, 2 or 3 spatial axes (from the input's rank)."""
    return _pool("AvgPool", input, ksize, strides, padding, data_format, None)


def max_pool1d(input: Any, ksize: Any, strides: Any, padding: Any, data_format: str = "NWC",
               name: str | None = None) -> Tensor:
    """``tf.nn.max_pool1d``."""
    return _pool("MaxPool", input, ksize, strides, padding, data_format, 1)


def max_pool2d(input: Any, ksize: Any, strides: Any, padding: Any, data_format: str = "NHWC",
               name: str | None = None) -> Tensor:
    """``tf.nn.max_pool2d``."""
    return _pool("MaxPool", input, ksize, strides, padding, data_format, 2)


def avg_pool1d(input: Any, ksize: Any, strides: Any, padding: Any, data_format: str = "NWC",
               name: str | None = None) -> Tensor:
    """``tf.nn.avg_pool1d``."""
    return _pool("AvgPool", input, ksize, strides, padding, data_format, 1)


def avg_pool2d(input: Any, ksize: Any, strides: Any, padding: Any, data_format: str = "NHWC",
               name: str | None = None) -> Tensor:
    """``tf.nn.avg_pool2d``."""
    return _pool("AvgPool", input, ksize, strides, padding, data_format, 2)


def extract_patches(images: Any, sizes: Any, strides: Any, rates: Any, padding: str, name: str | None = None
                    ) -> Tensor:
    """``tf.image.extract_patches``: ``[N, H, W, C] -> [N, OH, OW, KH * KW * C]``."""
    x = convert_to_tensor(images)
    _check_rank(x, 4, "ExtractImagePatches")
    window, s, r = (_per_axis(v, 2, what) for v, what in ((sizes, "ksizes"), (strides, "strides"), (rates, "rates")))
    pads = padding_of(padding, x.shape.as_list()[1:-1], window, s, r)
    patches = extract_patches_nd(x, window, s, r, pads)
    shape = patches.shape.as_list()
    return array_ops.reshape(patches, [*shape[:3], math.prod(window) * shape[-1]])
