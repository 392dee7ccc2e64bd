"""Keras weight files: ``model.save_weights`` / ``model.load_weights`` in HDF5 (h5py).

Two layouts, chosen by the file name as Keras chooses them:

- ``*.h5`` / ``*.hdf5``: Keras 2's layout, the one Graphcore's SDK (TensorFlow 2.6) writes. The file's
  ``layer_names`` attribute lists the model's layers; each layer's group lists its ``weight_names``
  (trainable weights, then the others) and holds one dataset per weight. Loading matches the
  layers that have weights by position (or by name with ``by_name=True``). A whole-model ``.h5``
  file (weights under ``model_weights``) loads the same way. Stock Keras 3 reads these files.
- ``*.weights.h5``: Keras 3's layout (``layers/<key>/vars/<i>``, where a layer's key is its class
  in snake case numbered in layer order, ``dense``, ``dense_1``...; nested layers under the
  attribute that holds them, such as ``cell`` or ``forward_layer``), readable and writable by
  stock Keras 3.

Any other name would be TensorFlow's checkpoint format, which popjit does not write or read.

Whole models (``model.save("m.h5")``, :func:`popjit.keras.models.load_model`) use Keras 2's HDF5
file: the model's config as JSON (``model_config``), its training config when it is compiled with
a loss and metrics given by name, and the weights under ``model_weights`` in the layout above.
Stock Keras 3 loads these files. Only Sequential models have a config (``get_config``) so far.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np

from popjit.errors import UnimplementedError
from popjit.keras import backend, optimizers

KERAS_VERSION = "2.6.0"  # the Keras of Graphcore's SDK 3.x, recorded in the files popjit writes


def _h5py() -> Any:
    # why: h5py is needed only when a weight file is read or written
    import h5py

    return h5py


def _layout(filepath: str) -> str:
    name = os.fspath(filepath)
    if name.endswith(".weights.h5"):
        return "keras3"
    if name.endswith((".h5", ".hdf5")):
        return "keras2"
    raise UnimplementedError(
        f"save_weights/load_weights('{name}'): without an .h5 suffix Keras uses TensorFlow's checkpoint "
        "format, which popjit does not implement. Use a file name ending in '.h5' (Keras 2's HDF5 layout, as "
        "Graphcore's SDK writes) or '.weights.h5' (Keras 3's).")


def _values(weights: list[Any]) -> list[np.ndarray]:
    return [np.asarray(w.numpy()) for w in weights]


# -- Keras 2 (.h5) -------------------------------------------------------------------------------------------
def _write_names(group: Any, name: str, values: list[str]) -> None:
    group.attrs[name] = np.array([v.encode("utf8") for v in values], dtype="S") if values else np.zeros(0, "S1")


def _read_names(group: Any, name: str) -> list[str]:
    """A list attribute, also when Keras split it into ``name0``, ``name1``... (large models)."""
    if name in group.attrs:
        chunks = [group.attrs[name]]
    else:
        chunks, k = [], 0
        while f"{name}{k}" in group.attrs:
            chunks.append(group.attrs[f"{name}{k}"])
            k += 1
    return [n.decode("utf8") if isinstance(n, bytes) else str(n) for chunk in chunks for n in chunk]


def _save_keras2(model: Any, f: Any) -> None:
    layers = model.layers
    _write_names(f, "layer_names", [layer.name for layer in layers])
    f.attrs["backend"] = b"tensorflow"
    f.attrs["keras_version"] = KERAS_VERSION.encode("utf8")
    for layer in sorted(layers, key=lambda item: item.name):
        group = f.create_group(layer.name)
        weights = layer.weights
        names = [w.name for w in weights]
        _write_names(group, "weight_names", names)
        for name, value in zip(names, _values(weights)):
            group.create_dataset(name, data=value)


def _load_keras2(model: Any, f: Any, by_name: bool, skip_mismatch: bool) -> None:
    if "layer_names" not in f.attrs and "model_weights" in f:
        f = f["model_weights"]
    saved = [(name, _read_names(f[name], "weight_names")) for name in _read_names(f, "layer_names")]
    saved = [(name, [np.asarray(f[name][w]) for w in weights]) for name, weights in saved if weights]
    layers = [layer for layer in model.layers if layer.weights]
    if by_name:
        _assign_by_name(layers, saved, skip_mismatch)
        return
    if len(saved) != len(layers):
        raise ValueError(f"Layer count mismatch when loading weights from file. Model expected {len(layers)} "
                         f"layers, found {len(saved)} saved layers.")
    for k, (layer, (name, values)) in enumerate(zip(layers, saved)):
        _assign(layer, values, f"layer #{k} (named {layer.name} in the current model, {name} in the save file)")


def _assign_by_name(layers: list[Any], saved: list[tuple[str, list[np.ndarray]]], skip_mismatch: bool) -> None:
    by_name = dict(saved)
    for layer in layers:
        values = by_name.get(layer.name)
        if values is None:
            continue
        if skip_mismatch and (len(values) != len(layer.weights) or any(
                tuple(w.shape) != v.shape for w, v in zip(layer.weights, values))):
            continue
        _assign(layer, values, f"layer named {layer.name}")


def _assign(layer: Any, values: list[np.ndarray], what: str) -> None:
    weights = layer.weights
    if len(values) != len(weights):
        raise ValueError(f"Weight count mismatch for {what}. Layer expects {len(weights)} weight(s). Received "
                         f"{len(values)} saved weight(s)")
    for w, v in zip(weights, values):
        if tuple(w.shape) != v.shape:
            raise ValueError(f"Shape mismatch in {what}: weight {w.name} has shape {tuple(w.shape)}, the saved "
                             f"weight has shape {v.shape}.")
    for w, v in zip(weights, values):
        w.assign(v.astype(w.dtype.as_numpy_dtype, copy=False))


# -- Keras 3 (.weights.h5) -----------------------------------------------------------------------------------
#: Layers whose nested layers Keras 3 files under these attribute names, in popjit's weight order.
_NESTED = {
    "Bidirectional": ("forward_layer", "backward_layer"),
    "MultiHeadAttention": ("query_dense", "key_dense", "value_dense", "output_dense"),
}


def _own(layer: Any) -> list[Any]:
    return list(layer._trainable_weights) + list(layer._non_trainable_weights)


def keras3_keys(layers: list[Any]) -> list[str]:
    """Keras 3 files a list of layers by class, not by name: ``dense``, ``dense_1``, ... in list order."""
    seen: dict[str, int] = {}
    keys = []
    for layer in layers:
        base = backend.to_snake_case(type(layer).__name__)
        count = seen.get(base, 0)
        seen[base] = count + 1
        keys.append(base if count == 0 else f"{base}_{count}")
    return keys


def keras3_entries(layer: Any) -> Iterator[tuple[str, Any]]:
    """``(path under the layer's group, variable)`` for every weight of ``layer``, as Keras 3 files them."""
    if hasattr(layer, "layers") and hasattr(layer, "_is_graph_network"):  # a model used as a layer
        for key, sub in zip(keras3_keys(layer.layers), layer.layers):
            for path, var in keras3_entries(sub):
                yield f"layers/{key}/{path}", var
    cls = type(layer).__name__
    if cls in _NESTED:
        for attr in _NESTED[cls]:
            sub = getattr(layer, attr, None) or getattr(layer, f"_{attr}")
            for path, var in keras3_entries(sub):
                yield f"{attr}/{path}", var
    elif getattr(layer, "cell", None) is not None and hasattr(layer.cell, "weights"):
        for path, var in keras3_entries(layer.cell):
            yield f"cell/{path}", var
    for k, var in enumerate(_own(layer)):
        yield f"vars/{k}", var


def _save_keras3(model: Any, f: Any) -> None:
    f.attrs["keras_version"] = "3.0.0"  # the layout's version, not popjit's Keras API (2.6)
    f.create_group("vars").attrs["name"] = model.name
    for key, layer in zip(keras3_keys(model.layers), model.layers):
        group = f.require_group(f"layers/{key}")
        group.require_group("vars").attrs["name"] = layer.name
        for path, var in keras3_entries(layer):
            group.create_dataset(path, data=np.asarray(var.numpy()))


def _load_keras3(model: Any, f: Any, skip_mismatch: bool) -> None:
    for key, layer in zip(keras3_keys(model.layers), model.layers):
        entries = list(keras3_entries(layer))
        if not entries:
            continue
        prefix = f"layers/{key}"
        missing = [path for path, _ in entries if f"{prefix}/{path}" not in f]
        if missing:
            if skip_mismatch:
                continue
            raise ValueError(f"Layer '{layer.name}' expects {len(entries)} variables, but the weights file has "
                             f"no '{prefix}/{missing[0]}'.")
        values = [np.asarray(f[f"{prefix}/{path}"]) for path, _ in entries]
        for (path, var), value in zip(entries, values):
            if tuple(var.shape) != value.shape:
                if skip_mismatch:
                    break
                raise ValueError(f"The shape of the target variable {var.name} and the shape of the saved "
                                 f"'{prefix}/{path}' do not match: {tuple(var.shape)} vs {value.shape}")
        else:
            for (_, var), value in zip(entries, values):
                var.assign(value.astype(var.dtype.as_numpy_dtype, copy=False))


# -- entry points --------------------------------------------------------------------------------------------
def save_weights(model: Any, filepath: Any, overwrite: bool = True, save_format: str | None = None,
                 options: Any = None) -> None:
    """``Model.save_weights``: see the module docstring for the layouts."""
    if save_format not in (None, "h5", "keras"):
        raise UnimplementedError(f"save_weights(save_format={save_format!r}): popjit writes HDF5 only ('h5').")
    layout = _layout(filepath)
    if not overwrite and os.path.exists(filepath):
        raise FileExistsError(f"{filepath} exists and overwrite=False")
    h5py = _h5py()
    with h5py.File(filepath, "w") as f:
        (_save_keras3 if layout == "keras3" else _save_keras2)(model, f)


def load_weights(model: Any, filepath: Any, by_name: bool = False, skip_mismatch: bool = False,
                 options: Any = None) -> None:
    """``Model.load_weights``: see the module docstring for the layouts."""
    if skip_mismatch and not by_name and _layout(filepath) == "keras2":
        raise ValueError("When calling model.load_weights, skip_mismatch can only be set to True when by_name "
                         "is True.")
    if not os.path.exists(filepath):
        raise FileNotFoundError(f"Unable to open file (file '{filepath}' does not exist)")
    layout = _layout(filepath)
    h5py = _h5py()
    with h5py.File(filepath, "r") as f:
        if layout == "keras3" or ("layers" in f and "layer_names" not in f.attrs and "model_weights" not in f):
            _load_keras3(model, f, skip_mismatch)
        else:
            _load_keras2(model, f, by_name, skip_mismatch)


# -- whole models (Keras 2's .h5) ----------------------------------------------------------------------------
def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic | np.ndarray):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} in a model config cannot be written as JSON")


def _by_name(value: Any) -> bool:
    """A loss or metrics argument made of names only (what a JSON training config can hold)."""
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list | tuple) else [value]
    return all(item is None or isinstance(item, str) for item in items)


def _training_config(model: Any) -> dict[str, Any] | None:
    """Keras 2's ``training_config`` when the loss and metrics are names (None otherwise)."""
    container = getattr(model, "compiled_metrics", None)
    metrics = container.user_metrics if container is not None else None
    loss = getattr(model, "loss", None)
    if getattr(model, "optimizer", None) is None or not (_by_name(loss) and _by_name(metrics)):
        return None
    return {"loss": loss, "metrics": metrics, "weighted_metrics": None, "loss_weights": None,
            "optimizer_config": optimizers.serialize(model.optimizer)}


def save_model(model: Any, filepath: Any, overwrite: bool = True, include_optimizer: bool = True,
               save_format: str | None = None, signatures: Any = None, options: Any = None,
               save_traces: bool = True) -> None:
    """``Model.save``: Keras 2's whole-model HDF5 file (see the module docstring)."""
    name = os.fspath(filepath)
    if save_format not in (None, "h5") or not name.endswith((".h5", ".hdf5")):
        raise UnimplementedError(
            f"model.save('{name}'): popjit saves whole models in Keras 2's HDF5 format only (a file name ending in "
            "'.h5'); TensorFlow's SavedModel and Keras 3's '.keras' formats are not implemented.")
    try:
        config = model.get_config()
    except NotImplementedError as e:
        raise UnimplementedError(f"model.save of a {type(model).__name__} model needs its config, which popjit has "
                                 "for Sequential models only; save its weights with model.save_weights.") from e
    if not overwrite and os.path.exists(name):
        raise FileExistsError(f"{name} exists and overwrite=False")
    training = _training_config(model) if include_optimizer else None
    if include_optimizer and training is None and getattr(model, "optimizer", None) is not None:
        warnings.warn("The model's loss or metrics are not given by name, so its training configuration is not "
                      "saved: it loads uncompiled.", stacklevel=3)
    with _h5py().File(name, "w") as f:
        f.attrs["model_config"] = json.dumps({"class_name": type(model).__name__, "config": config},
                                             default=_json_default)
        f.attrs["keras_version"] = KERAS_VERSION
        f.attrs["backend"] = "tensorflow"
        if training is not None:
            f.attrs["training_config"] = json.dumps(training, default=_json_default)
        _save_keras2(model, f.create_group("model_weights"))


def read_model_file(filepath: Any) -> tuple[dict[str, Any], dict[str, Any] | None, Any]:
    """``(model config, training config or None, a function loading the weights into a model)``."""
    name = os.fspath(filepath)
    if not name.endswith((".h5", ".hdf5")):
        raise UnimplementedError(
            f"load_model('{name}'): popjit reads Keras 2's whole-model HDF5 files only (ending in '.h5'); "
            "TensorFlow's SavedModel and Keras 3's '.keras' formats are not implemented.")
    if not os.path.exists(name):
        raise OSError(f"No file or directory found at {name}")
    with _h5py().File(name, "r") as f:
        if "model_config" not in f.attrs:
            raise ValueError(f"No model config found in the file at {name}: it holds weights only; build the "
                             "model and call model.load_weights.")
        config = json.loads(f.attrs["model_config"])
        training = json.loads(f.attrs["training_config"]) if "training_config" in f.attrs else None

    def load_into(model: Any) -> None:
        with _h5py().File(name, "r") as f:
            _load_keras2(model, f["model_weights"], by_name=False, skip_mismatch=False)

    return config, training, load_into
