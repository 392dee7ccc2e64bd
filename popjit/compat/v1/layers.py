"""``tf.compat.v1.layers``: TF1's functional layers, with their variables made by ``get_variable`` in a
variable scope of the layer's name (``dense/kernel``, ``dense_1/kernel``, ``conv2d/bias``...), as TF1's
layers name them, so checkpoints and ``reuse`` work as in TF1.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from popjit.compat.v1.variable_scope import get_variable, glorot_uniform_initializer, variable_scope, zeros_initializer
from popjit.errors import UnimplementedError, missing_attributes
from popjit.frontend import api
from popjit.frontend.convert import convert_to_tensor
from popjit.keras import activations
from popjit.source import where


def _pair(value: int | Sequence[int]) -> tuple[int, int]:
    return (int(value), int(value)) if isinstance(value, int) else (int(value[0]), int(value[1]))


def _refuse(layer: str, **options: Any) -> None:
    for option, value in options.items():
        if value is not None:
            raise UnimplementedError(f"tf.compat.v1.layers.{layer}({option}=...) is not supported by popjit{where()}.")


def _channels_last(layer: str, data_format: str) -> None:
    if data_format != "channels_last":
        raise UnimplementedError(f"tf.compat.v1.layers.{layer}(data_format={data_format!r}): popjit supports "
                                 f"channels_last only{where()}.")


def _activate(y: Any, activation: Any) -> Any:
    return activations.get(activation)(y) if activation is not None else y


def dense(inputs: Any, units: int, activation: Any = None, use_bias: bool = True, kernel_initializer: Any = None,
          bias_initializer: Any = None, kernel_regularizer: Any = None, bias_regularizer: Any = None,
          activity_regularizer: Any = None, kernel_constraint: Any = None, bias_constraint: Any = None,
          trainable: bool = True, name: str | None = None, reuse: Any = None) -> Any:
    """``activation(inputs @ kernel + bias)`` over the last axis of ``inputs``."""
    _refuse("dense", kernel_regularizer=kernel_regularizer, bias_regularizer=bias_regularizer,
            activity_regularizer=activity_regularizer)
    x = convert_to_tensor(inputs)
    shape = x.shape.as_list()
    with variable_scope(name, default_name="dense", reuse=reuse):
        kernel = get_variable("kernel", [shape[-1], units], x.dtype, kernel_initializer or glorot_uniform_initializer(),
                              trainable=trainable, constraint=kernel_constraint)
        flat = api.reshape(x, [-1, shape[-1]]) if len(shape) != 2 else x
        y = api.matmul(flat, kernel)
        if use_bias:
            bias = get_variable("bias", [units], x.dtype, bias_initializer or zeros_initializer(), trainable=trainable,
                                constraint=bias_constraint)
            y = api.nn.bias_add(y, bias)
        if len(shape) != 2:
            y = api.reshape(y, [*shape[:-1], units])
        return _activate(y, activation)


def conv2d(inputs: Any, filters: int, kernel_size: Any, strides: Any = (1, 1), padding: str = "valid",
           data_format: str = "channels_last", dilation_rate: Any = (1, 1), activation: Any = None,
           use_bias: bool = True, kernel_initializer: Any = None, bias_initializer: Any = None,
           kernel_regularizer: Any = None, bias_regularizer: Any = None, activity_regularizer: Any = None,
           kernel_constraint: Any = None, bias_constraint: Any = None, trainable: bool = True,
           name: str | None = None, reuse: Any = None) -> Any:
    """A 2-D convolution of NHWC ``inputs`` with a ``[kh, kw, in, filters]`` kernel, plus bias and activation."""
    _refuse("conv2d", kernel_regularizer=kernel_regularizer, bias_regularizer=bias_regularizer,
            activity_regularizer=activity_regularizer)
    _channels_last("conv2d", data_format)
    x = convert_to_tensor(inputs)
    kh, kw = _pair(kernel_size)
    with variable_scope(name, default_name="conv2d", reuse=reuse):
        kernel = get_variable("kernel", [kh, kw, x.shape.as_list()[-1], filters], x.dtype,
                              kernel_initializer or glorot_uniform_initializer(), trainable=trainable,
                              constraint=kernel_constraint)
        y = api.nn.conv2d(x, kernel, strides=[1, *_pair(strides), 1], padding=padding.upper(),
                          dilations=[1, *_pair(dilation_rate), 1])
        if use_bias:
            bias = get_variable("bias", [filters], x.dtype, bias_initializer or zeros_initializer(),
                                trainable=trainable, constraint=bias_constraint)
            y = api.nn.bias_add(y, bias)
        return _activate(y, activation)


def max_pooling2d(inputs: Any, pool_size: Any, strides: Any, padding: str = "valid",
                  data_format: str = "channels_last", name: str | None = None) -> Any:
    """The maximum of each ``pool_size`` window."""
    _channels_last("max_pooling2d", data_format)
    return api.nn.max_pool2d(inputs, [1, *_pair(pool_size), 1], [1, *_pair(strides), 1], padding.upper())


def average_pooling2d(inputs: Any, pool_size: Any, strides: Any, padding: str = "valid",
                      data_format: str = "channels_last", name: str | None = None) -> Any:
    """The mean of each ``pool_size`` window."""
    _channels_last("average_pooling2d", data_format)
    return api.nn.avg_pool2d(inputs, [1, *_pair(pool_size), 1], [1, *_pair(strides), 1], padding.upper())


def flatten(inputs: Any, name: str | None = None, data_format: str = "channels_last") -> Any:
    """``inputs`` as ``[batch, everything else]``."""
    x = convert_to_tensor(inputs)
    return api.reshape(x, [x.shape.as_list()[0], -1])


def dropout(inputs: Any, rate: float = 0.5, noise_shape: Any = None, seed: int | None = None, training: Any = False,
            name: str | None = None) -> Any:
    """``inputs`` with a ``rate`` of its elements zeroed (and the rest scaled up) when ``training``."""
    if isinstance(training, bool) or training is None:
        return api.nn.dropout(inputs, rate, noise_shape, seed) if training else api.identity(inputs)
    return api.cond(training, lambda: api.nn.dropout(inputs, rate, noise_shape, seed), lambda: api.identity(inputs))


__all__ = ["average_pooling2d", "conv2d", "dense", "dropout", "flatten", "max_pooling2d"]

__getattr__ = missing_attributes("tf.compat.v1.layers")
