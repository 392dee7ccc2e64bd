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
from popjit.ir.opdef import CONTROL, OpDef, register


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
#   values (``dynamic_update_slice`` into ``[n, ...]`` buffers, in place); a reversed loop then
#   replays one body step on the saved values of iteration ``n-1-j`` and backpropagates through it,
#   carrying the cotangents of the carried values and summing those of the captured values
#   (the weights a loop body reads).
#
# Rules have the registry signature ``vjp(t, primals, outputs, cotangents, node)``.


def _floating(xs: list[Any]) -> list[int]:
    return [i for i, x in enumerate(xs) if x.dtype.is_floating]


def _grads_through(t: Any, region: Any, args: list[Any], wrt: list[Any], outputs: list[Any],
                   cts: list[Any]) -> list[Any]:
    """d(region(args))/d(wrt) contracted with ``cts`` (zeros where a source is unconnected)."""
    with t.GradientTape() as tape:
        for x in wrt:
            tape.watch(x)
        outs = t.replay(region, args)
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
    states = _forward_states(t, node.regions[1], init, n)
    fc, ff = _floating(init), _floating(free)
    ct0 = [cts[i] if cts[i] is not None else t.zeros_like(outputs[i]) for i in fc]
    ct_init, ct_free = _backward_loop(t, node.regions[1], states, init, [free[i] for i in ff], fc, ct0, n)
    for i, g in zip(fc, ct_init):
        result[i] = g
    for i, g in zip(ff, ct_free):
        result[k + i] = g
    return result


def _forward_states(t: Any, body: Any, init: list[Any], n: int) -> list[Any]:
    """Replay the loop, stacking each iteration's carried values (before the step) into ``[n, ...]``."""
    stacks = [t.zeros([n, *t.shape_of(x)], x.dtype) for x in init]

    def step(i: Any, *vals: Any) -> list[Any]:
        carry, saved = list(vals[: len(init)]), list(vals[len(init):])
        begin = lambda x: t.stack([i] + [t.constant(0, t.int32)] * len(t.shape_of(x)))  # noqa: E731
        saved = [t.dynamic_update_slice(s, t.expand_dims(c, 0), begin(c)) for s, c in zip(saved, carry)]
        return [i + 1, *t.replay(body, carry), *saved]

    out = t.while_loop(lambda i, *v: i < n, step, [t.constant(0, t.int32), *init, *stacks], trip_count=n)
    return list(out[1 + len(init):])


def _backward_loop(t: Any, body: Any, states: list[Any], init: list[Any], free: list[Any], fc: list[int],
                   ct0: list[Any], n: int) -> tuple[list[Any], list[Any]]:
    """Walk the iterations backwards, carrying cotangents of the floating carried values and summing
    those of the captured values."""
    acc0 = [t.zeros_like(x) for x in free]

    def step(j: Any, *vals: Any) -> list[Any]:
        ct, acc = list(vals[: len(fc)]), list(vals[len(fc):])
        i = (n - 1) - j
        carry = [_row(t, s, i) for s in states]
        wrt = [carry[c] for c in fc] + free
        cts_out: list[Any] = [None] * len(init)
        for c, g in zip(fc, ct):
            cts_out[c] = g
        grads = _grads_through(t, body, carry, wrt, carry, cts_out)
        return [j + 1, *grads[: len(fc)], *[a + g for a, g in zip(acc, grads[len(fc):])]]

    out = t.while_loop(lambda j, *v: j < n, step, [t.constant(0, t.int32), *ct0, *acc0], trip_count=n)
    return list(out[1: 1 + len(fc)]), list(out[1 + len(fc):])


def _row(t: Any, stack: Any, i: Any) -> Any:
    """``stack[i]`` for a run-time ``i``."""
    shape = t.shape_of(stack)[1:]
    begin = t.stack([i] + [t.constant(0, t.int32)] * len(shape))
    return t.reshape(t.slice(stack, begin, [1, *shape]), shape)


register(OpDef("while", CONTROL, _while_infer, _interpreted, _lower_while, vjp=while_vjp,
                  doc="loop with carried values"))
register(OpDef("if", CONTROL, _if_infer, _interpreted, _lower_if, vjp=if_vjp, doc="two-way conditional"))
