"""Graphcore's IPU ops (``ipu.rand_ops``, ``ipu.nn_ops``, ``ipu.embedding_ops``, ``ipu.math_ops``), as
compositions of TensorFlow ops with Graphcore's arguments, checks and error texts.

``dropout`` is Poprand's: a user ``seed`` (two integers) gives a reproducible stream that still
draws a new mask on every call and every execution of a compiled program, as the IPU advances its
seed by the execution counter. ``embedding_lookup`` and ``serialized_matmul`` with a
``serialization_factor`` really split the work into that many smaller lookups or products, as the
IPU does to save memory, so the schedule sees the pieces; the numbers are those of one lookup or
product.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from popjit.frontend import array_ops, gather_ops, math_ops, nn_ops, random_ops
from popjit.frontend.array_ops import static_value
from popjit.frontend.convert import convert_to_tensor
from popjit.frontend.tensor import Tensor

__all__ = ["dropout", "embedding_lookup", "gelu", "hard_sigmoid", "serialized_matmul", "swish"]

#: Mixed into the seed's second word so that each ``seed_modifier`` gives its own stream.
_MODIFIER_MIX = 0x9E3779B9


# -- ipu.rand_ops -------------------------------------------------------------------------------------------
def dropout(x: Any, seed: Any = None, rate: float = 0.5, seed_modifier: int = 1, noise_shape: Any = None,
            name: str | None = None) -> Tensor:
    """``ipu.rand_ops.dropout``: zero each element with probability ``rate`` and scale the kept ones by
    ``1 / (1 - rate)``. ``seed`` is two integers (a reproducible stream, advanced by every call and
    execution) or None (TensorFlow's seeding); ``noise_shape`` shares one decision over the axes where
    it is 1."""
    x = convert_to_tensor(x)
    if rate >= 1.0 or rate < 0.0:
        raise ValueError(f"The rate must be in the range [0, 1), but was {rate}")
    mask_shape = _noise_shape(x, noise_shape)
    if seed is None:
        keep = random_ops.uniform(mask_shape, dtype=x.dtype) >= rate
    else:
        keep = random_ops.keyed_uniform(mask_shape, _seed_key(seed, seed_modifier), x.dtype) >= rate
    return x * (1.0 / (1.0 - rate)) * math_ops.cast(keep, x.dtype)


def _noise_shape(x: Tensor, noise_shape: Any) -> list[int]:
    """The mask's shape: ``x``'s, or ``noise_shape`` after Graphcore's checks."""
    x_shape = x.shape.as_list()
    if not noise_shape:
        return x_shape
    noise = [int(d) for d in noise_shape]
    if len(noise) != len(x_shape):
        raise ValueError("The length of noise_shape must equal the rank of x.")
    for i, j in zip(x_shape, noise):
        if j != 1 and i != j:
            raise ValueError(f"Dimension mismatch, {i} != {j}.")
    return noise


def _seed_key(seed: Any, seed_modifier: int) -> tuple[int, int]:
    """The generator key of a user seed (a shape-[2] value known while tracing) and its modifier."""
    value = np.asarray(static_value(seed, "seed", "IpuDropout"))
    if value.shape != (2,):
        raise ValueError(f"Expected the seed to have a shape [2], but got {tuple(value.shape)}.")
    first, second = (int(v) for v in value)
    return first, second ^ ((int(seed_modifier) * _MODIFIER_MIX) & 0xFFFFFFFF)


# -- ipu.nn_ops ---------------------------------------------------------------------------------------------
def gelu(x: Any, approximate: bool = True, name: str | None = None) -> Tensor:
    """``ipu.nn_ops.gelu``: Popnn's GELU, the tanh approximation by default, the exact erf form with
    ``approximate=False``."""
    return math_ops.gelu(x, approximate=approximate)


def swish(x: Any, name: str | None = None) -> Tensor:
    """``ipu.nn_ops.swish``: ``x * sigmoid(x)``."""
    return nn_ops.silu(x)


def hard_sigmoid(x: Any, name: str | None = None) -> Tensor:
    """``ipu.nn_ops.hard_sigmoid``: the piecewise-linear sigmoid ``clip(0.2 * x + 0.5, 0, 1)``."""
    x = convert_to_tensor(x)
    return math_ops.clip_by_value(x * 0.2 + 0.5, 0.0, 1.0)


# -- ipu.embedding_ops --------------------------------------------------------------------------------------
def _serialization_factor(factor: Any) -> int:
    factor = int(factor)
    if factor < 1:
        raise ValueError(f"serialization_factor has to be at least 1, but was {factor}.")
    return factor


def embedding_lookup(params: Any, ids: Any, name: str | None = None, serialization_factor: int = 1,
                     one_hot_threshold: int = 0, min_encoding_size: int = 1216) -> Tensor:
    """``ipu.embedding_ops.embedding_lookup``: the rows of ``params`` at ``ids`` (shape ``ids.shape +
    params.shape[1:]``). With ``serialization_factor`` N the table is looked up in N slices of its
    rows, each lookup masked to the ids it holds, and the parts summed. ``one_hot_threshold`` and
    ``min_encoding_size`` are Graphcore's deprecated arguments, unused there too."""
    factor = _serialization_factor(serialization_factor)
    params, ids = convert_to_tensor(params), convert_to_tensor(ids)
    rows = params.shape.as_list()[0]
    if rows % factor:
        raise ValueError(f"The serialization_factor ({factor}) must divide the size of the 0th dimension of params "
                         f"({rows}).")
    if factor == 1:
        return gather_ops.gather(params, ids)
    size = rows // factor
    out = None
    for i in range(factor):
        table = params[i * size:(i + 1) * size]
        local = ids - i * size
        held = math_ops.logical_and(local >= 0, local < size)
        part = gather_ops.gather(table, math_ops.clip_by_value(local, 0, size - 1))
        mask = array_ops.reshape(math_ops.cast(held, params.dtype), ids.shape.as_list() + [1] * (params.ndim - 1))
        out = part * mask if out is None else out + part * mask
    return out


# -- ipu.math_ops -------------------------------------------------------------------------------------------
_SERIAL_DIMENSIONS = ("a_columns", "a_rows_b_columns", "b_rows")


def serialized_matmul(a: Any, b: Any, serialization_factor: int, serialization_dimension: str,
                      transpose_a: bool = False, transpose_b: bool = False, name: str | None = None) -> Tensor:
    """``ipu.math_ops.serialized_matmul``: ``matmul(a, b)`` computed as ``serialization_factor`` smaller
    products along ``serialization_dimension``: ``a_columns`` (the rows ``m`` of the result),
    ``a_rows_b_columns`` (the contracted ``k``, products summed) or ``b_rows`` (the columns ``n``)."""
    factor = _serialization_factor(serialization_factor)
    a, b = convert_to_tensor(a), convert_to_tensor(b)
    for label, t in (("a", a), ("b", b)):
        if t.ndim < 2:
            raise ValueError(f"Expected tensor '{label}' to have a minimum rank of 2")
    if serialization_dimension not in _SERIAL_DIMENSIONS:
        raise ValueError(f"Invalid serialization_dimension={serialization_dimension}, expected one of: 'a_columns', "
                         "'a_rows_b_columns', 'b_rows'.")

    def product(x: Tensor, y: Tensor) -> Tensor:
        return math_ops.matmul(x, y, transpose_a=transpose_a, transpose_b=transpose_b)

    if serialization_dimension == "a_columns":
        axis = a.ndim - (1 if transpose_a else 2)
        pieces = _split(a, axis, factor, "Expected 'serialization_factor' ({}) to divide the columns dimension of "
                                        "'a' ({}).")
        return array_ops.concat([product(p, b) for p in pieces], axis=-2)
    if serialization_dimension == "b_rows":
        axis = b.ndim - (2 if transpose_b else 1)
        pieces = _split(b, axis, factor, "Expected 'serialization_factor' ({}) to divide the rows dimension of "
                                        "'b' ({}).")
        return array_ops.concat([product(a, p) for p in pieces], axis=-1)
    a_axis, b_axis = a.ndim - (2 if transpose_a else 1), b.ndim - (1 if transpose_b else 2)
    k_a, k_b = a.shape.as_list()[a_axis], b.shape.as_list()[b_axis]
    if k_a != k_b:
        raise ValueError(f"Expected the number of columns in 'a' ({k_a}) to match the number of rows in 'b' ({k_b}).")
    message = "Expected 'serialization_factor' ({}) to divide the rows dimension of 'a' ({})."
    parts = [product(p, q) for p, q in zip(_split(a, a_axis, factor, message), _split(b, b_axis, factor, message))]
    return math_ops.add_n(parts) if len(parts) > 1 else parts[0]


def _split(t: Tensor, axis: int, factor: int, message: str) -> list[Tensor]:
    """``t`` cut into ``factor`` equal slices along ``axis`` (``message`` when they would not be equal)."""
    size = t.shape.as_list()[axis]
    if size % factor:
        raise ValueError(message.format(factor, size))
    step = size // factor
    index = [slice(None)] * t.ndim
    pieces = []
    for i in range(factor):
        index[axis] = slice(i * step, (i + 1) * step)
        pieces.append(t[tuple(index)])
    return pieces
