"""Looking Keras objects up by name or by ``{"class_name", "config"}`` dict (regularizers, constraints), and
the user's own objects: ``register_keras_serializable``, ``custom_object_scope``."""

from __future__ import annotations

from typing import Any


class ObjectRegistry:
    """The ``get`` / ``serialize`` / ``deserialize`` functions of one kind of Keras object."""

    def __init__(self, kind: str, by_name: dict[str, Any]) -> None:
        self.kind, self.by_name = kind, by_name

    def get(self, identifier: Any) -> Any:
        """An object from None, a name, a config dict or a callable (returned as it is)."""
        if identifier is None or callable(identifier):
            return identifier
        if isinstance(identifier, str) and identifier in self.by_name:
            return self.by_name[identifier]()
        if isinstance(identifier, dict) and identifier.get("class_name") in self.by_name:
            return self.by_name[identifier["class_name"]](**identifier.get("config", {}))
        raise ValueError(f"Could not interpret {self.kind} identifier: {identifier}")

    def serialize(self, obj: Any) -> Any:
        """``{"class_name", "config"}`` of an object (None stays None)."""
        if obj is None:
            return None
        return {"class_name": type(obj).__name__, "config": obj.get_config()}

    def deserialize(self, config: Any, custom_objects: dict[str, Any] | None = None) -> Any:
        """The inverse of :meth:`serialize` (``custom_objects`` names the user's own classes)."""
        name = config.get("class_name") if isinstance(config, dict) else config if isinstance(config, str) else None
        custom = get_registered_object(name, custom_objects) if name is not None else None
        if custom is not None:
            return custom.from_config(config.get("config", {})) if isinstance(config, dict) else custom()
        return self.get(config)


# -- the user's own classes and functions, by name -----------------------------------------------------------
_REGISTERED: dict[str, Any] = {}  # "package>name" -> object (register_keras_serializable)
_REGISTERED_NAMES: dict[Any, str] = {}  # object -> "package>name"
_SCOPES: list[dict[str, Any]] = []  # custom_object_scope, innermost last


def register_keras_serializable(package: str = "Custom", name: str | None = None) -> Any:
    """``tf.keras.utils.register_keras_serializable``: a decorator making a class or function findable by
    ``'<package>>name'`` when a model config is read (``load_model``, ``from_config``)."""

    def decorator(obj: Any) -> Any:
        key = f"{package}>{name or obj.__name__}"
        if isinstance(obj, type) and not hasattr(obj, "get_config"):
            raise ValueError("Cannot register a class that does not have a get_config() method.")
        if key in _REGISTERED:
            raise ValueError(f"{key} has already been registered to {_REGISTERED[key]}")
        if obj in _REGISTERED_NAMES:
            raise ValueError(f"{obj} has already been registered to {_REGISTERED_NAMES[obj]}")
        _REGISTERED[key] = obj
        _REGISTERED_NAMES[obj] = key
        return obj

    return decorator


def get_registered_name(obj: Any) -> str:
    """The name a config records for ``obj``: its registered ``'package>name'``, else its ``__name__``."""
    return _REGISTERED_NAMES.get(obj, getattr(obj, "__name__", str(obj)))


def config_class_name(obj: Any) -> str:
    """The ``class_name`` a config records for ``obj``: ``Functional`` for ``Model(inputs, outputs)`` (as Keras
    writes it), a registered class's ``'package>name'``, else the class's name."""
    if type(obj).__name__ == "Model" and getattr(obj, "_is_graph_network", False):
        return "Functional"
    return get_registered_name(type(obj))


def get_registered_object(name: str, custom_objects: dict[str, Any] | None = None,
                          module_objects: dict[str, Any] | None = None) -> Any:
    """The object called ``name``: from an open :func:`custom_object_scope`, ``custom_objects``, the registry
    (by ``'package>name'`` or by the bare name of a registered object), else ``module_objects``; None if none."""
    for table in (*reversed(_SCOPES), custom_objects or {}):
        if name in table:
            return table[name]
    if name in _REGISTERED:
        return _REGISTERED[name]
    bare = [obj for key, obj in _REGISTERED.items() if key.split(">", 1)[1] == name]
    if len(bare) == 1:
        return bare[0]
    return (module_objects or {}).get(name)


def get_custom_objects() -> dict[str, Any]:
    """``tf.keras.utils.get_custom_objects``: the registered objects by name (a live dict: adding to it
    registers an object under that name)."""
    return _REGISTERED


class custom_object_scope:  # noqa: N801 (Keras's name)
    """``with tf.keras.utils.custom_object_scope({...}):`` makes the user's objects findable by name while
    configs are read inside the block."""

    def __init__(self, *args: dict[str, Any] | None) -> None:
        self.objects: dict[str, Any] = {}
        for arg in args:
            self.objects.update(arg or {})

    def __enter__(self) -> custom_object_scope:
        _SCOPES.append(self.objects)
        return self

    def __exit__(self, *exc: Any) -> None:
        _SCOPES.remove(self.objects)


CustomObjectScope = custom_object_scope
