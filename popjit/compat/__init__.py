"""``tf.compat``'s own helpers (strings and shape dimensions) and TensorFlow 1's names in :mod:`popjit.compat.v1`.

The facade (``popjit.tensorflow.compat``) adds ``tf.compat.v2``, which is ``popjit.tensorflow`` itself."""

from __future__ import annotations

from typing import Any

from popjit.compat import v1  # noqa: F401

__all__ = ["as_bytes", "as_str", "as_text", "dimension_value"]


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
