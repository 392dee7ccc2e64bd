"""Keras 3's config schema, read and written beside Keras 2's (popjit's own, TensorFlow 2.6's).

Keras 3 wraps every object as ``{"module", "class_name", "config", "registered_name"}`` (a user's
registered class keeps its bare name in ``class_name`` and ``'package>Name'`` in ``registered_name``),
writes a layer's dtype as a ``DTypePolicy`` object, an ``InputLayer``'s shape as ``batch_shape``, and
adds constructor arguments Keras 2 does not have (``quantization_config``, ``lora_rank``, an
initializer's ``input_axes``...). :func:`from_keras3` turns such a config into Keras 2's: an argument
popjit's class does not take is dropped when it holds Keras 3's default (None, False, or the default of
:data:`KERAS3_DEFAULTS`), which means Keras 2's behaviour; any other value is kept, so the constructor
refuses it by name. :func:`to_keras3` writes Keras 2's configs in Keras 3's schema for ``.keras`` files.
"""

from __future__ import annotations

import inspect
from typing import Any

from popjit.keras import (
    base_layer,
    constraints,
    generic_utils,
    initializers,
    layer_registry,
    losses,
    metrics,
    optimizers,
    regularizers,
    schedules,
)

#: Keras 3 arguments popjit's classes lack whose Keras 3 default is neither None nor False.
KERAS3_DEFAULTS: dict[str, Any] = {"ema_momentum": 0.99}

#: Arguments that act on masks only: popjit refuses masks, so without one they change nothing (dropped).
MASK_ONLY = frozenset({"zero_output_for_mask"})

#: Keras 2 arguments Keras 3's classes lack, left out of ``.keras`` files when they hold these defaults.
KERAS2_DEFAULTS: dict[str, Any] = {"time_major": False, "decay": 0.0}

#: Where Keras 3 files built-in objects, by the key suffix of the argument holding them.
_MODULES = (("_initializer", "keras.initializers"), ("_regularizer", "keras.regularizers"),
            ("_constraint", "keras.constraints"))

_KIND_MODULES = (initializers, regularizers, constraints, optimizers, schedules, losses, metrics)


def _find_class(name: str) -> Any:
    """popjit's class (or the user's registered one) called ``name`` in any Keras namespace; None if none."""
    found = generic_utils.get_registered_object(name) or layer_registry.LAYERS.get(name)
    if found is None and name in ("Functional", "Model", "Sequential"):
        # why: models is built on this module's users (importing it at the top would be circular)
        from popjit.keras import models

        found = getattr(models, name if name != "Functional" else "Model")
    for module in _KIND_MODULES:
        if found is None:
            found = getattr(module, name, None)
    return found if isinstance(found, type) else None


def _accepted(cls: type) -> set[str]:
    """The keyword arguments ``cls`` takes (through ``**kwargs`` up its bases)."""
    names: set[str] = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        params = inspect.signature(init).parameters.values()
        names |= {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
        if not any(p.kind == p.VAR_KEYWORD for p in params):
            break
    return names


def _drop_keras3_defaults(cls: Any, config: dict[str, Any]) -> dict[str, Any]:
    if cls is None or not isinstance(config, dict):
        return config
    names = _accepted(cls)
    if issubclass(cls, base_layer.Layer):
        names |= base_layer._LAYER_KWARGS
    return {k: v for k, v in config.items() if k not in MASK_ONLY and (k in names or not _is_default(k, v))}


def _is_default(key: str, value: Any) -> bool:
    """Whether a Keras 3 argument popjit lacks holds the value that means Keras 2's behaviour."""
    return value is None or value is False or KERAS3_DEFAULTS.get(key, object()) == value


def is_keras3(config: Any) -> bool:
    """Whether a serialized object is in Keras 3's schema (it names its module)."""
    return isinstance(config, dict) and "module" in config and "class_name" in config


def from_keras3(value: Any) -> Any:
    """Keras 2's schema of a Keras 3 config (a nest of serialized objects); Keras 2 configs pass unchanged."""
    if isinstance(value, list):
        return [from_keras3(v) for v in value]
    if not isinstance(value, dict):
        return value
    if value.get("class_name") in ("DTypePolicy", "DTypePolicyMap", "FloatDTypePolicy") and "config" in value:
        return value["config"]["name"]
    if value.get("class_name") == "__keras_tensor__":
        return value
    if "class_name" in value and "config" in value:
        registered = value.get("registered_name")
        name = registered if isinstance(registered, str) and ">" in registered else value["class_name"]
        inner = from_keras3(value["config"])
        if isinstance(inner, dict) and name == "InputLayer" and "batch_shape" in inner:
            inner["batch_input_shape"] = inner.pop("batch_shape")
        out = {"class_name": name, "config": _drop_keras3_defaults(_find_class(name), inner)}
        for key in ("name", "inbound_nodes"):
            if key in value:
                out[key] = from_keras3(value[key])
        return out
    return {k: from_keras3(v) for k, v in value.items() if k not in ("shared_object_id", "build_config")}


def _wrap(class_name: str, config: Any, module: str) -> dict[str, Any]:
    obj = _find_class(class_name)
    registered = generic_utils.get_registered_name(obj) if obj is not None else None
    if registered is not None and ">" in registered:
        return {"module": obj.__module__, "class_name": registered.split(">", 1)[1], "config": config,
                "registered_name": registered}
    return {"module": module, "class_name": class_name, "config": config, "registered_name": None}


def _policy(dtype: Any) -> Any:
    if not isinstance(dtype, str):
        return dtype
    return {"module": "keras", "class_name": "DTypePolicy", "config": {"name": dtype}, "registered_name": None}


def _object_to_keras3(value: Any, module: str) -> Any:
    if isinstance(value, dict) and "class_name" in value and "config" in value and "module" not in value:
        return _wrap(value["class_name"], _config_to_keras3(value["config"]), module)
    return value


def _config_to_keras3(config: Any) -> Any:
    """A layer's (or another object's) constructor arguments with their nested objects in Keras 3's schema."""
    if not isinstance(config, dict):
        return config
    out: dict[str, Any] = {}
    for key, value in config.items():
        if key in KERAS2_DEFAULTS and KERAS2_DEFAULTS[key] == value:
            continue
        module = next((m for suffix, m in _MODULES if key.endswith(suffix)), "keras.layers")
        if key == "dtype":
            value = _policy(value)
        elif key == "layers" and isinstance(value, list):
            value = [layer_to_keras3(v) for v in value]
        else:
            value = _object_to_keras3(value, module)
        out[key] = value
    return out


def layer_to_keras3(entry: dict[str, Any]) -> dict[str, Any]:
    """One serialized layer (a functional model's entry keeps its ``name`` and ``inbound_nodes``)."""
    config = _config_to_keras3(entry["config"])
    if entry["class_name"] == "InputLayer" and "batch_input_shape" in config:
        config["batch_shape"] = config.pop("batch_input_shape")
        config["dtype"] = entry["config"].get("dtype")
    module = {"Functional": "keras.src.models.functional", "Sequential": "keras"}.get(entry["class_name"],
                                                                                       "keras.layers")
    out = _wrap(entry["class_name"], config, module)
    if entry["class_name"] == "Functional":
        out["registered_name"] = "Functional"
    for key in ("name", "inbound_nodes"):
        if key in entry:
            out[key] = entry[key]
    return out


def object_to_keras3(value: Any, module: str) -> Any:
    """A serialized optimizer, loss or metric (or a name, kept) in Keras 3's schema."""
    return _object_to_keras3(value, module)
