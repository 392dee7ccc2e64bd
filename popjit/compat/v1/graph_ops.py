"""TF1's graph-building functions: placeholders, operations, control dependencies, gradients,
assignments, initializers and collections (:mod:`popjit.frontend.graph_mode` records them)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from popjit import dtypes
from popjit.errors import UnimplementedError
from popjit.frontend import graph_mode, nest
from popjit.frontend.graph_mode import GraphTrace, Operation
from popjit.frontend.name_scope import scoped
from popjit.frontend.tensor import Tensor, TensorShape
from popjit.frontend.variables import Variable
from popjit.ir.graph import Aval
from popjit.source import where


class GraphKeys:
    """Names of the standard graph collections."""

    GLOBAL_VARIABLES = "variables"
    TRAINABLE_VARIABLES = "trainable_variables"
    LOCAL_VARIABLES = "local_variables"
    MODEL_VARIABLES = "model_variables"
    GLOBAL_STEP = "global_step"
    UPDATE_OPS = "update_ops"
    LOSSES = "losses"
    REGULARIZATION_LOSSES = "regularization_losses"
    SUMMARIES = "summaries"
    TRAIN_OP = "train_op"
    VARIABLES = GLOBAL_VARIABLES


def _graph(api: str) -> GraphTrace:
    """The graph being built (switching to graph mode if ops ran eagerly until now)."""
    graph_mode.tf1_entry(f"tf.compat.v1.{api}")
    trace = graph_mode.current_graph_trace()
    if trace is None:
        raise RuntimeError(f"tf.{api}() is not compatible with eager execution. Call "
                           "tf.compat.v1.disable_eager_execution() first, or build the graph inside "
                           "`with tf.compat.v1.Graph().as_default():`.")
    return trace


def placeholder(dtype: Any, shape: Any = None, name: str | None = None) -> Tensor:
    """A tensor whose value each ``Session.run`` takes from its ``feed_dict``. popjit compiles
    programs for static shapes (as XLA does on the IPU), so every dimension must be given."""
    trace = _graph("placeholder")
    dims = TensorShape(shape)
    if dims.rank is None or not dims.is_fully_defined():
        raise UnimplementedError(
            f"tf.compat.v1.placeholder(shape={shape!r}): popjit compiles programs for static shapes, as XLA does "
            f"on the IPU, so a placeholder needs every dimension (e.g. the batch size){where()}. Give the full "
            "shape, and feed batches of that size (drop the last partial batch).")
    name = scoped(name if name is not None else f"Placeholder_{len(trace.names)}" if trace.names else "Placeholder")
    return trace.add_placeholder(Aval(tuple(dims.as_list()), dtypes.as_dtype(dtype)), name)


def no_op(name: str | None = None) -> Operation:
    """An operation that does nothing (but runs its control dependencies)."""
    trace = _graph("no_op")
    return Operation(trace, name or "NoOp", inputs=[d for level in trace.control_stack for d in level])


def group(*inputs: Any, name: str | None = None) -> Operation:
    """An operation that runs all of ``inputs`` (tensors and operations, possibly nested in lists)."""
    trace = _graph("group")
    return Operation(trace, name or "group_deps", inputs=nest.flatten(list(inputs)))


def tuple_(tensors: Sequence[Any], name: str | None = None, control_inputs: Any = None) -> list[Any]:
    """``tf.tuple``: the tensors, each of which runs all of them (and ``control_inputs``)."""
    # why: identity is an op of the TF2 namespace, built above this module's peers
    from popjit.frontend.array_ops import identity

    deps = [*tensors, *(control_inputs or [])]
    with control_dependencies(deps):
        return [identity(t) if isinstance(t, Tensor) else t for t in tensors]


@contextlib.contextmanager
def control_dependencies(control_inputs: Sequence[Any] | None) -> Iterator[None]:
    """Ops built inside also run ``control_inputs`` (operations or tensors); None clears the enclosing ones."""
    trace = graph_mode.current_graph_trace()
    if trace is None:  # eager or in a tf.function: ops run in program order anyway, as TensorFlow 2's are
        yield
        return
    with trace.control_dependencies(control_inputs):
        yield


def gradients(ys: Any, xs: Any, grad_ys: Any = None, name: str = "gradients", colocate_gradients_with_ops: bool = False,
              gate_gradients: bool = False, aggregation_method: Any = None, stop_gradients: Any = None,
              unconnected_gradients: str = "none") -> list[Any]:
    """The symbolic derivatives of ``sum(ys)`` with respect to each of ``xs`` (None where unconnected)."""
    if stop_gradients is not None:
        raise UnimplementedError("tf.gradients(stop_gradients=...) is not supported by popjit yet; use "
                                 f"tf.stop_gradient on those tensors instead{where()}.")
    trace = _graph("gradients")
    sources = nest.flatten(xs)
    for s in sources:
        if isinstance(s, Tensor):
            trace.tape.watch(s)
    with trace.tape.stop_recording():
        grads = trace.tape._gradient(ys, sources, grad_ys, str(unconnected_gradients).lower())
    return list(grads)


def assign(ref: Variable, value: Any, validate_shape: Any = None, use_locking: Any = None,
           name: str | None = None) -> Any:
    """Assign ``value`` to the variable ``ref``; evaluating the result does the assignment."""
    return ref.assign(value)


def assign_add(ref: Variable, value: Any, use_locking: Any = None, name: str | None = None) -> Any:
    """Add ``value`` to the variable ``ref``."""
    return ref.assign_add(value)


def assign_sub(ref: Variable, value: Any, use_locking: Any = None, name: str | None = None) -> Any:
    """Subtract ``value`` from the variable ``ref``."""
    return ref.assign_sub(value)


# -- variables and collections -----------------------------------------------------------------------
def global_variables(scope: str | None = None) -> list[Variable]:
    """The variables of the default graph."""
    return get_collection(GraphKeys.GLOBAL_VARIABLES, scope)


def trainable_variables(scope: str | None = None) -> list[Variable]:
    """The trainable variables of the default graph."""
    return get_collection(GraphKeys.TRAINABLE_VARIABLES, scope)


def local_variables(scope: str | None = None) -> list[Variable]:
    """The local variables of the default graph (popjit makes none)."""
    return get_collection(GraphKeys.LOCAL_VARIABLES, scope)


def model_variables(scope: str | None = None) -> list[Variable]:
    return get_collection(GraphKeys.MODEL_VARIABLES, scope)


def get_collection(key: str, scope: str | None = None) -> list[Any]:
    """The items of the default graph's collection ``key``."""
    return graph_mode.default_graph().get_collection(key, scope)


def get_collection_ref(key: str) -> list[Any]:
    return graph_mode.default_graph().get_collection_ref(key)


def add_to_collection(name: str, value: Any) -> None:
    graph_mode.default_graph().add_to_collection(name, value)


def add_to_collections(names: Sequence[str], value: Any) -> None:
    for name in names:
        add_to_collection(name, value)


def variables_initializer(var_list: Sequence[Variable], name: str = "init") -> Operation:
    """An operation giving each of ``var_list`` its initial value."""
    return _graph("variables_initializer").initializer(var_list, name)


def global_variables_initializer() -> Operation:
    """An operation giving every variable of the graph its initial value."""
    trace = _graph("global_variables_initializer")
    return trace.initializer(trace.collection(GraphKeys.GLOBAL_VARIABLES))


def local_variables_initializer() -> Operation:
    """An operation initializing the local variables (popjit makes none, so it does nothing)."""
    trace = _graph("local_variables_initializer")
    return trace.initializer(trace.collection(GraphKeys.LOCAL_VARIABLES), "init_1")


def initialize_all_variables() -> Operation:
    """The old name of :func:`global_variables_initializer`."""
    return global_variables_initializer()


def is_variable_initialized(variable: Variable) -> bool:
    return bool(variable._initialized)


def report_uninitialized_variables(var_list: Sequence[Variable] | None = None) -> list[str]:
    """The names of the variables not initialized yet."""
    chosen = global_variables() if var_list is None else var_list
    return [v._name for v in chosen if not v._initialized]
