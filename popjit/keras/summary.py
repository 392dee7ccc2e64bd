"""``model.summary()``: the table of layers, output shapes and parameter counts Keras prints."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np


def _count(weights: list[Any]) -> int:
    return int(sum(int(np.prod(w.shape.as_list())) for w in weights))


def _shape_text(layer: Any) -> str:
    shape = layer._output_shape
    if shape is None or len(layer._inbound_nodes) > 1:
        return "multiple"
    return str(as_python_shape(shape))


def as_python_shape(shape: Any) -> Any:
    """A shape (or nest of shapes) as plain tuples and lists, as Keras prints them."""
    if isinstance(shape, list):
        return [as_python_shape(s) for s in shape]
    if isinstance(shape, dict):
        return {k: as_python_shape(v) for k, v in shape.items()}
    if isinstance(shape, tuple) and shape and not all(d is None or isinstance(d, int) for d in shape):
        return tuple(as_python_shape(s) for s in shape)
    return tuple(shape)


def _row(fields: list[str], positions: list[int]) -> str:
    line = ""
    for i, text in enumerate(fields):
        if i > 0:
            line = line[:-1] + " "
        line += str(text)
        line = line[: positions[i]]
        line += " " * (positions[i] - len(line))
    return line


def _param_count(layer: Any) -> Any:
    try:
        return layer.count_params()
    except ValueError:
        return 0


def summary_lines(model: Any, line_length: int | None = None, positions: list[float] | None = None) -> list[str]:
    """The lines of the summary of ``model`` (a built Keras model)."""
    layers = model.layers
    sequential_like = getattr(model, "_is_sequential_like", lambda: True)()
    if sequential_like:
        line_length = line_length or 65
        fractions = positions or [0.45, 0.85, 1.0]
        header = ["Layer (type)", "Output Shape", "Param #"]
    else:
        line_length = line_length or 98
        fractions = positions or [0.33, 0.55, 0.67, 1.0]
        header = ["Layer (type)", "Output Shape", "Param #", "Connected to"]
    cols = [int(line_length * p) if p <= 1 else int(p) for p in fractions]
    lines = [f'Model: "{model.name}"', "_" * line_length, _row(header, cols), "=" * line_length]
    for i, layer in enumerate(layers):
        name = f"{layer.name} ({type(layer).__name__})"
        fields = [name, _shape_text(layer), str(_param_count(layer))]
        if sequential_like:
            lines.append(_row(fields, cols))
        else:
            inbound = [n for node in layer._inbound_nodes if node in getattr(model, "_nodes", [])
                       for n in node.input_names()]
            lines.append(_row(fields + [inbound[0] if inbound else ""], cols))
            for extra in inbound[1:]:
                lines.append(_row(["", "", "", extra], cols))
        lines.append(("=" if i == len(layers) - 1 else "_") * line_length)
    if not layers:
        lines.append("=" * line_length)
    trainable = _count(model.trainable_weights)
    non_trainable = _count(model.non_trainable_weights)
    lines += [f"Total params: {trainable + non_trainable:,}", f"Trainable params: {trainable:,}",
              f"Non-trainable params: {non_trainable:,}", "_" * line_length]
    return lines


def print_summary(model: Any, line_length: int | None = None, positions: list[float] | None = None,
                  print_fn: Callable[[str], Any] | None = None) -> None:
    """Print the summary of ``model`` line by line with ``print_fn`` (``print`` by default)."""
    emit = print_fn or print
    for line in summary_lines(model, line_length, positions):
        emit(line)
