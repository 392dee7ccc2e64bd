"""Tracing: turning Python calls on tensors into graph IR, and running ops eagerly otherwise.

:func:`apply_op` is the single entry point every TensorFlow-named function goes through. While a
:class:`Trace` is active (inside ``tf.function`` tracing) it adds a node to the current region;
otherwise it runs the op now: on the CPU with the op's NumPy reference, or on a virtual IPU
(under ``tf.device('/device:IPU:0')``) through the compiler.

Variables are threaded through scopes. A *function* scope reads a variable as a graph parameter
bound to it; a *loop* scope (condition or body) reads it as a region parameter, so the loop
carries it; a *branch* scope reads the enclosing value. Writes update the scope's current value;
the loop and conditional builders turn the written set into carried values / branch results.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from popjit import context, dtypes
from popjit.errors import InvalidArgumentError, OpError
from popjit.frontend import gradient_tape
from popjit.frontend.tensor import Tensor
from popjit.ir.graph import Aval, Binding, Graph, Node, Region, Value, VarRef
from popjit.ops import registry
from popjit.runtime import device as devices
from popjit.runtime.eager import run_on_ipu
from popjit.source import SourceLoc, user_location, where

_CONST_FOLD_MAX_ELEMENTS = 4096


@dataclass(eq=False)
class Scope:
    """One region being traced and the variable state visible in it."""

    kind: str  # "function" | "loop" | "branch"
    region: Region
    parent: Scope | None
    var_current: dict[int, Value] = field(default_factory=dict)
    var_params: dict[int, Value] = field(default_factory=dict)
    var_written: list[int] = field(default_factory=list)
    defined: set[int] = field(default_factory=set)


class Trace:
    """The state of one ``tf.function`` trace."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.top = Scope("function", Region(), None)
        self.scopes: list[Scope] = [self.top]
        self.param_bindings: list[Binding] = []
        self.variables: dict[int, VarRef] = {}
        self.const_values: dict[int, np.ndarray] = {}
        self.effects: list[Node] = []
        self.extra: dict[str, Any] = {}
        self.shard: int | None = None  # the IPU new nodes are placed on (None: with their data)
        self.backward = False  # new nodes belong to a gradient computation
        # the planner options of new matmul nodes and of their gradients (a pipeline stage's)
        self.stage_plans: tuple[Any, Any] | None = None

    @property
    def current(self) -> Scope:
        return self.scopes[-1]

    # -- values --------------------------------------------------------------------------------
    def add_param(self, aval: Aval, binding: Binding) -> Value:
        v = Value(aval)
        self.top.region.params.append(v)
        self.param_bindings.append(binding)
        self.top.defined.add(v.uid)
        return v

    def add_node(self, op: str, inputs: Sequence[Value], attrs: dict[str, Any], out_avals: Sequence[Aval],
                 regions: Sequence[Region] = (), loc: SourceLoc | None = None) -> Node:
        node = Node(op, inputs, attrs, out_avals, regions, loc, self.shard, self.backward)
        scope = self.current
        scope.region.add(node)
        for v in node.outputs:
            scope.defined.add(v.uid)
        if registry.get(op).effect:
            self.effects.append(node)
        return node

    def constant(self, value: np.ndarray) -> Value:
        aval = Aval(tuple(value.shape), dtypes.as_dtype(value.dtype))
        node = self.add_node("constant", [], {"value": value}, [aval])
        self.const_values[node.out.uid] = value
        return node.out

    def check_visible(self, v: Value) -> None:
        """A value may be used in its own scope or any scope nested inside it."""
        for s in self.scopes:
            if v.uid in s.defined:
                return
        raise InvalidArgumentError(
            "A tensor computed inside a loop body or conditional branch is used outside it"
            f"{_where()}. Make it a loop variable: assign it before the loop (or in both branches) "
            "so that autograph carries it out."
        )

    def value_of(self, t: Any) -> Value:
        """The SSA value for a tensor: eager tensors become constants, symbolic ones must belong here."""
        assert isinstance(t, Tensor), f"value_of needs a Tensor, not {type(t).__name__}"
        if t._sym is None:
            return self.constant(t._value)  # type: ignore[arg-type]
        if t._trace is not self:
            raise InvalidArgumentError(
                "A symbolic tensor from another tf.function trace (or one that has finished) was used"
                f"{_where()}. Pass it to this function as an argument, or return it from the function "
                "that created it."
            )
        self.check_visible(t._sym)
        return t._sym

    def constant_value(self, t: Any) -> np.ndarray | None:
        """The value of a tensor if it is known while tracing (a constant or folded from constants)."""
        if isinstance(t, Tensor):
            if t._sym is None:
                return t._value
            return self.const_values.get(t._sym.uid)
        return None

    # -- variables -------------------------------------------------------------------------------
    def read_var(self, ref: VarRef) -> Value:
        self.variables.setdefault(ref.id, ref)
        return self._read(self.current, ref)

    def _read(self, scope: Scope, ref: VarRef) -> Value:
        if ref.id in scope.var_current:
            return scope.var_current[ref.id]
        if scope.kind == "function":
            v = self.add_param(ref.aval, Binding("var", ref.id))
        elif scope.kind == "loop":
            v = Value(ref.aval)
            scope.var_params[ref.id] = v
            scope.defined.add(v.uid)
        else:
            assert scope.parent is not None
            return self._read(scope.parent, ref)
        scope.var_current[ref.id] = v
        return v

    def read_var_in_parent(self, scope: Scope, ref: VarRef) -> Value:
        assert scope.parent is not None
        return self._read(scope.parent, ref)

    def write_var(self, ref: VarRef, value: Value) -> None:
        self.variables.setdefault(ref.id, ref)
        scope = self.current
        if value.aval != ref.aval:
            raise InvalidArgumentError(
                f"Cannot assign a value of type {value.aval} to variable '{ref.name}' of type {ref.aval}"
                f"{_where()}."
            )
        scope.var_current[ref.id] = value
        if ref.id not in scope.var_written:
            scope.var_written.append(ref.id)

    # -- scopes ----------------------------------------------------------------------------------
    def push(self, kind: str, params: Sequence[Value] = ()) -> Scope:
        scope = Scope(kind, Region(list(params)), self.current)
        scope.defined.update(p.uid for p in params)
        self.scopes.append(scope)
        return scope

    def pop(self, scope: Scope) -> None:
        assert self.scopes[-1] is scope, "trace scopes popped out of order"
        self.scopes.pop()

    def finish(self, outputs: Sequence[Value]) -> Graph:
        """The finished graph: ``outputs`` as results, then every written variable."""
        top = self.top
        results = list(outputs)
        bindings = [Binding("out", i) for i in range(len(outputs))]
        for vid in top.var_written:
            results.append(top.var_current[vid])
            bindings.append(Binding("var", vid))
        top.region.results = results
        return Graph(self.name, top.region, list(self.param_bindings), bindings, dict(self.variables), self.shards)

    @property
    def shards(self) -> int:
        """The IPUs the traced program spans: one more than the highest shard its ops were placed on."""
        return self.extra.get("shards", 1)

    def use_shard(self, index: int) -> None:
        """Note that ops are placed on shard ``index`` (``ipu.scopes.ipu_shard``, a pipeline stage's IPU)."""
        self.extra["shards"] = max(self.shards, index + 1)

    @contextlib.contextmanager
    def marking(self, op: str, **attrs: Any) -> Iterator[None]:
        """The last ``op`` node the block adds to the current region (if any) gets ``attrs``: what the schedule
        needs to know of it (a pipeline's loop, a gradient accumulation's weight update)."""
        region = self.current.region
        first = len(region.nodes)
        yield
        node = next((n for n in reversed(region.nodes[first:]) if n.op == op), None)
        if node is not None:
            node.attrs.update(attrs)

    @contextlib.contextmanager
    def planning(self, forward: Any, backward: Any) -> Iterator[None]:
        """Matmuls added inside plan with ``forward``'s options and their gradients with ``backward``'s
        (``PipelineStageOptions``-like: ``plan(convolution)`` gives a matmul's or a convolution's
        ``(availableMemoryProportion, half partials)``, or None for the device's own options)."""
        saved = self.stage_plans
        self.stage_plans = (forward, backward)
        try:
            yield
        finally:
            self.stage_plans = saved

    @contextlib.contextmanager
    def placed(self, shard: int | None, backward: bool | None = None) -> Iterator[None]:
        """Nodes added inside go on ``shard`` (None: leave the current placement), and are marked as part
        of a gradient computation when ``backward``."""
        saved = self.shard, self.backward
        if shard is not None:
            self.use_shard(shard)
            self.shard = shard
        if backward is not None:
            self.backward = backward
        try:
            yield
        finally:
            self.shard, self.backward = saved


def planned_matmul_attrs(attrs: dict[str, Any], forward: Any, backward: Any) -> dict[str, Any]:
    """A matmul's attributes with the planner options of its stage: ``plan`` for itself, ``backward_plan``
    for its gradients (each only when the stage sets options of its kind)."""
    convolution = bool(attrs.get("convolution", False))
    out = dict(attrs)
    for name, options in (("plan", forward), ("backward_plan", backward)):
        chosen = options.plan(convolution) if options is not None else None
        if chosen is not None and name not in out:
            out[name] = chosen
    return out


_state = threading.local()
_default_trace: list[Trace] = []  # TF1 graph mode: the graph ops go into when nothing else is traced


def current_trace() -> Trace | None:
    stack = getattr(_state, "traces", None)
    if stack:
        return stack[-1]
    return _default_trace[0] if _default_trace else None


def set_default_trace(trace: Trace | None) -> None:
    """Record ops outside any other trace into ``trace`` (TF1's default graph), or run them eagerly (None)."""
    _default_trace[:] = [trace] if trace is not None else []


class tracing:  # noqa: N801
    """Context manager making ``trace`` the active trace."""

    def __init__(self, trace: Trace | None) -> None:
        self.trace = trace

    def __enter__(self) -> Trace | None:
        if not hasattr(_state, "traces"):
            _state.traces = []
        _state.traces.append(self.trace)
        return self.trace

    def __exit__(self, *exc: Any) -> None:
        _state.traces.pop()


def _where() -> str:
    return where(user_location(3))


def infer(op: registry.OpDef, avals: Sequence[Aval], attrs: dict[str, Any]) -> tuple[Aval, ...]:
    """Run an op's shape/dtype rule, adding the user's source location to any error."""
    try:
        out = op.infer(*avals, **attrs)
    except OpError as e:
        raise type(e)(f"{e.message}{_where()}") from None
    except (TypeError, ValueError) as e:
        raise type(e)(f"{e}{_where()}") from None
    return out if isinstance(out, tuple) else (out,)


def apply_op(name: str, inputs: Sequence[Any], **attrs: Any) -> Any:
    """Apply a registry op to tensors: add a node while tracing, run it now otherwise.

    Returns one Tensor, or a tuple of Tensors for ops with several outputs.
    """
    op = registry.get(name)
    assert all(isinstance(t, Tensor) for t in inputs), f"{name}: inputs must be converted to Tensors first"
    out_avals = infer(op, [t.aval for t in inputs], attrs)
    trace = current_trace()
    if trace is not None and name == "matmul" and trace.stage_plans is not None:
        attrs = planned_matmul_attrs(attrs, *trace.stage_plans)  # for the node and the tape's gradient
    if trace is not None:
        outs = _trace_op(trace, op, inputs, attrs, out_avals)
    else:
        outs = _run_eager(op, inputs, attrs, out_avals)
    if gradient_tape.recording():
        gradient_tape.record(name, list(inputs), outs, attrs)
    return outs[0] if len(outs) == 1 and not op.extra.get("tuple_output") else tuple(outs)


def _trace_op(trace: Trace, op: registry.OpDef, inputs: Sequence[Any], attrs: dict[str, Any],
              out_avals: tuple[Aval, ...]) -> list[Any]:
    values = [trace.value_of(t) for t in inputs]
    consts = [trace.const_values.get(v.uid) for v in values]
    foldable = (values and all(c is not None for c in consts) and op.folds
                and sum(a.size for a in out_avals) <= _CONST_FOLD_MAX_ELEMENTS)
    if foldable:
        result = op.reference(*consts, **attrs)
        results = result if isinstance(result, tuple) else (result,)
        outs = []
        for r, a in zip(results, out_avals):
            outs.append(Tensor.symbolic(trace.constant(np.asarray(r, dtype=a.dtype.np).reshape(a.shape)), trace))
        return outs
    node = trace.add_node(op.name, values, attrs, out_avals, loc=user_location(3))
    return [Tensor.symbolic(v, trace) for v in node.outputs]


def _run_eager(op: registry.OpDef, inputs: Sequence[Any], attrs: dict[str, Any],
               out_avals: tuple[Aval, ...]) -> list[Any]:
    device = context.current_device()
    if devices.is_ipu_device(device) and op.kind != registry.EFFECT:
        results = run_on_ipu(op.name, [t.numpy() for t in inputs], attrs, out_avals, device)
    else:
        with np.errstate(all="ignore"):
            r = op.reference(*[t.numpy() for t in inputs], **attrs)
        results = r if isinstance(r, tuple) else (r,)
    outs = []
    for r, a in zip(results, out_avals):
        arr = np.asarray(r)
        if arr.dtype != a.dtype.np or arr.shape != a.shape:
            arr = np.asarray(arr, dtype=a.dtype.np).reshape(a.shape)
        outs.append(Tensor.eager(arr, device))
    return outs
