"""``tf.compat.v1.Session``: running parts of a TF1 graph.

``run(fetches, feed_dict)`` takes any nest (list, tuple, dict, namedtuple) of graph tensors,
variables and operations. It runs the host actions of the operations (initializers), then the one
compiled program that computes the fetched tensors and executes the fetched operations
(:func:`popjit.frontend.graph_mode.plan_run`; compiled once per set of fetches and feeds), then the
host fetches (an outfeed's ``dequeue``), and returns the values in the fetches' structure: NumPy
arrays for tensors (NumPy scalars for scalars), None for operations.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from popjit.compat.v1.config import ConfigProto, RunMetadata, RunOptions
from popjit.errors import UnimplementedError
from popjit.frontend import graph_mode, nest
from popjit.frontend.graph_mode import GraphTrace, Operation
from popjit.frontend.tensor import Tensor
from popjit.frontend.tracing import tracing
from popjit.frontend.variables import Variable
from popjit.ir.graph import Value
from popjit.runtime import device as devices


class Session:
    """A TF1 session over one graph (the default graph unless ``graph`` is given)."""

    def __init__(self, target: str = "", graph: Any = None, config: Any = None) -> None:
        if target:
            raise UnimplementedError(f"tf.compat.v1.Session(target={target!r}): popjit runs sessions in this "
                                     "process only; remove the target.")
        if graph is None:
            graph_mode.tf1_entry("tf.compat.v1.Session")
        self._graph = graph if graph is not None else graph_mode.default_graph()
        if config is not None and not isinstance(config, ConfigProto):
            raise TypeError(f"Session(config=...) takes a tf.compat.v1.ConfigProto, not {type(config).__name__}")
        self._config = config
        self._closed = False
        self._default: Any = None

    @property
    def graph(self) -> Any:
        return self._graph

    @property
    def sess_str(self) -> str:
        return ""

    # -- running -------------------------------------------------------------------------------------
    def run(self, fetches: Any, feed_dict: Any = None, options: Any = None, run_metadata: Any = None) -> Any:
        """Run the graph to compute ``fetches`` with the placeholders (or other tensors) in ``feed_dict`` fed."""
        if self._closed:
            raise RuntimeError("Attempted to use a closed Session.")
        if options is not None and not isinstance(options, RunOptions):
            raise TypeError(f"Session.run(options=...) takes a tf.compat.v1.RunOptions, not {type(options).__name__}")
        metadata = run_metadata if run_metadata is not None else RunMetadata()
        trace: GraphTrace = self._graph._trace
        leaves, tree = nest.flatten_with_tree(fetches)
        items = [self._fetch_item(trace, leaf) for leaf in leaves]
        feeds = self._feeds(trace, feed_dict)
        values, nodes, actions = graph_mode.operands(items)
        with metadata.timed(devices.CPU, "host_actions"):
            for action in actions:
                action()
        computed = self._device_values(trace, list(dict.fromkeys(values)), nodes, feeds, metadata)
        with metadata.timed(devices.CPU, "host_fetches"):
            results = [self._result(item, computed) for item in items]
        return nest.unflatten(tree, results)

    def _fetch_item(self, trace: GraphTrace, leaf: Any) -> Any:
        if isinstance(leaf, Variable):
            with tracing(trace):
                return leaf.read_value()
        if isinstance(leaf, Operation):
            return leaf
        if isinstance(leaf, Tensor):
            if leaf._sym is not None and leaf._trace is not trace:
                raise ValueError(f"Tensor {leaf.name} is not an element of this graph.")
            return leaf
        if isinstance(leaf, str):
            raise UnimplementedError(f"Session.run({leaf!r}): fetching by name is not supported by popjit yet; fetch "
                                     "the tensor or operation object.")
        raise TypeError(f"Fetch argument {leaf!r} has invalid type {type(leaf)}, must be a string or Tensor. (Can not "
                        "convert a " + type(leaf).__name__ + " into a Tensor or Operation.)")

    def _feeds(self, trace: GraphTrace, feed_dict: Any) -> dict[int, tuple[Value, np.ndarray]]:
        feeds: dict[int, tuple[Value, np.ndarray]] = {}
        for key, value in (feed_dict or {}).items():
            if not isinstance(key, Tensor) or key._sym is None or key._trace is not trace:
                raise TypeError(f"Cannot interpret feed_dict key {key!r} as a Tensor of this session's graph.")
            name = trace.names.get(key._sym.uid, key.name.split(":")[0])
            feeds[key._sym.uid] = (key._sym, graph_mode.feed_array(value, key._sym.aval, name))
        return feeds

    def _device_values(self, trace: GraphTrace, values: list[Value], nodes: list[Any],
                       feeds: dict[int, tuple[Value, np.ndarray]], metadata: RunMetadata) -> dict[int, np.ndarray]:
        """Run the program that computes ``values`` and executes ``nodes``; the values by uid."""
        if not values and not nodes:
            return {}
        fed_values = {uid: v for uid, (v, _) in feeds.items()}
        key = (tuple(v.uid for v in values), tuple(id(n) for n in nodes), tuple(fed_values))
        plan = trace.plans.get(key)
        if plan is None:
            plan = trace.plans[key] = graph_mode.plan_run(trace, values, nodes, fed_values)
        arrays = plan.fed_arrays(trace, {uid: array for uid, (_, array) in feeds.items()})
        with metadata.timed(plan.device, plan.graph.name):
            outs = graph_mode.run_plan(plan, arrays)
        return {v.uid: o for v, o in zip(values, outs)}

    @staticmethod
    def _result(item: Any, values: dict[int, np.ndarray]) -> Any:
        if isinstance(item, Operation):
            if item.fetch is None:
                return None
            return item.fetch(*(Session._result(t, values) for t in item.fetch_inputs))
        if item._sym is None:
            return _as_fetched(item.numpy())
        return _as_fetched(values[item._sym.uid])

    # -- lifetime ------------------------------------------------------------------------------------
    def close(self) -> None:
        """Release the session (later runs raise)."""
        self._closed = True

    def as_default(self) -> Any:
        """Make this the default session inside the ``with`` block (``Tensor.eval()``, ``Operation.run()``)."""
        return graph_mode.session_default(self)

    def __enter__(self) -> Session:
        self._default = graph_mode.session_default(self)
        self._default.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._default is not None:
            self._default.__exit__(*exc)
            self._default = None
        self.close()

    def list_devices(self) -> list[str]:
        """The devices this session can place ops on."""
        ipus = range(len(devices.system().devices))
        return [devices.CPU, *(f"/job:localhost/replica:0/task:0/device:IPU:{k}" for k in ipus)]


class InteractiveSession(Session):
    """A session that makes itself the default session when created (for shells and notebooks)."""

    def __init__(self, target: str = "", graph: Any = None, config: Any = None) -> None:
        super().__init__(target, graph, config)
        self._default = graph_mode.session_default(self)
        self._default.__enter__()


def _as_fetched(array: np.ndarray) -> Any:
    """What TF1 returns for a fetched tensor: the array, or a NumPy scalar for a scalar."""
    array = np.asarray(array)
    return array[()] if array.ndim == 0 else array


def get_default_session() -> Session | None:
    """The session made default by the innermost ``with`` block, or None."""
    return graph_mode.default_session()
