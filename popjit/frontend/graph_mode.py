"""TensorFlow 1 graph mode: ops recorded into a graph, run on demand by a session.

Under ``tf.compat.v1.disable_eager_execution()`` (or inside ``tf.Graph().as_default()``) every op
adds a node to the graph's :class:`GraphTrace`, the same tracing machinery ``tf.function`` uses, so
a TF1 graph is graph IR from the start. ``Session.run(fetches, feed_dict)`` cuts out the part of it
the fetches need (:func:`plan_run`) and compiles that part as one program, once per set of fetches
and feeds: an IPU program when anything in it was built under an IPU device scope
(``ipu.scopes.ipu_scope``), else a host program.

TF1's variable semantics differ from a ``tf.function``'s and are kept here:

- a read of a variable is its value when the run starts; an assignment does not change what
  other ops built later read (TF1 orders them only through data and control dependencies);
- an assignment happens when the run executes the node that produced the assigned value (the
  ``assign`` itself, or the loop that updated the variable), so ``sess.run(train_op)`` updates the
  weights and ``sess.run(loss)`` does not;
- a variable has no value until an initializer runs (``global_variables_initializer``): its initial
  value is computed when it is created and copied in by the initializer.

A graph keeps a persistent gradient tape, so ``tf.gradients`` and the TF1 optimizers differentiate
what was recorded before them.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from popjit import context
from popjit.errors import FailedPreconditionError, InvalidArgumentError
from popjit.frontend import gradient_tape, nest
from popjit.frontend.replay import free_values
from popjit.frontend.tensor import Tensor
from popjit.frontend.tracing import Trace, set_default_trace, tracing
from popjit.ir.graph import Aval, Binding, Graph, Node, Region, Value, VarRef
from popjit.runtime import device as devices
from popjit.source import where

_graph_names = itertools.count()
log = logging.getLogger("popjit")


class Operation:
    """A TF1 operation a session can run: the graph nodes it executes, the operations it waits for,
    host actions run before the program (initializers) and an optional host fetch run after it
    (an outfeed's ``dequeue``; a summary, given the arrays of ``fetch_inputs`` the program computed),
    whose value ``Session.run`` returns in the operation's place."""

    def __init__(self, graph: GraphTrace, name: str, nodes: Sequence[Node] = (), inputs: Sequence[Any] = (),
                 before: Sequence[Callable[[], None]] = (), fetch: Callable[..., Any] | None = None,
                 fetch_inputs: Sequence[Tensor] = ()) -> None:
        self.graph = graph
        self.name = name
        self.nodes = list(nodes)
        self.control_inputs = [x for x in inputs if x is not None]
        self.before = list(before)
        self.fetch = fetch
        self.fetch_inputs = list(fetch_inputs)  # tensors the run computes and passes to ``fetch`` as arrays

    @property
    def type(self) -> str:
        return "NoOp" if not self.nodes and self.fetch is None else self.name

    def run(self, feed_dict: Any = None, session: Any = None) -> None:
        """Run this operation in ``session`` (the default session if None)."""
        _session_for(session).run(self, feed_dict=feed_dict)

    def __repr__(self) -> str:
        return f"<tf.Operation '{self.name}' type={self.type}>"


class GraphTrace(Trace):
    """The recording of one TF1 graph (see the module docstring for its variable semantics)."""

    is_graph = True

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.writes: list[tuple[VarRef, Value]] = []
        self.node_devices: dict[int, str] = {}
        self.control: dict[int, list[Any]] = {}
        self.control_stack: list[list[Any]] = []
        self.names: dict[int, str] = {}
        self.collections: dict[str, list[Any]] = {}
        self.tape = gradient_tape.GradientTape(persistent=True)
        self.plans: dict[tuple, RunPlan] = {}
        self.host_pulls: list[Callable[[], Sequence[np.ndarray]]] = []
        self.facade: Any = None
        self.finalized = False

    # -- recording ---------------------------------------------------------------------------------
    @property
    def at_top(self) -> bool:
        return self.current is self.top

    def add_node(self, op: str, inputs: Sequence[Value], attrs: dict[str, Any], out_avals: Sequence[Aval],
                 regions: Sequence[Region] = (), loc: Any = None) -> Node:
        self.check_not_finalized()
        node = super().add_node(op, inputs, attrs, out_avals, regions, loc)
        if self.at_top:
            self.node_devices[id(node)] = context.current_device()
            deps = [d for level in self.control_stack for d in level]
            if deps:
                self.control[id(node)] = deps
        return node

    def write_var(self, ref: VarRef, value: Value) -> None:
        """Inside a loop or branch: as in a tf.function. At the top: remember the assignment, done when a
        run executes the node that produced ``value``."""
        if not self.at_top:
            super().write_var(ref, value)
            return
        if value.aval != ref.aval:
            raise InvalidArgumentError(f"Cannot assign a value of type {value.aval} to variable '{ref.name}' of "
                                       f"type {ref.aval}{where()}.")
        self.variables.setdefault(ref.id, ref)
        if value.producer is None:  # a parameter: give the assignment a node of its own to trigger it
            value = self.add_node("identity", [value], {}, [value.aval]).out
        self.writes.append((ref, value))

    def assign_result(self, value: Value) -> Tensor:
        """What ``assign`` returns in graph mode: the assigned value, whose evaluation does the assignment."""
        return Tensor.symbolic(value, self)

    def check_not_finalized(self) -> None:
        """``Graph.finalize()`` made the graph read-only: building anything more in it is an error."""
        if self.finalized:
            raise RuntimeError(f"Graph is finalized and cannot be modified.{where()}")

    def add_placeholder(self, aval: Aval, name: str) -> Tensor:
        self.check_not_finalized()
        value = self.add_param(aval, Binding("placeholder", name))
        self.names[value.uid] = name
        return Tensor.symbolic(value, self)

    def add_host_input(self, avals: Sequence[Aval], pull: Callable[[], Sequence[np.ndarray]], name: str
                       ) -> list[Tensor]:
        """Tensors a run takes from the host: ``pull()`` gives the arrays of all of them together, once per run
        that needs any (a TF1 dataset iterator's ``get_next``)."""
        group = len(self.host_pulls)
        self.host_pulls.append(pull)
        values = [self.add_param(a, Binding("host_input", (group, k))) for k, a in enumerate(avals)]
        for k, v in enumerate(values):
            self.names[v.uid] = f"{name}:{k}" if k else name
        return [Tensor.symbolic(v, self) for v in values]

    # -- variables ---------------------------------------------------------------------------------
    def variable_created(self, var: Any, initial: np.ndarray) -> None:
        """A variable made in this graph: no value until an initializer runs."""
        var._graph = self
        var._initial_value = initial.copy()
        var._initialized = False
        self.collection("variables").append(var)
        if var.trainable:
            self.collection("trainable_variables").append(var)

    def collection(self, name: str) -> list[Any]:
        return self.collections.setdefault(name, [])

    def initializer(self, variables: Sequence[Any], name: str = "init") -> Operation:
        """An operation that gives ``variables`` their initial values."""
        chosen = list(variables)

        def initialize() -> None:
            for var in chosen:
                var._write(var._initial_value)
                var._initialized = True

        return Operation(self, name, before=[initialize])

    def evaluate(self, t: Tensor) -> np.ndarray:
        """The value of ``t`` now, computed on the host (a variable's initial value built from graph ops)."""
        known = self.constant_value(t)
        if known is not None:
            return np.asarray(known)
        # why: the interpreter is not needed by eager code; it is loaded when a graph first needs it
        from popjit.graph.interpret import interpret

        plan = plan_run(self, [t._sym], [], {})
        args = plan.fed_arrays(self, {})
        variables = {b.key: _variable_buffer(b.key, devices.HOST_GENERATOR) for b in plan.graph.param_bindings
                     if b.kind == "var"}
        _check_initialized(plan)
        outs, _ = interpret(plan.graph, args, variables)
        return np.asarray(outs[0])

    def session_for(self, session: Any) -> Any:
        """``session``, or the default session (``eval()``/``run()`` without one)."""
        return _session_for(session)

    # -- control dependencies --------------------------------------------------------------------
    @contextlib.contextmanager
    def control_dependencies(self, control_inputs: Sequence[Any] | None) -> Iterator[None]:
        """Ops built inside also run ``control_inputs`` (None clears the enclosing ones)."""
        saved = self.control_stack
        if control_inputs is None:
            self.control_stack = []
        else:
            self.control_stack = [*saved, [c for c in control_inputs if c is not None]]
        try:
            yield
        finally:
            self.control_stack = saved


def _variable_buffer(vid: int, generator: Any) -> np.ndarray:
    # why: function (and the compiler behind it) is built on this module's layer peers; loaded on first run
    from popjit.frontend.function import _variable_buffer as buffer

    return buffer(vid, generator)


# -- planning a run --------------------------------------------------------------------------------
@dataclass
class RunPlan:
    """The program one kind of ``Session.run`` executes: a graph cut out of the recording, the
    fetched values it returns, the fed values it takes (in argument order) and where it runs."""

    graph: Graph
    feeds: list[Value]
    device: str
    concrete: Any = None
    host_inputs: dict[int, list[tuple[int, Value]]] = field(default_factory=dict)  # pull -> (component, value)

    @property
    def variables(self) -> list[int]:
        """The ids of the variables the program reads."""
        return [b.key for b in self.graph.param_bindings if b.kind == "var"]

    def fed_arrays(self, trace: GraphTrace, fed: dict[int, np.ndarray]) -> list[np.ndarray]:
        """The program's arguments: the session's feeds, then one element from each host input it reads."""
        arrays = dict(fed)
        for group, members in self.host_inputs.items():
            pulled = trace.host_pulls[group]()
            arrays.update((v.uid, np.asarray(pulled[k])) for k, v in members)
        return [arrays[v.uid] for v in self.feeds]


def _ipu_device(trace: GraphTrace, nodes: Sequence[Node]) -> str:
    """The IPU device any of ``nodes`` was built for (they run as one IPU program), else the host."""
    for node in nodes:
        device = trace.node_devices.get(id(node), devices.CPU)
        if devices.is_ipu_device(device):
            return device
    return devices.CPU


def _needed(trace: GraphTrace, values: Sequence[Value], nodes: Sequence[Node],
            fed: set[int]) -> tuple[set[int], list[Value]]:
    """The top-level nodes (ids) the values and nodes need, and the parameters they read."""
    needed: set[int] = set()
    params: dict[int, Value] = {}
    value_stack, node_stack = list(values), list(nodes)
    while value_stack or node_stack:
        while value_stack:
            v = value_stack.pop()
            if v.uid in fed or v.producer is None:
                params[v.uid] = v
            else:
                node_stack.append(v.producer)
        while node_stack:
            node = node_stack.pop()
            if id(node) in needed:
                continue
            needed.add(id(node))
            value_stack.extend(node.inputs)
            value_stack.extend(free_values(node.regions))
            dep_values, dep_nodes, _ = operands(trace.control.get(id(node), ()))
            value_stack.extend(dep_values)
            node_stack.extend(dep_nodes)
    return needed, list(params.values())


def operands(items: Sequence[Any]) -> tuple[list[Value], list[Node], list[Callable[[], None]]]:
    """What running ``items`` (tensors and operations, nested) takes: the values it computes, the nodes it
    executes and the host actions (initializers) it runs first, those of an operation's dependencies
    before its own, each operation once."""
    values: list[Value] = []
    nodes: list[Node] = []
    actions: list[Callable[[], None]] = []
    seen: set[int] = set()

    def visit(item: Any) -> None:
        if isinstance(item, Tensor) and item._sym is not None:
            values.append(item._sym)
        if not isinstance(item, Operation) or id(item) in seen:
            return
        seen.add(id(item))
        for dep in [*item.control_inputs, *item.fetch_inputs]:
            visit(dep)
        nodes.extend(item.nodes)
        actions.extend(item.before)

    for item in items:
        visit(item)
    return values, nodes, actions


def plan_run(trace: GraphTrace, values: Sequence[Value], nodes: Sequence[Node], feeds: dict[int, Value]) -> RunPlan:
    """Cut out of ``trace`` the program that computes ``values`` and runs ``nodes`` with ``feeds``
    (value uid -> value) given: its parameters are the fed values then the variables it reads; its
    results are ``values`` then the variables it assigns."""
    needed, params = _needed(trace, values, nodes, set(feeds))
    bindings = dict(zip((p.uid for p in trace.top.region.params), trace.param_bindings))
    host: dict[int, list[tuple[int, Value]]] = {}
    for p in params:
        binding = bindings.get(p.uid)
        if p.uid in feeds:
            continue
        if binding is not None and binding.kind == "host_input":
            host.setdefault(binding.key[0], []).append((binding.key[1], p))
        elif binding is None or binding.kind != "var":
            raise InvalidArgumentError(_missing_feed(trace, p))
    kept = [n for n in trace.top.region.nodes if id(n) in needed]
    writes: dict[int, tuple[VarRef, Value]] = {}
    for ref, value in trace.writes:
        if value.producer is not None and id(value.producer) in needed:
            writes.pop(ref.id, None)
            writes[ref.id] = (ref, value)  # the last assignment wins, as the last one recorded
    fed = [*feeds.values(), *(v for members in host.values() for _, v in members)]
    var_params = [p for p in params if p.uid not in feeds and bindings[p.uid].kind == "var"]
    region = Region([*fed, *var_params], kept, [*values, *(v for _, v in writes.values())])
    param_bindings = [*(Binding("arg", k) for k in range(len(fed))), *(bindings[p.uid] for p in var_params)]
    result_bindings = [*(Binding("out", k) for k in range(len(values))), *(Binding("var", vid) for vid in writes)]
    variables = {b.key: trace.variables[b.key] for b in [*param_bindings, *result_bindings] if b.kind == "var"}
    # why: one session run is a program of its own: it spans the IPUs of the nodes it runs (a host one none)
    graph = Graph(trace.name, region, param_bindings, result_bindings, variables, region.shards())
    return RunPlan(graph, fed, _ipu_device(trace, kept), host_inputs=host)


def _missing_feed(trace: GraphTrace, p: Value) -> str:
    name = trace.names.get(p.uid, f"Placeholder#{p.uid}")
    shape = "[" + ",".join(str(d) for d in p.aval.shape) + "]"
    return (f"You must feed a value for placeholder tensor '{name}' with dtype {p.aval.dtype.name} and shape {shape}: "
            "add it to the session's feed_dict.")


def _check_initialized(plan: RunPlan) -> None:
    # why: variables is built on this module's peers (it imports tracing, as this module does)
    from popjit.frontend.variables import VARIABLES

    for vid in plan.variables:
        var = VARIABLES.get(vid)
        if var is not None and not var._initialized:
            raise FailedPreconditionError(
                f"Error while reading resource variable {var._name} from Container: localhost. This could mean that "
                "the variable was uninitialized: run tf.compat.v1.global_variables_initializer() (or the variable's "
                "initializer) in the session before the ops that read it."
            )


def run_plan(plan: RunPlan, feed_arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Execute ``plan`` with the fed arrays; its fetched values as arrays (variables updated in place)."""
    # why: function (and the compiler behind it) sits beside this module; loaded when a graph first runs
    from popjit.frontend.function import ConcreteFunction

    _check_initialized(plan)
    if not plan.graph.region.nodes:  # nothing to compute: the results are fed values and variables, read now
        env = {v.uid: a for v, a in zip(plan.feeds, feed_arrays)}
        env.update((v.uid, _variable_buffer(b.key, devices.HOST_GENERATOR).copy())
                   for v, b in zip(plan.graph.params, plan.graph.param_bindings) if b.kind == "var")
        return [env[v.uid] for v, b in zip(plan.graph.results, plan.graph.result_bindings) if b.kind == "out"]
    if plan.concrete is None:
        spec = [("result", k) for k in range(sum(b.kind == "out" for b in plan.graph.result_bindings))]
        _, tree = nest.flatten_with_tree([0] * len(spec))
        plan.concrete = ConcreteFunction(plan.graph, tree, spec, plan.graph.name,
                                         jit_compile=devices.is_ipu_device(plan.device))
    with tracing(None):
        outs = plan.concrete.run(list(feed_arrays), plan.device)
    return [o.numpy() for o in outs]


# -- graphs and the default graph -------------------------------------------------------------------
class _DefaultGraph(threading.local):
    def __init__(self) -> None:
        self.stack: list[Any] = []


_default = _DefaultGraph()
_global: dict[str, Any] = {"graph": None, "eager": True, "eager_asked": False}


def eager_enabled() -> bool:
    """Whether ops run eagerly outside graphs (False after ``disable_eager_execution``)."""
    return _global["eager"]


def default_graph() -> Any:
    """The innermost ``as_default`` graph, else the process's default graph (made on first use)."""
    if _default.stack:
        return _default.stack[-1]
    if _global["graph"] is None:
        _set_global_graph(GraphFacade())
    return _global["graph"]


def _set_global_graph(graph: Any) -> None:
    old = _global["graph"]
    _global["graph"] = graph
    if not _global["eager"]:
        _activate(old, graph)


def _activate(old: Any, new: Any) -> None:
    """Make ``new`` the graph ops are recorded into when no other trace is active."""
    tapes = gradient_tape._tapes()
    if old is not None and old._trace.tape in tapes:
        old._trace.tape.__exit__(None, None, None)
    if new is not None:
        new._trace.tape.__enter__()
    set_default_trace(new._trace if new is not None else None)


def disable_eager_execution() -> None:
    """From now on, ops outside ``tf.function`` are recorded into the default graph (TF1 behaviour)."""
    if not _global["eager"]:
        return
    graph = default_graph()
    _global["eager"] = False
    _global["eager_asked"] = False
    _activate(None, graph)


def tf1_entry(api: str) -> None:
    """A TF1 graph-only API used while ops run eagerly: switch to graph mode, as TensorFlow 1.15 ran by
    default, so TF1 programs (which never call ``disable_eager_execution``) run unmodified."""
    # why: tracing's current_trace says whether a tf.function is being traced (then nothing changes)
    from popjit.frontend.tracing import current_trace

    if _global["eager"] and not _global["eager_asked"] and current_trace() is None:
        log.info("%s is TensorFlow 1 graph API: recording ops into the default graph from now on (TF1 graph mode, "
                 "as tf.compat.v1.disable_eager_execution() does)", api)
        disable_eager_execution()


def enable_eager_execution() -> None:
    """Ops run eagerly (again; the default graph stays, unused). Asked for explicitly, it also stops TF1
    graph-only APIs from switching to graph mode (:func:`tf1_entry`): they fail as in TensorFlow 2."""
    _global["eager_asked"] = True
    if _global["eager"]:
        return
    _activate(_global["graph"], None)
    _global["eager"] = True


def reset_default_graph() -> None:
    """Replace the default graph by a new, empty one (``tf.compat.v1.reset_default_graph``)."""
    if _default.stack:
        raise AssertionError("Do not use tf.reset_default_graph() to clear nested graphs. If you need a cleared "
                             "graph, exit the nesting and create a new graph.")
    _set_global_graph(GraphFacade())


def last_node_operation(name: str) -> Operation | None:
    """In TF1 graph mode, an operation running the node just built (a loop with no outputs); else None."""
    trace = current_graph_trace()
    if trace is None or not trace.current.region.nodes:
        return None
    return Operation(trace, name, nodes=[trace.current.region.nodes[-1]] if trace.at_top else [])


def current_graph_trace() -> GraphTrace | None:
    """The graph being recorded into right now, if any (at its top level or inside its loops)."""
    # why: tracing's current_trace is the one source of what is being traced
    from popjit.frontend.tracing import current_trace

    trace = current_trace()
    return trace if isinstance(trace, GraphTrace) else None


class GraphFacade:
    """``tf.compat.v1.Graph``: a TF1 graph (its recording is a :class:`GraphTrace`)."""

    def __init__(self) -> None:
        self._trace = GraphTrace(f"graph_{next(_graph_names)}")
        self._trace.facade = self

    @contextlib.contextmanager
    def as_default(self) -> Iterator[GraphFacade]:
        """Record the ops built inside into this graph."""
        _default.stack.append(self)
        try:
            with tracing(self._trace), self._trace.tape:
                yield self
        finally:
            _default.stack.pop()

    def control_dependencies(self, control_inputs: Sequence[Any] | None) -> contextlib.AbstractContextManager[None]:
        """Ops built inside also run ``control_inputs``."""
        return self._trace.control_dependencies(control_inputs)

    def get_collection(self, name: str, scope: str | None = None) -> list[Any]:
        """The items of collection ``name`` (optionally those whose name starts with ``scope``)."""
        items = list(self._trace.collections.get(name, []))
        if scope is None:
            return items
        return [x for x in items if getattr(x, "name", "").startswith(scope)]

    def get_collection_ref(self, name: str) -> list[Any]:
        """The collection ``name`` itself (changes to it change the graph's)."""
        return self._trace.collection(name)

    def add_to_collection(self, name: str, value: Any) -> None:
        self._trace.collection(name).append(value)

    def finalize(self) -> None:
        """Make the graph read-only: building an op or a placeholder in it raises ``RuntimeError``."""
        self._trace.finalized = True

    @property
    def finalized(self) -> bool:
        return self._trace.finalized

    def device(self, name: str) -> contextlib.AbstractContextManager[None]:
        return context.device_scope(name)

    def __repr__(self) -> str:
        return f"<tf.Graph '{self._trace.name}'>"


def _session_for(session: Any) -> Any:
    if session is not None:
        return session
    s = default_session()
    if s is None:
        raise ValueError("Cannot evaluate tensor using `eval()`: No default session is registered. Use `with "
                         "sess.as_default()` or pass an explicit session to `eval(session=sess)`")
    return s


_sessions = threading.local()


def default_session() -> Any:
    """The innermost session entered with ``with`` / ``as_default()`` on this thread, or None."""
    stack = getattr(_sessions, "stack", [])
    return stack[-1] if stack else None


@contextlib.contextmanager
def session_default(session: Any) -> Iterator[Any]:
    if not hasattr(_sessions, "stack"):
        _sessions.stack = []
    _sessions.stack.append(session)
    try:
        yield session
    finally:
        _sessions.stack.remove(session)


def feed_array(value: Any, aval: Aval, name: str) -> np.ndarray:
    """A fed value as the placeholder's dtype, checked against its shape."""
    arr = np.asarray(value.numpy() if isinstance(value, Tensor) else value, dtype=aval.dtype.np)
    if arr.shape != aval.shape:
        raise ValueError(f"Cannot feed value of shape {arr.shape} for Tensor '{name}:0', which has shape "
                         f"'{aval.shape}'")
    return arr


