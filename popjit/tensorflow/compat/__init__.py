"""``tf.compat``: ``tf.compat.v1`` (TensorFlow 1 names) and ``tf.compat.v2`` (this TF2 namespace),
plus the small string and shape helpers TensorFlow keeps here."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from popjit.errors import missing_api
from popjit.tensorflow.compat import v1  # noqa: F401


def as_bytes(bytes_or_text: bytes | bytearray | str, encoding: str = "utf-8") -> bytes:
    """``bytes_or_text`` as bytes (text is encoded with ``encoding``)."""
    if isinstance(bytes_or_text, bytearray):
        return bytes(bytes_or_text)
    if isinstance(bytes_or_text, bytes):
        return bytes_or_text
    if isinstance(bytes_or_text, str):
        return bytes_or_text.encode(encoding)
    raise TypeError(f"Expected binary or unicode string, got {bytes_or_text!r}")


def as_text(bytes_or_text: bytes | bytearray | str, encoding: str = "utf-8") -> str:
    """``bytes_or_text`` as str (bytes are decoded with ``encoding``)."""
    if isinstance(bytes_or_text, str):
        return bytes_or_text
    if isinstance(bytes_or_text, bytes | bytearray):
        return bytes(bytes_or_text).decode(encoding)
    raise TypeError(f"Expected binary or unicode string, got {bytes_or_text!r}")


as_str = as_text


def dimension_value(dimension: Any) -> int | None:
    """The int of a shape dimension (an int, None, or an object with ``.value``)."""
    return getattr(dimension, "value", dimension)


def __getattr__(name: str) -> ModuleType:
    if name == "v2":  # TensorFlow 2's API is popjit.tensorflow itself (imported lazily: it imports us)
        return importlib.import_module("popjit.tensorflow")
    if name.startswith("__"):
        raise AttributeError(name)
    raise missing_api("tf.compat", name)
