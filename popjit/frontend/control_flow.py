"""``tf.while_loop``, ``tf.cond`` and counted ``tf.range`` loops, traced into ``while``/``if`` nodes.

Outside a trace they run as plain Python. Inside, each builds its regions in loop or branch
scopes; variables the regions touch are threaded through: a variable assigned in a loop becomes
a carried value, one only read is captured from outside, one assigned in a branch becomes a
branch result.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from popjit.errors import InvalidArgumentError
from popjit.frontend import gradient_tape, math_ops, nest
from popjit.frontend.autograph import convert
from popjit.frontend.convert import convert_to_tensor
from popjit.frontend.replay import free_values
from popjit.frontend.tensor import Tensor
from popjit.frontend.tracing import Scope, Trace, current_trace
from popjit.frontend.variables import VARIABLES
from popjit.ir.graph import Aval, Region, Value
from popjit.source import user_location, where


def _as_tensors(leaves: Sequence[Any], avals: Sequence[Aval] | None = None) -> list[Tensor]:
    if avals is None:
        return [convert_to_tensor(x) for x in leaves]
    return [convert_to_tensor(x, dtype_hint=a.dtype) for x, a in zip(leaves, avals)]


def _converted(fn: Callable[..., Any] | None) -> Any:
    """User callbacks traced by popjit get autograph's conversion, as TensorFlow does."""
    return convert(fn) if fn is not None else None


def replace_uses(region: Region, old: Value, new: Value) -> None:
    """Replace every use of ``old`` by ``new`` in ``region`` and its nested regions."""
    for node in region.nodes:
        node.inputs = [new if v is old else v for v in node.inputs]
        for r in node.regions:
            replace_uses(r, old, new)
    region.results = [new if v is old else v for v in region.results]


def _loop_vars(trace: Trace, scopes: Sequence[Scope]) -> tuple[list[int], list[int]]:
    """Variables the loop regions touch: (carried: assigned in the body, read-only)."""
    touched: list[int] = []
    for s in scopes:
        for vid in [*s.var_params, *s.var_written]:
            if vid not in touched:
                touched.append(vid)
    written = {vid for s in scopes for vid in s.var_written}
    return [v for v in touched if v in written], [v for v in touched if v not in written]


def while_loop(cond: Callable[..., Any], body: Callable[..., Any], loop_vars: Any, shape_invariants: Any = None,
               parallel_iterations: int = 10, back_prop: bool = True, swap_memory: bool = False,
               name: str | None = None, maximum_iterations: Any = None, *, trip_count: int | None = None,
               return_same_structure: bool = False) -> Any:
    """``tf.while_loop``: repeat ``body`` while ``cond`` holds; returns the final loop variables."""
    single = not isinstance(loop_vars, (list, tuple))
    structure = [loop_vars] if single else loop_vars
    trace = current_trace()
    if trace is None:
        values, count = list(structure), 0
        while (maximum_iterations is None or count < int(maximum_iterations)) and bool(cond(*values)):
            out = body(*values)
            values = list(out) if isinstance(out, (list, tuple)) else [out]
            count += 1
        return values[0] if single else type(loop_vars)(values) if isinstance(loop_vars, tuple) else values
    leaves, tree = nest.flatten_with_tree(list(structure))
    init = _as_tensors(leaves)
    cond, body = _converted(cond), _converted(body)
    outs = _traced_while(trace, cond, body, tree, init, maximum_iterations, trip_count)
    result = nest.unflatten(tree, outs)
    if single:
        return result[0]
    return tuple(result) if isinstance(loop_vars, tuple) else result


def _trace_condition(trace: Trace, cond: Callable[..., Any], args: list[Any], avals: list[Aval], loc: Any) -> Scope:
    """The condition region: its parameters are the carried values, its one result a scalar bool."""
    scope = trace.push("loop", [Value(a) for a in avals])
    try:
        pred = convert_to_tensor(cond(*args(scope.region.params)))
        if not pred.dtype.is_bool or pred.ndim != 0:
            raise InvalidArgumentError(f"The loop condition must be a scalar bool tensor, not {pred.dtype.name}"
                                       f"{list(pred.shape.as_list())}{where(loc)}")
        scope.region.results = [trace.value_of(pred)]
    finally:
        trace.pop(scope)
    if scope.var_written:
        raise InvalidArgumentError(f"A loop condition must not assign variables{where(loc)}.")
    return scope


def _trace_body(trace: Trace, body: Callable[..., Any], args: Any, tree: Any, avals: list[Aval], loc: Any) -> Scope:
    """The body region: it must return values of the carried structure, shapes and dtypes."""
    scope = trace.push("loop", [Value(a) for a in avals])
    try:
        out = body(*args(scope.region.params))
        out = list(out) if isinstance(out, (list, tuple)) else [out]
        out_leaves, out_tree = nest.flatten_with_tree(out)
        if repr(out_tree) != repr(tree):
            raise ValueError(f"The loop body must return the same structure as its loop variables{where(loc)}.")
        new = _as_tensors(out_leaves, avals)
        for i, (t, a) in enumerate(zip(new, avals)):
            if t.aval != a:
                raise InvalidArgumentError(
                    f"Loop variable {i} enters the loop as {a} but has {t.aval} after one iteration{where(loc)}. "
                    "XLA requires loop-carried values to keep their shape and dtype; cast or reshape it inside "
                    "the body so it matches."
                )
        scope.region.results = [trace.value_of(t) for t in new]
    finally:
        trace.pop(scope)
    return scope


def _thread_variables(trace: Trace, cscope: Scope, bscope: Scope, init_vals: list[Value]) -> list[int]:
    """Variables the loop only reads are captured from outside; assigned ones become carried values
    (appended to ``init_vals`` and to both regions). Returns the carried variables' ids."""
    carried, read_only = _loop_vars(trace, [cscope, bscope])
    for vid in read_only:
        outer = trace.read_var(trace.variables[vid])
        _record_read(trace, vid, outer)
        for s in (cscope, bscope):
            if vid in s.var_params:
                replace_uses(s.region, s.var_params[vid], outer)
    for vid in carried:
        ref = trace.variables[vid]
        init_vals.append(trace.read_var(ref))
        _record_read(trace, vid, init_vals[-1])
        for s in (cscope, bscope):
            s.region.params.append(s.var_params.get(vid) or Value(ref.aval))
        bscope.region.results.append(bscope.var_current.get(vid, bscope.region.params[-1]))
    return carried


def _record_on_tapes(trace: Trace, node: Any) -> None:
    """Record a control-flow node for gradients: its inputs are its operands plus every value its regions
    capture (a weight used in a loop body gets its gradient through them)."""
    if not gradient_tape.recording():
        return

    inputs = [Tensor.symbolic(v, trace) for v in [*node.inputs, *free_values(node.regions)]]
    outputs = [Tensor.symbolic(v, trace) for v in node.outputs]
    gradient_tape.record(node.op, inputs, outputs, {"node": node})


def _record_read(trace: Trace, vid: int, value: Value) -> None:
    var = VARIABLES.get(vid)
    if var is not None:
        gradient_tape.record_variable_read(var, Tensor.symbolic(value, trace))


def _traced_while(trace: Trace, cond: Callable[..., Any], body: Callable[..., Any], tree: Any, init: list[Tensor],
                  maximum_iterations: Any, trip_count: int | None) -> list[Tensor]:
    loc = user_location(3)
    init_vals = [trace.value_of(t) for t in init]
    avals = [v.aval for v in init_vals]

    def args(params: Sequence[Value]) -> list[Any]:
        return nest.unflatten(tree, [Tensor.symbolic(p, trace) for p in params])

    cscope = _trace_condition(trace, cond, args, avals, loc)
    bscope = _trace_body(trace, body, args, tree, avals, loc)
    carried = _thread_variables(trace, cscope, bscope, init_vals)
    attrs = {k: int(v) for k, v in (("max_iterations", maximum_iterations), ("trip_count", trip_count))
             if v is not None}
    node = trace.add_node("while", init_vals, attrs, [v.aval for v in init_vals], [cscope.region, bscope.region],
                          loc)
    _record_on_tapes(trace, node)
    for k, vid in enumerate(carried):
        trace.write_var(trace.variables[vid], node.outputs[len(init) + k])
    return [Tensor.symbolic(v, trace) for v in node.outputs[: len(init)]]


def cond(pred: Any, true_fn: Callable[[], Any] | None = None, false_fn: Callable[[], Any] | None = None,
         name: str | None = None) -> Any:
    """``tf.cond``: ``true_fn()`` if ``pred`` else ``false_fn()``; both are traced under a tensor predicate."""
    trace = current_trace()
    if trace is None or not (isinstance(pred, Tensor) and pred.is_symbolic):
        return (true_fn if bool(pred) else false_fn)()  # type: ignore[misc]
    loc = user_location(2)
    p = convert_to_tensor(pred)
    if not p.dtype.is_bool or p.ndim != 0:
        raise InvalidArgumentError(f"The predicate of tf.cond must be a scalar bool tensor{where(loc)}.")
    branches = []
    for fn in (_converted(true_fn), _converted(false_fn)):
        scope = trace.push("branch")
        try:
            out = fn() if fn is not None else None
            leaves, tree = nest.flatten_with_tree(out)
            branches.append((scope, leaves, tree))
        finally:
            trace.pop(scope)
    (ts, tl, tt), (fs, fl, ft) = branches
    if repr(tt) != repr(ft) or len(tl) != len(fl):
        raise ValueError(
            "true_fn and false_fn arguments to tf.cond must have the same number, type, and overall structure "
            f"of return values.{where(loc)}"
        )
    return nest.unflatten(tt, _traced_if(trace, p, ts, fs, tl, fl, loc))


def _branch_value(trace: Trace, scope: Scope, x: Any, aval: Aval | None) -> Value:
    trace.scopes.append(scope)
    try:
        t = convert_to_tensor(x, dtype_hint=aval.dtype if aval else None)
        return trace.value_of(t)
    finally:
        trace.scopes.pop()


def _traced_if(trace: Trace, pred: Tensor, ts: Scope, fs: Scope, tl: list[Any], fl: list[Any], loc: Any) -> list[Any]:
    outs: list[Any] = []
    tensor_slots = []
    for i, (a, b) in enumerate(zip(tl, fl)):
        if isinstance(a, (Tensor, int, float)) or isinstance(b, (Tensor, int, float)):
            if isinstance(a, Tensor) or isinstance(b, Tensor) or a != b:
                tensor_slots.append(i)
        elif a is not b and a != b:
            raise ValueError(f"tf.cond branches return different Python values {a!r} and {b!r}{where(loc)}.")
    then_vals, else_vals = [], []
    for i in tensor_slots:
        tv = _branch_value(trace, ts, tl[i], None)
        ev = _branch_value(trace, fs, fl[i], tv.aval)
        if tv.aval != ev.aval:
            raise ValueError(f"tf.cond branch output {i} is {tv.aval} in true_fn but {ev.aval} in false_fn"
                             f"{where(loc)}.")
        then_vals.append(tv)
        else_vals.append(ev)
    written = []
    for s in (ts, fs):
        for vid in s.var_written:
            if vid not in written:
                written.append(vid)
    for vid in written:
        ref = trace.variables[vid]
        outer = trace.read_var(ref)
        _record_read(trace, vid, outer)
        then_vals.append(ts.var_current.get(vid, outer))
        else_vals.append(fs.var_current.get(vid, outer))
    ts.region.results, fs.region.results = then_vals, else_vals
    out_avals = [v.aval for v in then_vals]
    node = trace.add_node("if", [trace.value_of(pred)], {"out_avals": tuple(out_avals)}, out_avals,
                          [ts.region, fs.region], loc)
    _record_on_tapes(trace, node)
    for k, vid in enumerate(written):
        trace.write_var(trace.variables[vid], node.outputs[len(tensor_slots) + k])
    results = iter(node.outputs)
    for i, a in enumerate(tl):
        outs.append(Tensor.symbolic(next(results), trace) if i in tensor_slots else a)
    return outs


def _trip_count(start: float, limit: float, delta: float) -> int:
    """How many values ``range(start, limit, delta)`` yields, for ints or floats."""
    if delta == 0:
        raise InvalidArgumentError("Requires delta != 0: 0 [Op:Range]")
    return max(0, math.ceil((limit - start) / delta))


def for_range(start: Any, limit: Any, delta: Any, body: Callable[..., Any], loop_vars: list[Any]) -> list[Any]:
    """``for i in tf.range(start, limit, delta)`` with carried ``loop_vars``; ``body(i, *vars) -> vars``.

    With bounds known while tracing the loop gets a static trip count (it becomes a ``Repeat``);
    otherwise the condition compares the counter with the limit in the direction of ``delta``.
    """
    trace = current_trace()
    bounds = [convert_to_tensor(x) for x in (start, limit, delta)]
    if trace is None:
        s, lim, d = (b.numpy().item() for b in bounds)
        values = list(loop_vars)
        for k in range(_trip_count(s, lim, d)):
            values = list(body(convert_to_tensor(s + k * d, dtype=bounds[1].dtype), *values))
        return values
    consts = [trace.constant_value(b) for b in bounds]
    known = all(c is not None for c in consts)
    trip = _trip_count(*(c.item() for c in consts)) if known else None  # type: ignore[union-attr]
    limit_t = bounds[1]
    start_t, delta_t = (math_ops.cast(b, limit_t.dtype) for b in (bounds[0], bounds[2]))

    def c(i: Tensor, *vs: Any) -> Tensor:
        if consts[2] is not None:
            return math_ops.less(i, limit_t) if consts[2].item() > 0 else math_ops.greater(i, limit_t)
        up = math_ops.greater(delta_t, math_ops.cast(0, delta_t.dtype))
        return math_ops.where(up, math_ops.less(i, limit_t), math_ops.greater(i, limit_t))

    def b(i: Tensor, *vs: Any) -> list[Any]:
        return [math_ops.add(i, delta_t), *body(i, *vs)]

    out = while_loop(c, b, [start_t, *loop_vars], trip_count=trip)
    return list(out[1:])
