"""Graphcore's IPU normalization layers (``ipu_tensorflow_addons.keras.layers``): GroupNormalization,
InstanceNormalization and LayerNormalization, one group-norm computation behind all three.

They keep no statistics: training and inference both normalize with the statistics of the input
itself. Each example's channels are split into ``groups``; each group is normalized over its
channels and every position. ``strided_channel_grouping`` (Graphcore's default) puts channel ``c``
in group ``c % groups``; without it, the groups are consecutive blocks of channels.
"""

from __future__ import annotations

import math
from typing import Any

from popjit.frontend import api as tf
from popjit.keras import initializers
from popjit.keras.base_layer import Layer, as_shape_tuple
from popjit.keras.ipu_layers import check_unsupported

__all__ = ["GroupNorm", "GroupNormalization", "InstanceNorm", "InstanceNormalization", "LayerNorm",
           "LayerNormalization"]


def group_norm(x: Any, gamma: Any, beta: Any, groups: int, epsilon: float, strided: bool) -> Any:
    """Group normalization of channels-last ``x [N, ..., C]`` with per-channel ``gamma`` and ``beta``."""
    shape = x.shape.as_list()
    channels, per_group = shape[-1], shape[-1] // groups
    flat = tf.reshape(x, [shape[0], -1, channels])
    # strided: channel c = k * groups + g; blocked: channel c = g * per_group + k
    split = [shape[0], -1, per_group, groups] if strided else [shape[0], -1, groups, per_group]
    grouped = tf.reshape(flat, split)
    axes = [1, 2] if strided else [1, 3]
    stats_x = tf.cast(grouped, tf.float32) if grouped.dtype == tf.float16 else grouped
    mean, variance = tf.nn.moments(stats_x, axes, keepdims=True)
    normed = tf.cast((stats_x - mean) * tf.math.rsqrt(variance + epsilon), x.dtype)
    out = tf.reshape(normed, [shape[0], -1, channels]) * gamma + beta
    return tf.reshape(out, shape)


class GroupNormalization(Layer):
    """``GroupNormalization(groups=2, channels_axis=-1, center=True, scale=True, epsilon=1e-3,
    beta_initializer=None, gamma_initializer=None, strided_channel_grouping=True)``. The channels are
    the last axis or axis 1; ``gamma`` and ``beta`` (one per channel) use Keras's default initializer
    (glorot_uniform) when none is given, as Graphcore's layer does."""

    def __init__(self, groups: int = 2, channels_axis: int = -1, center: bool = True, scale: bool = True,
                 epsilon: float = 1e-3, beta_initializer: Any = None, gamma_initializer: Any = None,
                 strided_channel_grouping: bool = True, trainable: bool = True, **kwargs: Any) -> None:
        super().__init__(trainable=trainable, **kwargs)
        self.groups, self.channels_axis = groups, channels_axis
        self.center, self.scale, self.epsilon = center, scale, epsilon
        self.beta_initializer = initializers.get(beta_initializer)
        self.gamma_initializer = initializers.get(gamma_initializer)
        self.strided_channel_grouping = strided_channel_grouping
        self.data_format, self.channels = "", 1

    def build(self, input_shape: Any) -> None:
        shape = as_shape_tuple(input_shape)
        if self.channels_axis > len(shape) - 1:
            raise ValueError("Axis is out of bounds.")
        if self.channels_axis < 0:
            self.channels_axis += len(shape)
        self.channels = shape[self.channels_axis]
        if self.groups > self.channels:
            raise ValueError(f"Invalid groups {self.groups} for {self.channels} channels.")
        if self.channels % self.groups:
            raise ValueError(f"{self.channels} channels is not commensurate with {self.groups} groups.")
        if self.channels_axis == 1:
            self.data_format = "NCHW"
        elif self.channels_axis == len(shape) - 1:
            self.data_format = "NHWC"
        else:
            raise ValueError("Unsupported data format, group norm only supports NCHW(channel axis 1) and NHWC "
                             "(channel axis -1).")
        if self.scale:
            self.gamma = self.add_weight("gamma", shape=(self.channels,), initializer=self.gamma_initializer,
                                         trainable=self.trainable)
        if self.center:
            self.beta = self.add_weight("beta", shape=(self.channels,), initializer=self.beta_initializer,
                                        trainable=self.trainable)
        self._build_input_shape = input_shape
        self.built = True

    def _normalize(self, x: Any) -> Any:
        gamma = self.gamma if self.scale else tf.ones([self.channels], x.dtype)
        beta = self.beta if self.center else tf.zeros([self.channels], x.dtype)
        channels_first = self.data_format == "NCHW" and x.shape.rank > 2
        if channels_first:
            x = tf.transpose(x, [0, *range(2, x.shape.rank), 1])
        y = group_norm(x, gamma, beta, self.groups, self.epsilon, self.strided_channel_grouping)
        if channels_first:
            y = tf.transpose(y, [0, y.shape.rank - 1, *range(1, y.shape.rank - 1)])
        return y

    def call(self, inputs: Any, training: Any = None) -> Any:
        return self._normalize(tf.convert_to_tensor(inputs))

    def compute_output_shape(self, input_shape: Any) -> Any:
        return input_shape

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "groups": self.groups, "channels_axis": self.channels_axis,
                "center": self.center, "scale": self.scale, "epsilon": self.epsilon,
                "beta_initializer": initializers.serialize(self.beta_initializer),
                "gamma_initializer": initializers.serialize(self.gamma_initializer),
                "strided_channel_grouping": self.strided_channel_grouping}


class InstanceNormalization(GroupNormalization):
    """``InstanceNormalization(channels_axis=-1, ...)``: group normalization with one channel per group."""

    def __init__(self, channels_axis: int = -1, center: bool = True, scale: bool = True, epsilon: float = 1e-3,
                 beta_initializer: Any = None, gamma_initializer: Any = None, trainable: bool = True,
                 **kwargs: Any) -> None:
        super().__init__(0, channels_axis, center, scale, epsilon, beta_initializer, gamma_initializer,
                         trainable=trainable, **kwargs)

    def build(self, input_shape: Any) -> None:
        self.groups = as_shape_tuple(input_shape)[self.channels_axis]
        super().build(input_shape)

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        for key in ("groups", "strided_channel_grouping"):
            config.pop(key)
        return config


class LayerNormalization(GroupNormalization):
    """``LayerNormalization(axis=-1, epsilon=1e-3, center=True, scale=True, beta_initializer='zeros',
    gamma_initializer='ones')``: each example normalized over ``axis`` (an int or a list), with one
    ``gamma`` and ``beta`` per normalized element (a flat vector). Regularizers and constraints are
    refused, as Graphcore's layer refuses them."""

    def __init__(self, axis: Any = -1, epsilon: float = 1e-3, center: bool = True, scale: bool = True,
                 beta_initializer: Any = "zeros", gamma_initializer: Any = "ones", beta_regularizer: Any = None,
                 gamma_regularizer: Any = None, beta_constraint: Any = None, gamma_constraint: Any = None,
                 trainable: bool = True, **kwargs: Any) -> None:
        if isinstance(axis, (list, tuple)):
            axes: Any = list(axis)
        elif isinstance(axis, int):
            axes = axis
        else:
            raise ValueError(f"Expected an int or a list/tuple of ints for the argument 'axis', but received instead: "
                             f"{axis}")
        super().__init__(1, -1, center, scale, epsilon, beta_initializer, gamma_initializer, trainable=trainable,
                         **kwargs)
        self.axis = axes
        for value, name in ((beta_regularizer, "beta_regularizer"), (gamma_regularizer, "gamma_regularizer"),
                            (beta_constraint, "beta_constraint"), (gamma_constraint, "gamma_constraint")):
            check_unsupported("LayerNormalization", value, name)

    def build(self, input_shape: Any) -> None:
        shape = as_shape_tuple(input_shape)
        ndims = len(shape)
        axes = sorted(a + ndims if a < 0 else a for a in ([self.axis] if isinstance(self.axis, int) else self.axis))
        for a in axes:
            if a < 0 or a >= ndims:
                raise ValueError(f"Invalid axis: {a}")
        if len(axes) != len(set(axes)):
            raise ValueError(f"Duplicate axis: {tuple(axes)}")
        if any(shape[a] is None for a in axes):
            raise ValueError(f"Input shape {shape} has unknown dimensions - all dimensions need to be fully "
                             "specified.")
        self.axis = axes
        self.non_reduced_dims = [d for d in range(ndims) if d not in axes]
        self.permutation = self.non_reduced_dims + axes
        self.num_reduced_elements = math.prod(shape[a] for a in axes)
        super().build((None, self.num_reduced_elements))
        self._build_input_shape = input_shape

    def call(self, inputs: Any, training: Any = None) -> Any:
        x = tf.convert_to_tensor(inputs)
        permuted = tf.transpose(x, self.permutation)
        flat = tf.reshape(permuted, [-1, self.num_reduced_elements])
        out = tf.reshape(self._normalize(flat), permuted.shape.as_list())
        inverse = [self.permutation.index(d) for d in range(len(self.permutation))]
        return tf.transpose(out, inverse)

    def get_config(self) -> dict[str, Any]:
        config = {key: value for key, value in super().get_config().items()
                  if key not in ("groups", "channels_axis", "strided_channel_grouping")}
        return {**config, "axis": self.axis, "beta_regularizer": None, "gamma_regularizer": None,
                "beta_constraint": None, "gamma_constraint": None}


GroupNorm = GroupNormalization
InstanceNorm = InstanceNormalization
LayerNorm = LayerNormalization
