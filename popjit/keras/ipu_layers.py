"""Graphcore's IPU Keras layers (``ipu_tensorflow_addons.keras.layers``, and ``ipu.keras.layers`` of
SDK ≤ 2.5): Dropout, Embedding, SerialDense, RecomputationCheckpoint and AssumeEqualAcrossReplicas,
with Graphcore's constructor arguments, checks and error texts. The normalization layers are in
:mod:`popjit.keras.ipu_normalization`, LSTM and GRU in :mod:`popjit.keras.ipu_recurrent`.
"""

from __future__ import annotations

from typing import Any, NoReturn

from popjit.errors import UnimplementedError
from popjit.frontend import api as tf
from popjit.frontend import ipu_ops
from popjit.keras import backend, initializers
from popjit.keras.base_layer import Layer, as_shape_tuple
from popjit.keras.layers import Dense
from popjit.keras.layers_embedding import Embedding as KerasEmbedding

__all__ = ["AssumeEqualAcrossReplicas", "Dropout", "Embedding", "RecomputationCheckpoint", "SerialDense"]


def check_unsupported(layer: Any, arg: Any, arg_name: str, method: str = "__init__") -> None:
    """Graphcore's refusal of a Keras argument its IPU layer only takes for API consistency (an argument
    given: not None, False, 0 or empty)."""
    if arg is None or (isinstance(arg, (bool, int, float, str, list, tuple, dict)) and not arg):
        return
    name = layer if isinstance(layer, str) else type(layer).__name__
    raise NotImplementedError(f"ipu.keras.{name} does not support {method} argument {arg_name}. It is included for "
                              f"API consistencywith keras.{name}.")


def refuse(layer: str, option: str, value: Any, why: str) -> NoReturn:
    """An option Graphcore's layer honours and popjit cannot: ``UnimplementedError`` naming it."""
    raise UnimplementedError(f"{layer}({option}={value!r}) is not supported by popjit: {why}. Remove it.")


def static_training(training: Any) -> bool:
    """Graphcore's reading of ``training`` in its Popnn layers: a Python bool (or a value known while
    tracing) as is, anything only known at run time as True."""
    if isinstance(training, bool):
        return training
    if isinstance(training, (tf.Tensor, tf.Variable)):
        value = tf.get_static_value(training)
        return True if value is None else bool(value)
    return True if training is None else bool(training)


class Dropout(Layer):
    """``Dropout(rate, noise_shape=None, seed=None)``: Poprand's dropout in training (each element
    zeroed with probability ``rate``, the rest scaled by ``1 / (1 - rate)``), the identity in
    inference. ``seed`` is two integers (``ipu.rand_ops.dropout``'s): a reproducible stream that
    still draws a new mask on every step."""

    def __init__(self, rate: float, noise_shape: Any = None, seed: Any = None, **kwargs: Any) -> None:
        self.ref = kwargs.pop("ref", True)
        if self.ref is not True:
            refuse("Dropout", "ref", self.ref, "only the default dropout implementation is modelled")
        super().__init__(**kwargs)
        self.seed, self.rate, self.noise_shape = seed, rate, noise_shape

    def call(self, inputs: Any, training: Any = None) -> Any:
        x = tf.convert_to_tensor(inputs)
        return backend.in_training(
            training, lambda: ipu_ops.dropout(x, seed=self.seed, rate=self.rate, noise_shape=self.noise_shape),
            lambda: tf.identity(x))

    def compute_output_shape(self, input_shape: Any) -> Any:
        return input_shape

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "rate": self.rate, "noise_shape": self.noise_shape, "seed": self.seed,
                "ref": self.ref}


class Embedding(KerasEmbedding):
    """``Embedding(input_dim, output_dim, embeddings_initializer='uniform', serialization_factor=1)``:
    rows of a ``[input_dim, output_dim]`` table picked by ``[batch, input_length]`` indices with the
    IPU's multi-slice lookup (``serialization_factor`` splits it, see
    ``ipu.embedding_ops.embedding_lookup``). Regularizers, constraints, ``mask_zero`` and
    ``input_length`` are refused, as Graphcore's layer refuses them."""

    def __init__(self, input_dim: int, output_dim: int, embeddings_initializer: Any = "uniform",
                 embeddings_regularizer: Any = None, activity_regularizer: Any = None,
                 embeddings_constraint: Any = None, mask_zero: bool = False, input_length: Any = None,
                 serialization_factor: int = 1, **kwargs: Any) -> None:
        for value, name in ((embeddings_regularizer, "embeddings_regularizer"),
                            (activity_regularizer, "activity_regularizer"),
                            (embeddings_constraint, "embeddings_constraint"), (mask_zero, "mask_zero"),
                            (input_length, "input_length")):
            check_unsupported("Embedding", value, name)
        super().__init__(input_dim, output_dim, embeddings_initializer, **kwargs)
        self.serialization_factor = serialization_factor

    def build(self, input_shape: Any) -> None:
        if len(as_shape_tuple(input_shape)) != 2:
            raise ValueError("The input shape should be a tensor of shape [batch, input_length]")
        super().build(input_shape)

    def call(self, inputs: Any, training: Any = None) -> Any:
        ids = tf.convert_to_tensor(inputs)
        if not ids.dtype.is_integer:
            ids = tf.cast(ids, tf.int32)
        return ipu_ops.embedding_lookup(self.embeddings, ids, serialization_factor=self.serialization_factor)

    def get_config(self) -> dict[str, Any]:
        base = Layer.get_config(self)
        return {**base, "input_dim": self.input_dim, "output_dim": self.output_dim,
                "embeddings_initializer": initializers.serialize(self.embeddings_initializer),
                "serialization_factor": self.serialization_factor}


_SERIAL_DIMENSIONS = {"input_columns": "a_columns", "input_rows_kernel_columns": "a_rows_b_columns",
                      "kernel_rows": "b_rows"}


class SerialDense(Dense):
    """``SerialDense(units, serialization_factor, serialization_dimension, ...)``: a Dense layer whose
    product is computed as ``serialization_factor`` smaller ones along ``input_columns`` (the rows
    of the inputs), ``input_rows_kernel_columns`` (the contracted features) or ``kernel_rows`` (the
    units), as ``ipu.math_ops.serialized_matmul`` does."""

    def __init__(self, units: int, serialization_factor: int, serialization_dimension: str, **kwargs: Any) -> None:
        if "input_shape" not in kwargs and "input_dim" in kwargs:
            kwargs["input_shape"] = (kwargs.pop("input_dim"),)
        super().__init__(units, **kwargs)
        self.serialization_factor = int(serialization_factor)
        self.serialization_dimension = serialization_dimension

    def call(self, inputs: Any) -> Any:
        if self.serialization_factor < 1:
            raise ValueError(f"serialization_factor has to be at least 1, but was {self.serialization_factor}.")
        dimension = _SERIAL_DIMENSIONS.get(self.serialization_dimension)
        if dimension is None:
            raise ValueError(f"Invalid serialization_dimension={self.serialization_dimension}, expected one of: "
                             "'input_columns', 'input_rows_kernel_columns', 'kernel_rows'.")
        x = tf.cast(tf.convert_to_tensor(inputs), self.dtype)
        out = ipu_ops.serialized_matmul(x, self.kernel, self.serialization_factor, dimension)
        if self.use_bias:
            out = out + self.bias
        return self.activation(out)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "serialization_factor": self.serialization_factor,
                "serialization_dimension": self.serialization_dimension}


class RecomputationCheckpoint(Layer):
    """Marks values a pipelined model keeps instead of recomputing them in the backward pass. popjit
    does not pipeline or recompute, so the layer passes its inputs through unchanged."""

    def call(self, inputs: Any, **kwargs: Any) -> Any:
        return tf.nest.map_structure(tf.identity, inputs)

    def compute_output_shape(self, input_shape: Any) -> Any:
        return input_shape


class AssumeEqualAcrossReplicas(Layer):
    """Marks values as equal on every replica (so branching on them cannot diverge). On popjit's one
    replica they are, and the layer passes its inputs through unchanged. ``inplace`` is accepted."""

    def __init__(self, inplace: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.inplace = inplace

    def call(self, inputs: Any, **kwargs: Any) -> Any:
        return tf.nest.map_structure(tf.identity, inputs)

    def compute_output_shape(self, input_shape: Any) -> Any:
        return input_shape

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "inplace": self.inplace}
