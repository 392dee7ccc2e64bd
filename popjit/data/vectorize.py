"""Running a graph traced for ONE element on a whole chunk of elements at once.

A ``map`` or ``filter`` function is traced once for the element shape. If every node of the
graph is *batch-safe* — it has a rule below saying how the same op applies to a stack of
elements — the graph runs once per chunk on arrays with an extra leading dimension, with each
op's NumPy reference. Values that do not depend on the element (constants, captured tensors,
variable reads) stay unbatched and broadcast.

Batch-safe: every element-wise op (unary, binary, n-ary such as ``cast`` and ``select``); the
deterministic sources (``constant``, ``iota``, ``eye``); ``identity``/``stop_gradient``;
``reshape``, ``transpose``, ``broadcast_to``, ``slice``, ``concat``, ``split``, ``tile``, ``pad``,
``one_hot``; reductions, ``argmax``/``argmin`` and ``cumsum`` (axes shift by one); ``gather``
from an element-independent table along axis 0. Not batch-safe, so the function runs once per
element instead (same graph, graph interpreter): loops and conditionals, random ops (each element
must draw its own numbers), variable writes, ``matmul`` and any op without a rule.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from popjit.ir.graph import Graph, Node
from popjit.ops import registry
from popjit.ops.shapes import normalize_axes, normalize_axis

Rule = Callable[[Node, list[np.ndarray], list[bool], int], Any]
_UNSAFE_OPS = frozenset({"random_uniform", "random_normal", "philox"})


def _lift(x: np.ndarray, batched: bool, rank: int) -> np.ndarray:
    """A batched operand reshaped so that NumPy broadcasting lines up element dimensions."""
    if not batched or x.ndim - 1 == rank:
        return x
    return x.reshape((x.shape[0],) + (1,) * (rank - (x.ndim - 1)) + x.shape[1:])


def _full(x: np.ndarray, batched: bool, k: int) -> np.ndarray:
    """An operand with the leading batch dimension, broadcast when it does not depend on the element."""
    return x if batched else np.broadcast_to(x, (k, *x.shape))


def _elementwise(node: Node, xs: list[np.ndarray], b: list[bool], k: int) -> Any:
    rank = len(node.outputs[0].shape)
    return registry.get(node.op).reference(*[_lift(x, f, rank) for x, f in zip(xs, b)], **node.attrs)


def _with(attrs: dict[str, Any], **changes: Any) -> dict[str, Any]:
    out = dict(attrs)
    out.update(changes)
    return out


def _ref(node: Node) -> Callable[..., Any]:
    return registry.get(node.op).reference


def _reshape(node: Node, xs: list[np.ndarray], b: list[bool], k: int) -> Any:
    return xs[0].reshape((k, *node.attrs["shape"]))


def _transpose(node: Node, xs: list[np.ndarray], b: list[bool], k: int) -> Any:
    return np.transpose(xs[0], (0, *(p + 1 for p in node.attrs["perm"])))


def _broadcast(node: Node, xs: list[np.ndarray], b: list[bool], k: int) -> Any:
    shape = tuple(node.attrs["shape"])
    return np.broadcast_to(_lift(xs[0], True, len(shape)), (k, *shape)).copy()


def _slice(node: Node, xs: list[np.ndarray], b: list[bool], k: int) -> Any:
    a = node.attrs
    return _ref(node)(xs[0], begin=(0, *a["begin"]), size=(k, *a["size"]), step=(1, *a["step"]))


def _shift_axis(name: str) -> Rule:
    def rule(node: Node, xs: list[np.ndarray], b: list[bool], k: int) -> Any:
        rank = len(node.inputs[0].shape)
        axis = normalize_axis(node.attrs[name], rank) + 1
        args = [_full(x, f, k) for x, f in zip(xs, b)]
        return _ref(node)(*args, **_with(node.attrs, **{name: axis}))

    return rule


def _reduce(node: Node, xs: list[np.ndarray], b: list[bool], k: int) -> Any:
    axes = tuple(a + 1 for a in normalize_axes(node.attrs["axes"], len(node.inputs[0].shape)))
    return _ref(node)(xs[0], **_with(node.attrs, axes=axes))


def _tile(node: Node, xs: list[np.ndarray], b: list[bool], k: int) -> Any:
    return _ref(node)(xs[0], **_with(node.attrs, multiples=(1, *node.attrs["multiples"])))


def _pad(node: Node, xs: list[np.ndarray], b: list[bool], k: int) -> Any:
    return _ref(node)(xs[0], **_with(node.attrs, paddings=((0, 0), *node.attrs["paddings"])))


def _one_hot(node: Node, xs: list[np.ndarray], b: list[bool], k: int) -> Any:
    axis = node.attrs.get("axis", -1)
    return _ref(node)(xs[0], **_with(node.attrs, axis=axis if axis == -1 else axis + 1))


def _gather(node: Node, xs: list[np.ndarray], b: list[bool], k: int) -> Any:
    return _ref(node)(xs[0], xs[1], **node.attrs)  # table unbatched, axis 0: rows per element index


def _passthrough(node: Node, xs: list[np.ndarray], b: list[bool], k: int) -> Any:
    return xs[0]


_RULES: dict[str, Rule] = {
    "reshape": _reshape, "transpose": _transpose, "broadcast_to": _broadcast, "slice": _slice,
    "concat": _shift_axis("axis"), "split": _shift_axis("axis"), "argmax": _shift_axis("axis"),
    "argmin": _shift_axis("axis"), "cumsum": _shift_axis("axis"), "tile": _tile, "pad": _pad,
    "one_hot": _one_hot, "gather": _gather, "identity": _passthrough, "stop_gradient": _passthrough,
}


def _rule(node: Node) -> Rule | None:
    if node.op in _UNSAFE_OPS:
        return None
    if node.op in _RULES:
        return _RULES[node.op]
    op = registry.get(node.op)
    if op.is_elementwise:
        return _elementwise
    if op.kind == registry.REDUCE and "axes" in node.attrs:
        return _reduce
    return None


def unsafe_reason(graph: Graph) -> str | None:
    """Why ``graph`` cannot run on a stack of elements, or None when it can."""
    if any(b.kind == "var" for b in graph.result_bindings):
        return "it assigns a variable"
    batched = {p.uid for p, b in zip(graph.params, graph.param_bindings) if b.kind == "arg"}
    for node in graph.region.nodes:
        if node.regions:
            return f"it contains a {node.op} (control flow on tensors)"
        if node.op in _UNSAFE_OPS:
            return f"op '{node.op}' must run once per element"
        flags = [v.uid in batched for v in node.inputs]
        if not any(flags):
            continue
        if _rule(node) is None:
            return f"op '{node.op}' has no batching rule"
        if node.op == "gather" and (flags[0] or normalize_axis(node.attrs.get("axis", 0), len(node.inputs[0].shape))
                                    or node.attrs.get("batch_dims", 0)):
            return "it gathers from an element-dependent table or along an axis other than 0"
        batched.update(v.uid for v in node.outputs)
    return None


def run_batched(graph: Graph, args: list[np.ndarray], variables: dict[int, np.ndarray], k: int) -> list[np.ndarray]:
    """Run ``graph`` (traced for one element) on ``k`` stacked elements; results have a leading ``k``."""
    env: dict[int, tuple[np.ndarray, bool]] = {}
    for p, binding in zip(graph.params, graph.param_bindings):
        env[p.uid] = (args[binding.key], True) if binding.kind == "arg" else (variables[binding.key], False)
    with np.errstate(all="ignore"):
        for node in graph.region.nodes:
            _run_node(node, env, k)
    outs = []
    for v, binding in zip(graph.results, graph.result_bindings):
        if binding.kind != "out":
            continue
        x, batched = env[v.uid]
        x = _full(np.asarray(x), batched, k)
        outs.append(np.ascontiguousarray(x, dtype=v.dtype.np).reshape((k, *v.shape)))
    return outs


def _run_node(node: Node, env: dict[int, tuple[np.ndarray, bool]], k: int) -> None:
    xs = [env[v.uid][0] for v in node.inputs]
    b = [env[v.uid][1] for v in node.inputs]
    if not any(b):
        out = _ref(node)(*xs, **node.attrs)
        batched = False
    else:
        rule = _rule(node)
        assert rule is not None, f"op {node.op} is not batch-safe"
        out = rule(node, xs, b, k)
        batched = True
    outs = out if isinstance(out, tuple) else (out,)
    for v, o in zip(node.outputs, outs):
        shape = (k, *v.shape) if batched else v.shape
        env[v.uid] = (np.asarray(o, dtype=v.dtype.np).reshape(shape), batched)
