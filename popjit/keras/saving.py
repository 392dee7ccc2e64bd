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

- any other name (or ``save_format="tf"``): TensorFlow's checkpoint (:mod:`popjit.train`), the model as the
  root object (``layer_with_weights-0/kernel/.ATTRIBUTES/VARIABLE_VALUE``...), with the directory's
  ``checkpoint`` file naming it, as Keras 2 writes it.

Whole models (``model.save``, :func:`popjit.keras.models.load_model`), written atomically:

- ``*.h5``: Keras 2's HDF5 file: the model's config as JSON (``model_config``), its training config when it
  is compiled with a loss and metrics given by name, the weights under ``model_weights`` in the layout
  above and the optimizer's under ``optimizer_weights``;
- ``*.keras``: Keras 3's zip: ``config.json`` (the model in Keras 3's schema, :mod:`keras3_schema`, with
  its ``compile_config`` and ``build_config``), ``metadata.json`` and ``model.weights.h5`` (Keras 3's
  weights layout, the optimizer's state under ``optimizer/vars`` in Keras 3's order).

Both are read from popjit and from stock Keras 3 (whose ``.h5`` configs are Keras 3's schema).
"""

from __future__ import annotations

import io
import json
import os
import time
import warnings
import zipfile
from collections.abc import Iterator
from typing import Any

import numpy as np

from popjit.errors import UnimplementedError
from popjit.keras import backend, generic_utils, keras3_schema, optimizers
from popjit.train import checkpoint
from popjit.train import tensor_bundle as tb

KERAS_VERSION = "2.6.0"  # the Keras of Graphcore's SDK 3.x, recorded in the files popjit writes
KERAS3_LAYOUT = "3.0.0"  # the version of Keras 3's layouts (.weights.h5, .keras) popjit writes


def _h5py() -> Any:
    # why: h5py is needed only when a weight file is read or written
    import h5py

    return h5py


def _layout(filepath: str, save_format: str | None = None) -> str:
    name = os.fspath(filepath)
    if save_format == "tf":
        return "tf"
    if name.endswith(".weights.h5"):
        return "keras3"
    if name.endswith((".h5", ".hdf5")) or save_format == "h5":
        return "keras2"
    return "tf"


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
    f.attrs["keras_version"] = KERAS3_LAYOUT  # the layout's version, not popjit's Keras API (2.6)
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
    if save_format not in (None, "h5", "keras", "tf"):
        raise ValueError(f"Unknown format. Received: `save_format`={save_format}. Was expecting one of "
                         "{'tf', 'h5'}.")
    name = os.fspath(filepath)
    layout = _layout(name, save_format)
    exists = os.path.exists(name + tb.INDEX_SUFFIX if layout == "tf" else name)
    if not overwrite and exists:
        raise FileExistsError(f"{name} exists and overwrite=False")
    if layout == "tf":
        checkpoint.write_objects(model, name)
        checkpoint.write_state(os.path.dirname(os.path.abspath(name)), name, [name], [time.time()])
        return
    h5py = _h5py()
    _write_atomically(name, lambda tmp: _write_h5_weights(model, tmp, h5py, layout))


def _write_h5_weights(model: Any, path: str, h5py: Any, layout: str) -> None:
    with h5py.File(path, "w") as f:
        (_save_keras3 if layout == "keras3" else _save_keras2)(model, f)


def load_weights(model: Any, filepath: Any, by_name: bool = False, skip_mismatch: bool = False,
                 options: Any = None) -> Any:
    """``Model.load_weights``: see the module docstring for the layouts. A TensorFlow checkpoint returns its
    load status (``assert_consumed()``, ``expect_partial()``), as Keras does."""
    name = os.fspath(filepath)
    layout = _layout(name)
    if layout == "tf":
        if by_name:
            raise NotImplementedError("Weights may only be loaded based on topology into Models when loading "
                                      "TensorFlow-formatted weights (got by_name=True to load_weights).")
        if os.path.isdir(name):
            name = checkpoint.latest_checkpoint(name) or name
        return checkpoint.restore_objects(model, name)
    if skip_mismatch and not by_name and layout == "keras2":
        raise ValueError("When calling model.load_weights, skip_mismatch can only be set to True when by_name "
                         "is True.")
    if not os.path.exists(name):
        raise FileNotFoundError(f"Unable to open file (file '{name}' does not exist)")
    h5py = _h5py()
    with h5py.File(name, "r") as f:
        if layout == "keras3" or ("layers" in f and "layer_names" not in f.attrs and "model_weights" not in f):
            _load_keras3(model, f, skip_mismatch)
        else:
            _load_keras2(model, f, by_name, skip_mismatch)
    return None


# -- optimizer state ------------------------------------------------------------------------------------------
#: Keras 3 creates an optimizer's slots in these groups, each interleaved over the variables (popjit's names).
_KERAS3_SLOT_GROUPS = {
    "SGD": [["momentum"]], "Adam": [["m", "v"], ["vhat"]], "RMSprop": [["rms"], ["momentum"], ["mg"]],
    "Adagrad": [["accumulator"]], "Adadelta": [["accum_grad", "accum_var"]], "Adamax": [["m", "v"]],
    "Ftrl": [["accumulator", "linear"]],
}


def built_optimizer(model: Any) -> Any:
    """The compiled optimizer with its slots created for the model's trainable variables (None if none)."""
    optimizer = getattr(model, "optimizer", None)
    if optimizer is None:
        return None
    optimizer._create_all_weights(model.trainable_variables)
    return optimizer


def keras3_optimizer_variables(optimizer: Any, variables: list[Any]) -> list[Any]:
    """The optimizer's variables in Keras 3's order: the step, the learning rate (unless it is a schedule), then
    the slots as Keras 3 creates them."""
    groups = _KERAS3_SLOT_GROUPS.get(type(optimizer).__name__)
    if groups is None:
        raise UnimplementedError(f"popjit does not know the order in which Keras 3 keeps the state of a "
                                 f"{type(optimizer).__name__} optimizer.")
    out = [optimizer.iterations]
    learning_rate = optimizer._hyper.get("learning_rate")
    if learning_rate is not None and hasattr(learning_rate, "assign"):
        out.append(learning_rate)
    for group in groups:
        for var in variables:
            slots = optimizer._slots.get(id(var), {})
            out += [slots[name] for name in group if name in slots]
    return out


def _assign_all(variables: list[Any], values: list[np.ndarray], what: str) -> None:
    """Assign every value or none (a count or shape mismatch leaves the variables as they were)."""
    if len(values) != len(variables) or any(tuple(v.shape) != np.shape(x) for v, x in zip(variables, values)):
        raise ValueError(f"{what}: the file holds {len(values)} values of shapes {[np.shape(x) for x in values]}, "
                         f"the model has {len(variables)} of shapes {[tuple(v.shape) for v in variables]}.")
    for var, value in zip(variables, values):
        var.assign(np.asarray(value).astype(var.dtype.as_numpy_dtype, copy=False))


# -- whole models: configs ------------------------------------------------------------------------------------
def json_default(value: Any) -> Any:
    """JSON for the NumPy values a config may hold (``json.dumps(default=...)``)."""
    if isinstance(value, np.generic | np.ndarray):
        return value.tolist()
    if isinstance(value, tuple):
        return list(value)
    raise TypeError(f"{type(value).__name__} in a model config cannot be written as JSON")


def model_json(model: Any) -> dict[str, Any]:
    """``Model.to_json``'s dict: the class, its config, the Keras version and backend."""
    return {"class_name": generic_utils.config_class_name(model), "config": model.get_config(),
            "keras_version": KERAS_VERSION, "backend": "tensorflow"}


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
            "steps_per_execution": getattr(model, "_steps_per_execution", 1),
            "optimizer_config": optimizers.serialize(model.optimizer)}


def _model_config(model: Any, h5: bool) -> dict[str, Any]:
    if h5 and not getattr(model, "_is_graph_network", False) and type(model).__name__ != "Sequential" and \
            "Sequential" not in [c.__name__ for c in type(model).__mro__]:
        raise NotImplementedError(
            "Saving the model to HDF5 format requires the model to be a Functional model or a Sequential model. It "
            "does not work for subclassed models, because such models are defined via the body of a Python method, "
            "which isn't safely serializable. Consider saving to the Keras format ('.keras', with get_config and "
            "from_config defined) or using `save_weights`.")
    return {"class_name": generic_utils.config_class_name(model), "config": model.get_config()}


def _model_format(name: str, save_format: str | None) -> str:
    if save_format in ("h5", "keras"):
        return save_format
    if save_format is None and name.endswith((".h5", ".hdf5")):
        return "h5"
    if save_format is None and name.endswith(".keras"):
        return "keras"
    raise UnimplementedError(
        f"model.save('{name}'{'' if save_format is None else f', save_format={save_format!r}'}): TensorFlow's "
        "SavedModel format is not implemented by popjit. Use a file name ending in '.h5' (Keras 2's HDF5 format, as "
        "Graphcore's SDK writes) or '.keras' (Keras 3's format); tf.train.Checkpoint saves the variables alone.")


def atomic_path(path: str) -> str:
    """A temporary name beside ``path`` to write to before :func:`os.replace` moves it into place."""
    return os.path.join(os.path.dirname(os.path.abspath(path)), f".{os.path.basename(path)}.tmp{os.getpid()}")


def _write_atomically(path: str, write: Any) -> None:
    tmp = atomic_path(path)
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def save_model(model: Any, filepath: Any, overwrite: bool = True, include_optimizer: bool = True,
               save_format: str | None = None, signatures: Any = None, options: Any = None,
               save_traces: bool = True) -> None:
    """``Model.save``: Keras 2's whole-model HDF5 file (``.h5``) or Keras 3's zip (``.keras``), written atomically."""
    name = os.fspath(filepath)
    fmt = _model_format(name, save_format)
    config = _model_config(model, fmt == "h5")
    if not overwrite and os.path.exists(name):
        raise FileExistsError(f"{name} exists and overwrite=False")
    training = _training_config(model) if include_optimizer else None
    if include_optimizer and training is None and getattr(model, "optimizer", None) is not None:
        warnings.warn("The model's loss or metrics are not given by name, so its training configuration is not "
                      "saved: it loads uncompiled.", stacklevel=3)
    optimizer = built_optimizer(model) if training is not None else None
    if fmt == "h5":
        _write_atomically(name, lambda tmp: _save_h5(model, tmp, config, training, optimizer))
    else:
        _write_atomically(name, lambda tmp: _save_keras_zip(model, tmp, config, training, optimizer))


def _save_h5(model: Any, path: str, config: dict[str, Any], training: dict[str, Any] | None, optimizer: Any) -> None:
    with _h5py().File(path, "w") as f:
        f.attrs["model_config"] = json.dumps(config, default=json_default)
        f.attrs["keras_version"] = KERAS_VERSION
        f.attrs["backend"] = "tensorflow"
        if training is not None:
            f.attrs["training_config"] = json.dumps(training, default=json_default)
        _save_keras2(model, f.create_group("model_weights"))
        if optimizer is not None:
            group = f.create_group("optimizer_weights")
            weights = optimizer.weights
            _write_names(group, "weight_names", [w.name for w in weights])
            for w, value in zip(weights, _values(weights)):
                group.create_dataset(w.name, data=value)


def _compile_config_keras3(training: dict[str, Any]) -> dict[str, Any]:
    return {"optimizer": keras3_schema.object_to_keras3(training["optimizer_config"], "keras.optimizers"),
            "loss": training["loss"], "loss_weights": training.get("loss_weights"), "metrics": training["metrics"],
            "weighted_metrics": training.get("weighted_metrics"), "run_eagerly": False,
            "steps_per_execution": training.get("steps_per_execution", 1), "jit_compile": False}


def _keras3_model_config(model: Any, config: dict[str, Any], training: dict[str, Any] | None) -> dict[str, Any]:
    """The ``config.json`` of a ``.keras`` file: the model in Keras 3's schema, its input shape and compile
    arguments."""
    inner = config["config"]
    if getattr(model, "_is_graph_network", False):
        # why: functional_config is built on the layers that import this module
        from popjit.keras import functional_config

        inner = {**inner, **functional_config.graph_config(model, keras3=True)}
    entry = keras3_schema.layer_to_keras3({"class_name": config["class_name"], "config": inner})
    shape = model._build_input_shape
    entry["build_config"] = {"input_shape": None if getattr(model, "_is_graph_network", False) or shape is None
                             else list(shape)}
    if training is not None:
        entry["compile_config"] = _compile_config_keras3(training)
    return entry


def _save_keras_zip(model: Any, path: str, config: dict[str, Any], training: dict[str, Any] | None,
                    optimizer: Any) -> None:
    weights = atomic_path(path) + ".weights.h5"
    try:
        with _h5py().File(weights, "w") as f:
            _save_keras3(model, f)
            if optimizer is not None:
                group = f.create_group("optimizer")
                group.create_group("vars").attrs["name"] = optimizer._name
                for k, var in enumerate(keras3_optimizer_variables(optimizer, model.trainable_variables)):
                    group.create_dataset(f"vars/{k}", data=np.asarray(var.numpy()))
        metadata = {"keras_version": KERAS3_LAYOUT, "date_saved": time.strftime("%Y-%m-%d@%H:%M:%S")}
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("metadata.json", json.dumps(metadata))
            z.writestr("config.json", json.dumps(_keras3_model_config(model, config, training),
                                                 default=json_default))
            z.write(weights, "model.weights.h5")
    finally:
        if os.path.exists(weights):
            os.remove(weights)


# -- whole models: reading -----------------------------------------------------------------------------------
class ModelFile:
    """A whole-model file read: the model's config and training config in Keras 2's schema, the input shape
    to build a subclassed model with, and how to load its weights and optimizer state into the model."""

    def __init__(self, filepath: Any) -> None:
        self.name = os.fspath(filepath)
        if not os.path.exists(self.name):
            raise OSError(f"No file or directory found at {self.name}")
        self.format = "keras" if zipfile.is_zipfile(self.name) else "h5"
        if self.format == "h5" and not self.name.endswith((".h5", ".hdf5")):
            raise UnimplementedError(
                f"load_model('{self.name}'): popjit reads Keras 2's HDF5 files ('.h5') and Keras 3's '.keras' files; "
                "TensorFlow's SavedModel format is not implemented.")
        self.build_shape: Any = None
        (self._read_keras if self.format == "keras" else self._read_h5)()

    def _read_h5(self) -> None:
        with _h5py().File(self.name, "r") as f:
            if "model_config" not in f.attrs:
                raise ValueError(f"No model config found in the file at {self.name}: it holds weights only; build "
                                 "the model and call model.load_weights.")
            self.config = keras3_schema.from_keras3(json.loads(f.attrs["model_config"]))
            raw = json.loads(f.attrs["training_config"]) if "training_config" in f.attrs else None
            self.training = keras3_schema.from_keras3(raw) if raw is not None else None
            version = f.attrs.get("keras_version", f["model_weights"].attrs.get("keras_version", ""))
            self.keras3 = str(version.decode() if isinstance(version, bytes) else version).startswith("3")

    def _read_keras(self) -> None:
        with zipfile.ZipFile(self.name) as z:
            raw = json.loads(z.read("config.json"))
        self.keras3 = True
        self.build_shape = (raw.get("build_config") or {}).get("input_shape")
        compiled = raw.get("compile_config")
        self.config = keras3_schema.from_keras3(raw)
        self.training = None
        if compiled is not None and compiled.get("optimizer") is not None:
            compiled = keras3_schema.from_keras3(compiled)
            self.training = {**compiled, "optimizer_config": compiled["optimizer"]}

    def load_weights(self, model: Any) -> None:
        """The model's weights from the file."""
        if self.format == "h5":
            with _h5py().File(self.name, "r") as f:
                _load_keras2(model, f["model_weights"], by_name=False, skip_mismatch=False)
            return
        with self._keras_weights() as f:
            _load_keras3(model, f, skip_mismatch=False)

    def load_optimizer(self, model: Any) -> bool:
        """The compiled model's optimizer state from the file; False if the file has none."""
        if self.format == "h5":
            with _h5py().File(self.name, "r") as f:
                if "optimizer_weights" not in f:
                    return False
                group = f["optimizer_weights"]
                values = [np.asarray(group[n]) for n in _read_names(group, "weight_names")]
        else:
            with self._keras_weights() as f:
                if "optimizer/vars" not in f:
                    return False
                group = f["optimizer/vars"]
                values = [np.asarray(group[str(k)]) for k in range(len(group))]
        optimizer = built_optimizer(model)
        variables = keras3_optimizer_variables(optimizer, model.trainable_variables) if self.keras3 else \
            optimizer.weights
        if self.keras3 and len(values) == len(variables) - sum(len(s) for s in optimizer._slots.values()):
            variables = variables[:len(values)]  # saved before its first step: Keras 3 had no slots yet
        _assign_all(variables, values, f"The optimizer state in {self.name}")
        return True

    def _keras_weights(self) -> Any:
        data = zipfile.ZipFile(self.name).read("model.weights.h5")
        return _h5py().File(io.BytesIO(data), "r")
