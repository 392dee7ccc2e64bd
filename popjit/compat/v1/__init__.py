"""``tf.compat.v1``: TensorFlow 1's namespace.

The facade (``popjit.tensorflow.compat.v1``) adds every TF2 name as popjit.tensorflow's own object
(``tf.compat.v1.constant is tf.constant``). TF1's graph-and-session API is built on
:mod:`popjit.frontend.graph_mode`: ``disable_eager_execution``/``Graph().as_default()`` record ops
into a graph, ``Session.run`` compiles and runs the part of it that its fetches need
(:mod:`popjit.compat.v1.session`), ``get_variable``/``variable_scope`` name variables
(:mod:`popjit.compat.v1.variable_scope`) and ``tf.compat.v1.train`` has TF1's optimizers. The TF1
names popjit does not implement yet exist so that a program fails where it uses them, with an
``UnimplementedError`` that says so, rather than with an AttributeError; ``tf.compat.v1.logging``
drives the ``popjit`` logger.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

from popjit.compat.v1 import data, estimator, graph_ops, layers, logging, losses, metrics, summary, train
from popjit.compat.v1 import variable_scope as variable_scope_module
from popjit.compat.v1.config import ConfigProto, RunMetadata, RunOptions
from popjit.compat.v1.graph_ops import (
    add_to_collection,
    add_to_collections,
    assign,
    assign_add,
    assign_sub,
    control_dependencies,
    get_collection,
    get_collection_ref,
    global_variables,
    global_variables_initializer,
    gradients,
    group,
    initialize_all_variables,
    is_variable_initialized,
    local_variables,
    local_variables_initializer,
    model_variables,
    no_op,
    placeholder,
    report_uninitialized_variables,
    trainable_variables,
    variables_initializer,
)
from popjit.compat.v1.session import InteractiveSession, Session, get_default_session
from popjit.compat.v1.variable_scope import (
    Variable,
    VariableScope,
    constant_initializer,
    get_variable,
    get_variable_scope,
    glorot_normal_initializer,
    glorot_uniform_initializer,
    ones_initializer,
    random_normal_initializer,
    random_uniform_initializer,
    truncated_normal_initializer,
    variable_scope,
    variance_scaling_initializer,
    zeros_initializer,
)
from popjit.errors import UnimplementedAPIError, UnimplementedError
from popjit.frontend import graph_mode
from popjit.frontend.graph_mode import GraphFacade
from popjit.support import mark_stub, unimplemented_message


def graph_mode_message(name: str) -> str:
    """Why ``tf.compat.v1.<name>`` fails (the reason popjit/support.py's table gives)."""
    return unimplemented_message(f"tf.compat.v1.{name}")


def _raise_graph_mode(name: str) -> NoReturn:
    raise UnimplementedError(graph_mode_message(name))


def _graph_mode_function(name: str) -> Callable[..., NoReturn]:
    """A stand-in for a TF1 graph-mode function: calling it raises UnimplementedError."""

    def stub(*args: Any, **kwargs: Any) -> NoReturn:
        _raise_graph_mode(name)

    stub.__name__ = stub.__qualname__ = name
    stub.__doc__ = "TensorFlow 1 graph mode, not implemented by popjit yet: raises UnimplementedError."
    return mark_stub(f"tf.compat.v1.{name}")(stub)


def _graph_mode_class(name: str) -> type:
    """A stand-in for a TF1 graph-mode class: constructing it raises UnimplementedError."""

    def new(cls: type, *args: Any, **kwargs: Any) -> NoReturn:
        _raise_graph_mode(name)

    doc = "TensorFlow 1 graph mode, not implemented by popjit yet: constructing one raises UnimplementedError."
    return mark_stub(f"tf.compat.v1.{name}")(type(name, (), {"__new__": new, "__doc__": doc, "__module__": __name__}))


class _GraphModeNamespace:
    """A stand-in for a TF1 graph-mode namespace (``tf.compat.v1.train``): any name in it raises."""

    def __init__(self, name: str) -> None:
        self._name = name
        mark_stub(f"tf.compat.v1.{name}")(self)

    def __getattr__(self, attr: str) -> NoReturn:
        if attr.startswith("__"):
            raise AttributeError(attr)
        raise UnimplementedAPIError(graph_mode_message(f"{self._name}.{attr}"))

    def __repr__(self) -> str:
        return f"<tf.compat.v1.{self._name}: TensorFlow 1 graph mode, not implemented by popjit yet>"


GRAPH_MODE_FUNCTIONS = ("placeholder_with_default", "sparse_placeholder", "tables_initializer",
                        "get_local_variable", "make_template")
GRAPH_MODE_CLASSES = ("GraphOptions", "OptimizerOptions")
GRAPH_MODE_NAMESPACES = ("saved_model",)

for _name in GRAPH_MODE_FUNCTIONS:
    globals()[_name] = _graph_mode_function(_name)
for _name in GRAPH_MODE_CLASSES:
    globals()[_name] = _graph_mode_class(_name)
for _name in GRAPH_MODE_NAMESPACES:
    globals()[_name] = _GraphModeNamespace(_name)
del _name


def enable_eager_execution(config: Any = None, device_policy: Any = None, execution_mode: Any = None) -> None:
    """Run ops eagerly outside ``tf.function`` (the default; undoes ``disable_eager_execution``)."""
    graph_mode.enable_eager_execution()


def enable_v2_behavior() -> None:
    """TensorFlow 2 behaviour: eager execution (the default)."""
    graph_mode.enable_eager_execution()


def disable_eager_execution() -> None:
    """TF1 behaviour: ops outside ``tf.function`` build the default graph; ``Session.run`` runs it."""
    graph_mode.disable_eager_execution()


def disable_v2_behavior() -> None:
    """TF1 behaviour (graph mode, as :func:`disable_eager_execution`)."""
    graph_mode.disable_eager_execution()


def enable_resource_variables() -> None:
    """Nothing to do: popjit's variables are always resource variables."""


def resource_variables_enabled() -> bool:
    """Always True (see :func:`enable_resource_variables`)."""
    return True


def get_default_graph() -> GraphFacade:
    """The graph ops are recorded into (the innermost ``as_default`` one, else the process's default)."""
    return graph_mode.default_graph()


def reset_default_graph() -> None:
    """Replace the default graph by an empty one."""
    graph_mode.reset_default_graph()


Graph = GraphFacade
Operation = graph_mode.Operation
GraphKeys = graph_ops.GraphKeys
AUTO_REUSE = variable_scope_module.AUTO_REUSE
globals()["tuple"] = graph_ops.tuple_  # TensorFlow's name (a plain assignment would shadow the builtin here)

__all__ = [*GRAPH_MODE_FUNCTIONS, *GRAPH_MODE_CLASSES, *GRAPH_MODE_NAMESPACES, "AUTO_REUSE", "ConfigProto", "Graph",
           "GraphKeys", "InteractiveSession", "Operation", "RunMetadata", "RunOptions", "Session", "Variable",
           "VariableScope", "add_to_collection", "add_to_collections", "assign", "assign_add", "assign_sub",
           "constant_initializer", "control_dependencies", "data", "disable_eager_execution", "disable_v2_behavior",
           "enable_eager_execution", "enable_resource_variables", "enable_v2_behavior", "estimator", "get_collection",
           "get_collection_ref", "get_default_graph", "get_default_session", "get_variable", "get_variable_scope",
           "global_variables", "global_variables_initializer", "glorot_normal_initializer",
           "glorot_uniform_initializer", "gradients", "graph_mode_message", "group", "initialize_all_variables",
           "is_variable_initialized", "layers", "local_variables", "local_variables_initializer", "logging", "losses",
           "metrics", "model_variables", "no_op", "ones_initializer", "placeholder", "random_normal_initializer",
           "random_uniform_initializer", "report_uninitialized_variables", "reset_default_graph",
           "resource_variables_enabled", "summary", "train", "trainable_variables", "truncated_normal_initializer",
           "tuple", "variable_scope", "variables_initializer", "variance_scaling_initializer", "zeros_initializer"]
