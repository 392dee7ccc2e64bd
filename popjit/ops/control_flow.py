"""Control flow: ``while`` (loop-carried values) and ``if`` (two branches).

Both carry regions; the frontend builds them directly (:mod:`popjit.frontend.control_flow`), the
graph interpreter and the loop lowering give them meaning. A ``while`` whose condition is
``counter < constant`` with a constant step lowers to a fixed-count ``Repeat`` (Poplar's
``Repeat``); any other loop to ``RepeatWhile``.

``while`` attrs: ``max_iterations`` (or None). Regions: ``cond(carried) -> [pred]``,
``body(carried) -> carried``. ``if``: input ``pred``; regions ``then() -> outs``, ``else() -> outs``.
"""

from __future__ import annotations

from typing import Any

from popjit.errors import InvalidArgumentError, UnimplementedError
from popjit.ir.graph import Aval
from popjit.ir.opdef import CONTROL, MATMUL, OpDef, register
from popjit.ops import registry
from popjit.ops.source import RESERVE


def _while_infer(*carried: Aval, **attrs: Any) -> tuple[Aval, ...]:
    return tuple(carried)


def _if_infer(pred: Aval, **attrs: Any) -> tuple[Aval, ...]:
    if not pred.dtype.is_bool or pred.ndim != 0:
        raise InvalidArgumentError(f"The predicate of a conditional must be a scalar bool, not {pred}")
    return tuple(attrs["out_avals"])


def _interpreted(*args: Any, **attrs: Any) -> Any:
    raise AssertionError("control-flow ops are run by the graph interpreter, which evaluates their regions")


def _lower_while(ctx: Any, node: Any, args: list[Any]) -> list[Any]:
    return ctx.lower_while(node, args)


def _lower_if(ctx: Any, node: Any, args: list[Any]) -> list[Any]:
    return ctx.lower_if(node, args)


# ----------------------------------------------------------------------------------------------
# Gradient rules
#
# Gradients of ``if`` and counted ``while`` nodes traced into a differentiated step.
#
# Both recompute their regions inside the backward pass (``t.replay``) under a local tape:
#
# - ``if``: the backward pass is a conditional on the same predicate; each branch replays its
#   forward branch and differentiates it. The inputs of an ``if`` entry are the predicate and the
#   values its branches capture.
# - counted ``while`` (static ``trip_count``): a forward replay also stacks every iteration's carried
#   values (``dynamic_update_slice`` into ``[n, ...]`` buffers, in place, reserved rather than filled
#   first: every row is written before one is read); a reversed loop then
#   replays one body step on the saved values of iteration ``n-1-j`` and backpropagates through it,
#   carrying the cotangents of the carried values and summing those of the captured values
#   (the weights a loop body reads).
#
# Rules have the registry signature ``vjp(t, primals, outputs, cotangents, node)``.


def _floating(xs: list[Any]) -> list[int]:
    return [i for i, x in enumerate(xs) if x.dtype.is_floating]


def _grads_through(t: Any, region: Any, args: list[Any], wrt: list[Any], outputs: list[Any],
                   cts: list[Any], stashed: dict[int, Any] | None = None) -> list[Any]:
    """d(region(args))/d(wrt) contracted with ``cts`` (zeros where a source is unconnected); ``stashed``:
    values of the region's nodes kept from its first run (see :func:`stashed_products`)."""
    with t.GradientTape() as tape:
        for x in wrt:
            tape.watch(x)
        outs = t.replay(region, args, stashed)
    keep = [i for i, (o, c) in enumerate(zip(outs, cts)) if c is not None and o.dtype.is_floating]
    if not keep or not wrt:
        return [t.zeros_like(x) for x in wrt]
    grads = tape.gradient([outs[i] for i in keep], wrt, output_gradients=[cts[i] for i in keep])
    return [g if g is not None else t.zeros_like(x) for g, x in zip(grads, wrt)]


def if_vjp(t: Any, primals: list, outputs: list, cts: list, node: Any) -> list[Any]:
    """Cotangents of a conditional's captured values (the predicate gets none)."""
    free = primals[len(node.inputs):]
    diff = _floating(free)
    result: list[Any] = [None] * len(primals)
    if not diff:
        return result
    xs = [free[i] for i in diff]
    filled = [c if c is not None else (t.zeros_like(o) if o.dtype.is_floating else None) for c, o in zip(cts, outputs)]
    then, orelse = node.regions
    grads = t.cond(primals[0], lambda: _grads_through(t, then, [], xs, outputs, filled),
                   lambda: _grads_through(t, orelse, [], xs, outputs, filled))
    for i, g in zip(diff, grads):
        result[len(node.inputs) + i] = g
    return result


def while_vjp(t: Any, primals: list, outputs: list, cts: list, node: Any) -> list[Any]:
    """Cotangents of a counted loop's initial values and captured values."""
    trip = node.attrs.get("trip_count")
    if trip is None:
        raise UnimplementedError(
            "Cannot differentiate a while loop whose trip count is only known at run time: popjit saves every "
            "iteration's state for the backward pass, so it must know how many there are. Loop over tf.range "
            "with a bound known while tracing."
        )
    limit = node.attrs.get("max_iterations")
    n = int(trip if limit is None else min(trip, limit))
    k = len(node.inputs)
    init, free = primals[:k], primals[k:]
    result: list[Any] = [None] * len(primals)
    if n == 0:
        for i in _floating(init):
            result[i] = cts[i] if cts[i] is not None else t.zeros_like(init[i])
        for i in _floating(free):
            result[k + i] = t.zeros_like(free[i])
        return result
    body = node.regions[1]
    products = stashed_products(body, n)
    states, stashes = _forward_states(t, body, init, n, products)
    fc, ff = _floating(init), _floating(free)
    ct0 = [cts[i] if cts[i] is not None else t.zeros_like(outputs[i]) for i in fc]
    saved = _Saved(states, {v.uid: s for v, s in zip(products, stashes)})
    ct_init, ct_free = _backward_loop(t, body, saved, init, [free[i] for i in ff], fc, ct0, n)
    for i, g in zip(fc, ct_init):
        result[i] = g
    for i, g in zip(ff, ct_free):
        result[k + i] = g
    return result


#: The most bytes of matrix products a differentiated loop keeps for its backward pass (over all its
#: iterations); products beyond it are computed again there.
STASH_BYTES = 64 << 20


def stashed_products(body: Any, n: int) -> list[Any]:
    """The matrix products of a loop body (its top-level matmul nodes with a floating result) that
    depend on the iteration's carried values, in order, as many as fit :data:`STASH_BYTES` over ``n``
    iterations. The forward loop keeps each iteration's value of them, so the backward loop reads them
    instead of multiplying again (an LSTM's ``h @ U`` is then done once forwards, not twice)."""
    varying = {p.uid for p in body.params}
    products, used = [], 0
    for node in body.nodes:
        if not node.regions and not any(v.uid in varying for v in node.inputs):
            continue  # why: a node with regions may read the carried values inside them, so it counts as varying
        varying.update(v.uid for v in node.outputs)
        if registry.get(node.op).kind != MATMUL or len(node.outputs) != 1:
            continue
        (out,) = node.outputs
        if not out.aval.dtype.is_floating:
            continue
        size = n * out.aval.nbytes
        if used + size <= STASH_BYTES:
            products.append(out)
            used += size
    return products


class _Saved:
    """What the forward loop kept for the backward one: each iteration's carried values (``states``,
    stacked ``[n, ...]``) and its stashed products (by the uid of the body's value, stacked)."""

    def __init__(self, states: list[Any], stashes: dict[int, Any]) -> None:
        self.states, self.stashes = states, stashes


def _forward_states(t: Any, body: Any, init: list[Any], n: int, products: list[Any]) -> tuple[list[Any], list[Any]]:
    """Replay the loop, stacking each iteration's carried values (before the step) and the body's
    ``products`` into ``[n, ...]``."""
    rows = [(t.shape_of(x), x.dtype) for x in init] + [(v.aval.shape, v.aval.dtype) for v in products]
    # why reserved, not zeros: the loop writes every row before the backward loop reads one (a fill of the
    # Keras LSTM's three [64, 32, 128|512] stacks, 6.4 MB a step, was 3.8% of its samples)
    stacks = [t.apply_op(RESERVE, [], shape=(n, *shape), dtype=dtype) for shape, dtype in rows]
    k, m = len(init), len(products)

    def step(i: Any, *vals: Any) -> list[Any]:
        carry = list(vals[:k])
        results, computed = t.replay_keeping(body, carry, products)
        return [i + 1, *results, *(_put_row(t, s, r, i) for s, r in zip(vals[k:], [*carry, *computed]))]

    out = t.while_loop(lambda i, *v: i < n, step, [t.constant(0, t.int32), *init, *stacks], trip_count=n)
    return list(out[1 + k:1 + 2 * k]), list(out[1 + 2 * k:1 + 2 * k + m])


def _put_row(t: Any, stack: Any, row: Any, i: Any) -> Any:
    """``stack`` with ``stack[i] = row`` for a run-time ``i``."""
    return t.dynamic_update_slice(stack, t.expand_dims(row, 0), _row_start(t, i, len(t.shape_of(row))))


def _backward_loop(t: Any, body: Any, saved: _Saved, init: list[Any], free: list[Any], fc: list[int],
                   ct0: list[Any], n: int) -> tuple[list[Any], list[Any]]:
    """Walk the iterations backwards, carrying cotangents of the floating carried values and summing
    those of the captured values."""
    acc0 = [t.zeros_like(x) for x in free]

    def step(j: Any, *vals: Any) -> list[Any]:
        ct, acc = list(vals[: len(fc)]), list(vals[len(fc):])
        i = (n - 1) - j
        carry = [_row(t, s, i) for s in saved.states]
        stashed = {uid: _row(t, s, i) for uid, s in saved.stashes.items()}
        wrt = [carry[c] for c in fc] + free
        cts_out: list[Any] = [None] * len(init)
        for c, g in zip(fc, ct):
            cts_out[c] = g
        grads = _grads_through(t, body, carry, wrt, carry, cts_out, stashed)
        return [j + 1, *grads[: len(fc)], *[a + g for a, g in zip(acc, grads[len(fc):])]]

    out = t.while_loop(lambda j, *v: j < n, step, [t.constant(0, t.int32), *ct0, *acc0], trip_count=n)
    return list(out[1: 1 + len(fc)]), list(out[1 + len(fc):])


def _row(t: Any, stack: Any, i: Any) -> Any:
    """``stack[i]`` for a run-time ``i``."""
    shape = t.shape_of(stack)[1:]
    return t.reshape(t.slice(stack, _row_start(t, i, len(shape)), [1, *shape]), shape)


def _row_start(t: Any, i: Any, rank: int) -> Any:
    """The start ``[i, 0, ...]`` of row ``i`` of a stack of rank-``rank`` rows."""
    return t.stack([i] + [t.constant(0, t.int32)] * rank)


register(OpDef("while", CONTROL, _while_infer, _interpreted, _lower_while, vjp=while_vjp,
                  doc="loop with carried values"))
register(OpDef("if", CONTROL, _if_infer, _interpreted, _lower_if, vjp=if_vjp, doc="two-way conditional"))
