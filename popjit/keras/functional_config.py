"""The config of a functional model: its layers, the calls that connect them, its inputs and outputs.

``graph_config`` writes Keras 2's schema (what TensorFlow 2.6's ``Model.get_config`` returns and Graphcore's
SDK stores in ``.h5`` files): each layer's ``{"class_name", "config", "name", "inbound_nodes"}``, where a
node is the list of the call's input tensors, each ``[layer name, node index, tensor index, kwargs]``
(tensors among the keyword arguments as ``[layer name, node index, tensor index]``), and
``input_layers`` / ``output_layers`` as lists of such triples. ``rebuild_graph`` reads it, and Keras 3's
nodes too (``{"args": [...], "kwargs": {...}}`` with ``__keras_tensor__`` entries), calling each layer
once its inputs exist, as Keras does (a layer shared at several depths is called in several passes).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from popjit.frontend import api as tf
from popjit.keras import layers as layers_mod
from popjit.keras.keras_tensor import KerasTensor

Ref = list[Any]  # [layer name, node index, tensor index]


def _node_indices(model: Any) -> dict[int, int]:
    """A kept node's index among its layer's nodes that belong to ``model`` (by ``id`` of the node)."""
    own = {id(node) for node in model._nodes}
    out: dict[int, int] = {}
    for layer in model._layer_list:
        kept = 0
        for node in layer._inbound_nodes:
            if id(node) in own:
                out[id(node)] = kept
                kept += 1
    return out


def graph_config(model: Any, keras3: bool = False) -> dict[str, Any]:
    """Keras 2's config of a functional ``model`` (see the module docstring); with ``keras3``, its nodes in
    Keras 3's form (the layers' own configs stay Keras 2's: :mod:`popjit.keras.keras3_schema` converts them)."""
    indices = _node_indices(model)

    def ref(kt: KerasTensor) -> Ref:
        layer, node_index, tensor_index = kt._keras_history  # type: ignore[misc]
        return [layer.name, indices[id(layer._inbound_nodes[node_index])], tensor_index]

    own = {id(node) for node in model._nodes}
    layer_configs = []
    for layer in model._layer_list:
        entry = layers_mod.serialize(layer)
        entry["name"] = layer.name
        write = _keras3_node if keras3 else _node_data
        entry["inbound_nodes"] = [write(node, ref) for node in layer._inbound_nodes
                                  if id(node) in own and node.keras_inputs]
        layer_configs.append(entry)
    return {"name": model.name, "trainable": model.trainable, "layers": layer_configs,
            "input_layers": [ref(x) for x in model.inputs], "output_layers": [ref(x) for x in model.outputs]}


def _node_data(node: Any, ref: Callable[[KerasTensor], Ref]) -> list[Any]:
    """Keras 2's node: the call's extra positional arguments become keywords, as Keras 2 writes them."""
    names = node.layer._call_spec.extra_positionals
    if len(node.args) > len(names):
        raise ValueError(f"Layer {node.layer.name} was called with positional arguments its config cannot name: "
                         f"{node.args}")
    kwargs = {**dict(zip(names, node.args)), **node.kwargs}
    kwargs = tf.nest.map_structure(lambda x: ref(x) if isinstance(x, KerasTensor) else x, kwargs)
    return [ref(x) + [kwargs] for x in tf.nest.flatten(node.inputs) if isinstance(x, KerasTensor)]


def _keras3_node(node: Any, ref: Callable[[KerasTensor], Ref]) -> dict[str, Any]:
    """Keras 3's node: ``{"args": [inputs, *args], "kwargs": {...}}`` with each tensor as ``__keras_tensor__``."""

    def tensor(x: Any) -> Any:
        if not isinstance(x, KerasTensor):
            return x
        return {"class_name": "__keras_tensor__", "config": {"shape": list(x.shape.as_list()),
                                                             "dtype": x.dtype.name, "keras_history": ref(x)}}

    args = tf.nest.map_structure(tensor, [node.inputs, *node.args])
    return {"args": _lists(args), "kwargs": _lists(tf.nest.map_structure(tensor, node.kwargs))}


def _lists(value: Any) -> Any:
    """Tuples as lists (JSON's only sequence), dicts kept."""
    if isinstance(value, tuple | list):
        return [_lists(v) for v in value]
    if isinstance(value, dict) and value.get("class_name") != "__keras_tensor__":
        return {k: _lists(v) for k, v in value.items()}
    return value


class _Pending(Exception):
    """A node whose input tensors do not exist yet."""


def rebuild_graph(config: dict[str, Any], custom_objects: dict[str, Any] | None = None) -> tuple[Any, Any]:
    """``(inputs, outputs)`` of the functional model ``config`` describes (Keras 2's or Keras 3's nodes),
    with its layers created and called."""
    created: dict[str, Any] = {}
    pending: dict[str, list[Any]] = {}
    for layer_config in config["layers"]:
        layer = layers_mod.deserialize(layer_config, custom_objects)
        created[layer_config["name"]] = layer
        pending[layer_config["name"]] = list(layer_config.get("inbound_nodes", []))
    while any(pending.values()):
        progressed = False
        for name, nodes in pending.items():
            while nodes:
                try:
                    args, kwargs = _call_arguments(nodes[0], created)
                except _Pending:
                    break
                created[name](*args, **_known_or_set(created[name], kwargs))
                nodes.pop(0)
                progressed = True
        if not progressed:
            raise ValueError("Invalid Functional model configuration. The graph of the Functional model either has "
                             "loops or disconnected nodes. The following nodes failed to be resolved: "
                             f"{ {k: v for k, v in pending.items() if v} }")

    def tensors(refs: Any) -> Any:
        if _is_ref(refs):
            return _tensor(refs, created)
        return [tensors(r) for r in refs]

    return _single(tensors(config["input_layers"])), _single(tensors(config["output_layers"]))


def _known_or_set(layer: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The call's keyword arguments without those the layer's ``call`` lacks and Keras 3 records as None
    (``mask=None``: no mask)."""
    params = inspect.signature(layer.call).parameters
    if any(p.kind == p.VAR_KEYWORD for p in params.values()):
        return kwargs
    return {k: v for k, v in kwargs.items() if k in params or v is not None}


def _single(value: Any) -> Any:
    return value[0] if isinstance(value, list) and len(value) == 1 else value


def _is_ref(value: Any) -> bool:
    return (isinstance(value, list) and len(value) in (3, 4) and isinstance(value[0], str)
            and isinstance(value[1], int) and isinstance(value[2], int))


def _tensor(ref: Ref, created: dict[str, Any]) -> KerasTensor:
    name, node_index, tensor_index = ref[:3]
    if name not in created:
        raise ValueError(f"Invalid Functional model configuration. Missing node: {name}")
    layer = created[name]
    if node_index >= len(layer._inbound_nodes):
        raise _Pending(name)
    return tf.nest.flatten(layer._inbound_nodes[node_index].outputs)[tensor_index]


def _call_arguments(node_data: Any, created: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """``(args, kwargs)`` of one recorded call (raises :class:`_Pending` while an input is missing)."""
    if isinstance(node_data, dict):  # Keras 3: {"args": [...], "kwargs": {...}}
        revive = _reviver(created)
        return revive(node_data.get("args", [])), revive(node_data.get("kwargs", {}))
    inputs = [_tensor(entry, created) for entry in node_data]
    kwargs = node_data[0][3] if node_data and len(node_data[0]) == 4 else {}
    kwargs = {k: _tensor(v, created) if _is_ref(v) else v for k, v in kwargs.items()}
    return [_single(inputs)], kwargs


def _reviver(created: dict[str, Any]) -> Callable[[Any], Any]:
    def revive(value: Any) -> Any:
        if isinstance(value, dict) and value.get("class_name") == "__keras_tensor__":
            return _tensor(value["config"]["keras_history"], created)
        if isinstance(value, dict):
            return {k: revive(v) for k, v in value.items()}
        if isinstance(value, list):
            return [revive(v) for v in value]
        return value

    return revive
