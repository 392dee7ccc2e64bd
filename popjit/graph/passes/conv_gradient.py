"""A convolution's input gradient as a convolution, for a stride of one.

Autodiff gives the gradient of a convolution (``patches @ filters``, :mod:`popjit.frontend.conv_ops`)
with respect to its input as ``patches_transpose(dy @ filtersᵀ)``: a ``[rows, window * in]`` product,
every window entry of every output position stored, then summed into the input positions reading it
(col2im, :mod:`popjit.ops.conv`). With a stride of one the same sums are a convolution of ``dy``,
padded by what the windows reach past the input, with the filters flipped along the window axes and
their two channel axes swapped:

    dx[n, i, c] = sum over k, o of dy[n, i + lo - k * d, o] * w[k, c, o]
                = sum over j, o of pad(dy)[n, i + j * d, o] * w[K - 1 - j, c, o]

Poplar computes a convolution's backward pass that way too. popjit rewrites the graph so: the patches
of ``dy`` are a view, like a forward convolution's, which the engine can compute block by block
instead of storing (:mod:`popjit.codegen.implicit`), and no col2im kernel remains: a convolution's
training step ran 2-10% faster on a 2-core Ice Lake, its ``[rows, window * in]`` buffer gone
(``docs/pipeline.md``, "Implicit products").

Larger strides keep col2im (their transposed convolution would read ``dy`` dilated by zeros), and so
does padding wider than the window reaches (explicit padding can be), and so do convolutions of fewer
than :data:`MIN_INPUT_CHANNELS` input channels.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from popjit.graph.passes.dce import dce
from popjit.ir.graph import Graph, Node, Region, Value
from popjit.ops import registry

#: Input channels a convolution needs for its input gradient to become a convolution. why: the input
#: gradient's product is as wide as the input has channels, and the own gemm takes products 64 wide
#: (``popjit.kernels.gemm_choice.own_gemm_wins``); narrower ones would store the patches of ``dy``, often
#: larger than col2im's product. Letting the own gemm take the Keras CNN's 32-wide one (5408 x 32 x 576)
#: made its training step 0-3% faster but its cold first epoch 1.7 s longer (a computed product's codelet
#: to compile: 2.8 -> 4.5-4.8 s, against a 3 s target).
MIN_INPUT_CHANNELS = 64


def _use_counts(region: Region, counts: Counter) -> Counter:
    """How many times each value (by uid) is read, in ``region`` and the regions inside it."""
    counts.update(v.uid for v in region.results)
    for node in region.nodes:
        counts.update(v.uid for v in node.inputs)
        for r in node.regions:
            _use_counts(r, counts)
    return counts


def _sole_producer(value: Value, op: str, uses: Counter) -> Node | None:
    """The node of ``op`` producing ``value`` when nothing else reads ``value``."""
    node = value.producer
    return node if node is not None and node.op == op and uses[value.uid] == 1 else None


def _convolution_product(col2im: Node, uses: Counter) -> Node | None:
    """The ``dy @ filtersᵀ`` product whose patches ``col2im`` sums, reshaped to them, read by it alone."""
    reshape = _sole_producer(col2im.inputs[0], "reshape", uses)
    product = _sole_producer(reshape.inputs[0], "matmul", uses) if reshape is not None else None
    if product is None or not product.attrs.get("convolution") or product.attrs.get("transpose_a"):
        return None
    dy, filters = product.inputs
    if not product.attrs.get("transpose_b") or dy.aval.ndim != 2 or filters.aval.ndim != 2:
        return None
    return product


def _flipped_pads(col2im: Node) -> tuple[tuple[int, int], ...] | None:
    """The padding of ``dy`` in the equivalent convolution (None: col2im stays, see the module docstring)."""
    a = col2im.attrs
    if any(s != 1 for s in a["strides"]):
        return None
    pads = tuple(((k - 1) * d - lo, (k - 1) * d - hi) for k, d, (lo, hi) in zip(a["window"], a["dilations"], a["pads"]))
    return pads if all(lo >= 0 and hi >= 0 for lo, hi in pads) else None


class _Builder:
    """New nodes placed where ``like`` is, each with the shape and dtype its op infers."""

    def __init__(self, like: Node) -> None:
        self.like, self.nodes = like, []

    def __call__(self, op: str, inputs: list[Value], **attrs: Any) -> Value:
        aval = registry.get(op).infer(*[v.aval for v in inputs], **attrs)
        node = Node(op, inputs, attrs, [aval], **self.like.placement())
        self.nodes.append(node)
        return node.out


def _as_convolution(col2im: Node, uses: Counter, min_channels: int) -> list[Node] | None:
    """The nodes computing ``col2im``'s result as a convolution (its output value kept), or None."""
    product = _convolution_product(col2im, uses)
    pads = _flipped_pads(col2im)
    if product is None or pads is None or col2im.out.shape[-1] < min_channels:
        return None
    a, out = col2im.attrs, col2im.out
    window, spatial = tuple(a["window"]), len(a["window"])
    dy2d, filters2d = product.inputs
    batch, channels_in, channels_out = out.shape[0], out.shape[-1], dy2d.shape[1]
    patched = col2im.inputs[0].shape
    add = _Builder(col2im)
    dy = add("reshape", [dy2d], shape=(batch, *patched[1:1 + spatial], channels_out))
    filters = add("reshape", [filters2d], shape=(*window, channels_in, channels_out))
    flipped = add("slice", [filters], begin=(*(k - 1 for k in window), 0, 0), size=filters.shape,
                  step=(*(-1,) * spatial, 1, 1))
    swapped = add("transpose", [flipped], perm=(*range(spatial), spatial + 1, spatial))
    patches = add("extract_patches", [dy], window=window, strides=(1,) * spatial, dilations=tuple(a["dilations"]),
                  pads=pads, fill=0.0)
    rows, depth = math.prod(out.shape[:-1]), math.prod(window) * channels_out
    result = add("matmul", [add("reshape", [patches], shape=(rows, depth)),
                            add("reshape", [swapped], shape=(depth, channels_in))],
                 **{**product.attrs, "transpose_b": False})
    last = Node("reshape", [result], {"shape": out.shape}, [out.aval], **col2im.placement())
    last.outputs[0] = out
    out.producer, out.index = last, 0
    return [*add.nodes, last]


def _rewrite_region(region: Region, uses: Counter, min_channels: int) -> None:
    nodes: list[Node] = []
    for node in region.nodes:
        for r in node.regions:
            _rewrite_region(r, uses, min_channels)
        replaced = _as_convolution(node, uses, min_channels) if node.op == "patches_transpose" else None
        nodes += replaced if replaced is not None else [node]
    region.nodes = nodes


def convolve_input_gradients(graph: Graph, min_channels: int = MIN_INPUT_CHANNELS) -> Graph:
    """Rewrite every stride-one ``patches_transpose(dy @ filtersᵀ)`` of at least ``min_channels`` input
    channels as a convolution (module docstring)."""
    _rewrite_region(graph.region, _use_counts(graph.region, Counter()), min_channels)
    return dce(graph)
