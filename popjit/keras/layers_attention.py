"""MultiHeadAttention (Keras 2.6): query, key and value projections per head, scaled dot-product
attention over the sequence axis, and an output projection, with Keras's weight names and shapes
(``query/kernel [dim, heads, key_dim]``, ``attention_output/kernel [heads, value_dim, dim]``)."""

from __future__ import annotations

import math
from typing import Any

from popjit.frontend import api as tf
from popjit.keras import backend, constraints, initializers, regularizers
from popjit.keras.base_layer import Layer, as_shape_tuple
from popjit.keras.layers import Dropout

__all__ = [
    "MultiHeadAttention",
]



class _HeadProjection(Layer):
    """``x [..., dim] -> [..., *out_shape]`` by a kernel ``[dim, *out_shape]`` (or ``[*in_shape, dim]``
    summed over the trailing ``in_axes`` input axes), plus a bias: Keras's EinsumDense as used here."""

    def __init__(self, out_shape: tuple[int, ...], in_axes: int, owner: MultiHeadAttention, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.out_shape, self.in_axes, self._owner_settings = out_shape, in_axes, owner

    def build(self, input_shape: Any) -> None:
        shape = as_shape_tuple(input_shape)
        owner = self._owner_settings
        inner = tuple(int(d) for d in shape[-self.in_axes:])
        self.kernel = self.add_weight("kernel", shape=inner + self.out_shape, initializer=owner.kernel_initializer,
                                      regularizer=owner.kernel_regularizer, constraint=owner.kernel_constraint)
        self.bias = self.add_weight("bias", shape=self.out_shape, initializer=owner.bias_initializer,
                                    regularizer=owner.bias_regularizer, constraint=owner.bias_constraint) \
            if owner.use_bias else None
        self._build_input_shape = input_shape
        self.built = True

    def call(self, inputs: Any) -> Any:
        x = tf.convert_to_tensor(inputs)
        shape = x.shape.as_list()
        lead, inner = shape[:-self.in_axes], math.prod(shape[-self.in_axes:])
        kernel = tf.reshape(self.kernel, [inner, math.prod(self.out_shape)])
        y = tf.reshape(tf.matmul(tf.reshape(x, [-1, inner]), kernel), lead + list(self.out_shape))
        return y + self.bias if self.bias is not None else y


class MultiHeadAttention(Layer):
    """``softmax(q k^T / sqrt(key_dim)) v`` per head over the inputs' sequence axis, heads
    concatenated and projected back to the query's feature size (or ``output_shape``)."""

    def __init__(self, num_heads: int, key_dim: int, value_dim: int | None = None, dropout: float = 0.0,
                 use_bias: bool = True, output_shape: Any = None, attention_axes: Any = None,
                 kernel_initializer: Any = "glorot_uniform", bias_initializer: Any = "zeros",
                 kernel_regularizer: Any = None, bias_regularizer: Any = None, activity_regularizer: Any = None,
                 kernel_constraint: Any = None, bias_constraint: Any = None, **kwargs: Any) -> None:
        super().__init__(activity_regularizer=activity_regularizer, **kwargs)
        if attention_axes is not None and tuple(attention_axes) not in ((1,), (-2,)):
            raise tf.errors.UnimplementedError("MultiHeadAttention(attention_axes=...) over axes other than the "
                                               "sequence axis is not supported by popjit.")
        self.num_heads, self.key_dim = int(num_heads), int(key_dim)
        self.value_dim = int(value_dim) if value_dim else self.key_dim
        self.dropout, self.use_bias = float(dropout), bool(use_bias)
        self._output_shape_arg = output_shape
        self.attention_axes = attention_axes
        self.kernel_initializer = initializers.get(kernel_initializer)
        self.bias_initializer = initializers.get(bias_initializer)
        self.kernel_regularizer = regularizers.get(kernel_regularizer)
        self.bias_regularizer = regularizers.get(bias_regularizer)
        self.kernel_constraint = constraints.get(kernel_constraint)
        self.bias_constraint = constraints.get(bias_constraint)
        self._dropout_layer = Dropout(self.dropout)
        self._built_from_signature = False

    def _build_projections(self, query_shape: tuple, value_shape: tuple, key_shape: tuple) -> None:
        heads = self.num_heads
        out = self._output_shape_arg
        out_shape = (int(query_shape[-1]),) if out is None else \
            ((int(out),) if isinstance(out, int) else tuple(int(d) for d in out))
        self._query_dense = _HeadProjection((heads, self.key_dim), 1, self, name="query")
        self._key_dense = _HeadProjection((heads, self.key_dim), 1, self, name="key")
        self._value_dense = _HeadProjection((heads, self.value_dim), 1, self, name="value")
        self._output_dense = _HeadProjection(out_shape, 2, self, name="attention_output")
        for projection in (self._query_dense, self._key_dense, self._value_dense, self._output_dense):
            self._track(projection)
        self._query_dense._maybe_build(query_shape)  # inside call: named "<this layer>/query/kernel"
        self._key_dense._maybe_build(key_shape)
        self._value_dense._maybe_build(value_shape)
        self._output_dense._maybe_build((*query_shape[:-1], heads, self.value_dim))
        self._built_from_signature = True

    def build_from_call_args(self, query_shape: Any, args: tuple, kwargs: dict[str, Any]) -> None:
        """Create the projections when called on symbolic inputs (``tf.keras.Input``), as Keras does, so a
        functional model has its weights before its first run."""
        if self._built_from_signature:
            return
        value = args[0] if args else kwargs.get("value")
        key = args[1] if len(args) > 1 else kwargs.get("key", value)
        with backend.name_scope(self.name):
            self._build_projections(as_shape_tuple(query_shape), as_shape_tuple(value.shape),
                                    as_shape_tuple(key.shape))

    def call(self, query: Any, value: Any, key: Any = None, attention_mask: Any = None,
             return_attention_scores: bool = False, training: Any = None) -> Any:
        query, value = tf.convert_to_tensor(query), tf.convert_to_tensor(value)
        key = value if key is None else tf.convert_to_tensor(key)
        if not self._built_from_signature:
            self._build_projections(tuple(query.shape.as_list()), tuple(value.shape.as_list()),
                                    tuple(key.shape.as_list()))
        q = self._query_dense(query) * (1.0 / math.sqrt(float(self.key_dim)))  # [B, T, H, dk]
        k = self._key_dense(key)  # [B, S, H, dk]
        v = self._value_dense(value)  # [B, S, H, dv]
        scores = tf.matmul(tf.transpose(q, [0, 2, 1, 3]), tf.transpose(k, [0, 2, 3, 1]))  # [B, H, T, S]
        if attention_mask is not None:
            mask = tf.convert_to_tensor(attention_mask)
            mask = tf.expand_dims(mask, 1) if mask.shape.rank == 3 else mask
            scores = scores + (1.0 - tf.cast(mask, scores.dtype)) * -1e9
        weights = tf.nn.softmax(scores, axis=-1)
        dropped = self._dropout_layer(weights, training=training)
        context = tf.transpose(tf.matmul(dropped, tf.transpose(v, [0, 2, 1, 3])), [0, 2, 1, 3])  # [B, T, H, dv]
        output = self._output_dense(context)
        return (output, weights) if return_attention_scores else output

    def compute_output_shape(self, input_shape: Any) -> Any:
        shape = as_shape_tuple(input_shape[0] if isinstance(input_shape, list) else input_shape)
        out = self._output_shape_arg
        if out is None:
            return shape
        return (*shape[:-1], *((out,) if isinstance(out, int) else tuple(out)))

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "num_heads": self.num_heads, "key_dim": self.key_dim,
                "value_dim": self.value_dim, "dropout": self.dropout, "use_bias": self.use_bias,
                "output_shape": self._output_shape_arg, "attention_axes": self.attention_axes,
                "kernel_initializer": initializers.serialize(self.kernel_initializer),
                "bias_initializer": initializers.serialize(self.bias_initializer),
                "kernel_regularizer": regularizers.serialize(self.kernel_regularizer),
                "bias_regularizer": regularizers.serialize(self.bias_regularizer),
                "activity_regularizer": regularizers.serialize(self.activity_regularizer),
                "kernel_constraint": constraints.serialize(self.kernel_constraint),
                "bias_constraint": constraints.serialize(self.bias_constraint)}
