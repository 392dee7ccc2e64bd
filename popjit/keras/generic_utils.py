"""Looking Keras objects up by name or by ``{"class_name", "config"}`` dict (regularizers, constraints)."""

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
        if isinstance(config, dict) and custom_objects and config.get("class_name") in custom_objects:
            return custom_objects[config["class_name"]].from_config(config.get("config", {}))
        return self.get(config)
