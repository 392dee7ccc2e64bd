"""``tf.keras.utils.model_to_dot`` and ``plot_model``: a model's layer graph as a pydot graph, drawn by
Graphviz, as Keras does. Both are optional: without pydot, or without Graphviz's ``dot`` program for
an image, they raise Keras's ImportError; a ``.dot`` / ``.gv`` file is written from pydot alone."""

from __future__ import annotations

import itertools
import os
from typing import Any

from popjit.keras.summary import as_python_shape

_NEEDS = ("You must install pydot (`pip install pydot`) and install graphviz (see instructions at "
          "https://graphviz.gitlab.io/download/) for plot_model/model_to_dot to work.")
_SOURCE_FORMATS = ("dot", "gv")


def _pydot() -> Any:
    try:
        import pydot  # why: optional, as in Keras; only these two functions need it
    except ImportError as exc:
        raise ImportError(_NEEDS) from exc
    return pydot


def _shape_text(shape: Any) -> str:
    return "?" if shape is None else str(as_python_shape(shape)).replace("None", "?")


def _label(layer: Any, inputs: list[Any], show_shapes: bool, show_dtype: bool, show_layer_names: bool) -> str:
    """Keras's record label: name and class, then the input and output shapes (``inputs``: the shapes
    feeding the layer; none for an input layer, whose input is its output)."""
    kind = type(layer).__name__
    label = f"{layer.name}: {kind}" if show_layer_names else kind
    if show_dtype:
        label = f"{label}|{layer.dtype}"
    if show_shapes:
        out_text = _shape_text(layer._output_shape)
        in_text = _shape_text(inputs[0] if len(inputs) == 1 else inputs) if inputs else out_text
        label = f"{{{label}}}|{{input:|output:}}|{{{{{in_text}}}|{{{out_text}}}}}"
    return label


def _edges(model: Any) -> list[tuple[Any, Any]]:
    """(from layer, to layer) for every connection between the model's layers."""
    nodes = getattr(model, "_nodes", None)
    if getattr(model, "_is_graph_network", False) and nodes:
        return [(kt._keras_history[0], node.layer) for node in nodes for kt in node.keras_inputs]
    layers = model.layers
    return list(itertools.pairwise(layers))


def model_to_dot(model: Any, show_shapes: bool = False, show_dtype: bool = False, show_layer_names: bool = True,
                 rankdir: str = "TB", expand_nested: bool = False, dpi: int = 96, subgraph: bool = False) -> Any:
    """The model's layers and their connections as a ``pydot.Dot`` graph (one record node per layer)."""
    if expand_nested or subgraph:
        raise NotImplementedError("model_to_dot(expand_nested=True) is not implemented by popjit; plot the nested "
                                  "models one by one.")
    pydot = _pydot()
    dot = pydot.Dot()
    dot.set("rankdir", rankdir)
    dot.set("concentrate", True)
    dot.set("dpi", dpi)
    dot.set_node_defaults(shape="record")
    edges = _edges(model)
    layers = model.layers
    first_inputs = [] if getattr(model, "_is_graph_network", False) else [getattr(model, "_build_input_shape", None)]
    for i, layer in enumerate(layers):
        inputs = [src._output_shape for src, dst in edges if dst is layer] or (first_inputs if i == 0 else [])
        label = _label(layer, [s for s in inputs if s is not None], show_shapes, show_dtype, show_layer_names)
        dot.add_node(pydot.Node(str(id(layer)), label=label))
    for src, dst in edges:
        dot.add_edge(pydot.Edge(str(id(src)), str(id(dst))))
    return dot


def plot_model(model: Any, to_file: str = "model.png", show_shapes: bool = False, show_dtype: bool = False,
               show_layer_names: bool = True, rankdir: str = "TB", expand_nested: bool = False, dpi: int = 96) -> Any:
    """Draw the model's layer graph into ``to_file``; its extension picks the format (``.png`` without
    one). ``.dot``/``.gv`` write Graphviz source, other formats need Graphviz's ``dot`` program.
    Returns an ``IPython.display.Image`` of a ``.png``/``.jpg`` where IPython is installed."""
    dot = model_to_dot(model, show_shapes, show_dtype, show_layer_names, rankdir, expand_nested, dpi)
    extension = os.path.splitext(to_file)[1][1:] or "png"
    if extension in _SOURCE_FORMATS:
        dot.write(to_file, format="raw")
        return None
    try:
        dot.write(to_file, format=extension)
    except (FileNotFoundError, OSError) as exc:  # pydot runs `dot`; it is not installed
        raise ImportError(_NEEDS) from exc
    if extension in ("png", "jpg", "jpeg"):
        try:
            from IPython import display  # why: optional, as in Keras
        except ImportError:
            return None
        return display.Image(filename=to_file)
    return None
