"""``tf.compat.v1``: TensorFlow 1's namespace, as far as popjit goes today.

The facade (``popjit.tensorflow.compat.v1``) adds every TF2 name as popjit.tensorflow's own object
(``tf.compat.v1.constant is tf.constant``).
TF1's graph-and-session API (``Session``, ``placeholder``, ``disable_eager_execution``,
``tf.compat.v1.train`` optimizers, ...) is not implemented yet: those names exist so a program
fails where it uses them, with an ``UnimplementedError`` that says so, rather than with an
AttributeError. ``enable_eager_execution`` and ``enable_v2_behavior`` are no-ops (popjit is
always eager outside ``tf.function``), and ``tf.compat.v1.logging`` drives the ``popjit`` logger.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

from popjit.compat.v1 import logging
from popjit.errors import UnimplementedAPIError, UnimplementedError


def graph_mode_message(name: str) -> str:
    """Why ``tf.compat.v1.<name>`` fails: TF1 graph mode is not implemented yet."""
    return (f"tf.compat.v1.{name} belongs to TensorFlow 1's graph-and-session API, which popjit does not "
            "implement yet. popjit runs TF2-style programs: eager ops and tf.function, placed on the IPU "
            "with ipu.ipu_strategy.IPUStrategy().run(fn, args). Port this part of the program to that "
            "style, or open an issue if you need TF1 graph mode.")


def _raise_graph_mode(name: str) -> NoReturn:
    raise UnimplementedError(graph_mode_message(name))


def _graph_mode_function(name: str) -> Callable[..., NoReturn]:
    """A stand-in for a TF1 graph-mode function: calling it raises UnimplementedError."""

    def stub(*args: Any, **kwargs: Any) -> NoReturn:
        _raise_graph_mode(name)

    stub.__name__ = stub.__qualname__ = name
    stub.__doc__ = "TensorFlow 1 graph mode, not implemented by popjit yet: raises UnimplementedError."
    return stub


def _graph_mode_class(name: str) -> type:
    """A stand-in for a TF1 graph-mode class: constructing it raises UnimplementedError."""

    def new(cls: type, *args: Any, **kwargs: Any) -> NoReturn:
        _raise_graph_mode(name)

    doc = "TensorFlow 1 graph mode, not implemented by popjit yet: constructing one raises UnimplementedError."
    return type(name, (), {"__new__": new, "__doc__": doc, "__module__": __name__})


class _GraphModeNamespace:
    """A stand-in for a TF1 graph-mode namespace (``tf.compat.v1.train``): any name in it raises."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> NoReturn:
        if attr.startswith("__"):
            raise AttributeError(attr)
        raise UnimplementedAPIError(graph_mode_message(f"{self._name}.{attr}"))

    def __repr__(self) -> str:
        return f"<tf.compat.v1.{self._name}: TensorFlow 1 graph mode, not implemented by popjit yet>"


GRAPH_MODE_FUNCTIONS = (
    "disable_eager_execution", "disable_v2_behavior", "placeholder", "placeholder_with_default",
    "sparse_placeholder", "get_default_graph", "reset_default_graph", "get_default_session",
    "global_variables_initializer", "local_variables_initializer", "initialize_all_variables",
    "variables_initializer", "tables_initializer", "get_variable", "get_local_variable", "variable_scope",
    "get_variable_scope", "get_collection", "get_collection_ref", "add_to_collection", "global_variables",
    "local_variables", "trainable_variables", "model_variables", "make_template",
)
GRAPH_MODE_CLASSES = ("Session", "InteractiveSession", "ConfigProto", "RunOptions", "RunMetadata", "Graph",
                      "GraphOptions", "OptimizerOptions")
GRAPH_MODE_NAMESPACES = ("train", "layers", "saved_model", "summary")

for _name in GRAPH_MODE_FUNCTIONS:
    globals()[_name] = _graph_mode_function(_name)
for _name in GRAPH_MODE_CLASSES:
    globals()[_name] = _graph_mode_class(_name)
for _name in GRAPH_MODE_NAMESPACES:
    globals()[_name] = _GraphModeNamespace(_name)
del _name


def enable_eager_execution(config: Any = None, device_policy: Any = None, execution_mode: Any = None) -> None:
    """Nothing to do: popjit runs ops eagerly outside ``tf.function``, as TensorFlow 2 does."""


def enable_v2_behavior() -> None:
    """Nothing to do: popjit always behaves as TensorFlow 2."""


def enable_resource_variables() -> None:
    """Nothing to do: popjit's variables are always resource variables."""


def resource_variables_enabled() -> bool:
    """Always True (see :func:`enable_resource_variables`)."""
    return True


__all__ = [*GRAPH_MODE_FUNCTIONS, *GRAPH_MODE_CLASSES, *GRAPH_MODE_NAMESPACES, "enable_eager_execution",
           "enable_resource_variables", "enable_v2_behavior", "graph_mode_message", "logging",
           "resource_variables_enabled"]
