"""Convolution and pooling layers: Conv1D/2D/3D, Conv1D/2DTranspose, DepthwiseConv2D,
SeparableConv1D/2D, Max/AveragePooling1D/2D/3D and the global poolings, over ``tf.nn``'s
convolutions and pooling (:mod:`popjit.frontend.conv_ops`), with Keras 2.6's arguments, weight
names and shapes."""

from __future__ import annotations

from typing import Any

from popjit.frontend import api as tf
from popjit.frontend import conv_ops
from popjit.keras import activations, backend, constraints, initializers, regularizers
from popjit.keras.base_layer import Layer, as_shape_tuple
from popjit.keras.layers import weight_options_config

__all__ = [
    "AveragePooling1D",
    "AveragePooling2D",
    "AveragePooling3D",
    "AvgPool1D",
    "AvgPool2D",
    "AvgPool3D",
    "Conv1D",
    "Conv1DTranspose",
    "Conv2D",
    "Conv2DTranspose",
    "Conv3D",
    "Convolution1D",
    "Convolution2D",
    "Convolution2DTranspose",
    "Convolution3D",
    "DepthwiseConv2D",
    "GlobalAveragePooling1D",
    "GlobalAveragePooling2D",
    "GlobalAvgPool1D",
    "GlobalAvgPool2D",
    "GlobalMaxPool1D",
    "GlobalMaxPool2D",
    "GlobalMaxPooling1D",
    "GlobalMaxPooling2D",
    "MaxPool1D",
    "MaxPool2D",
    "MaxPool3D",
    "MaxPooling1D",
    "MaxPooling2D",
    "MaxPooling3D",
    "SeparableConv1D",
    "SeparableConv2D",
]



def normalize_tuple(value: Any, n: int, name: str) -> tuple[int, ...]:
    """An int or ``n`` ints, as ``n`` ints (Keras's ``conv_utils.normalize_tuple``)."""
    if isinstance(value, int):
        return (value,) * n
    values = tuple(int(v) for v in value)
    if len(values) != n:
        raise ValueError(f"The `{name}` argument must be a tuple of {n} integers. Received: {value}")
    return values


def _padding(value: str, allowed: tuple[str, ...]) -> str:
    mode = str(value).lower()
    if mode not in allowed:
        raise ValueError(f"The `padding` argument must be a list/tuple or one of {', '.join(allowed)}. "
                         f"Received: {value}")
    return mode


def conv_output_length(size: int | None, kernel: int, padding: str, stride: int, dilation: int = 1) -> int | None:
    """Keras's output length of a convolution along one axis."""
    if size is None:
        return None
    span = (kernel - 1) * dilation + 1
    length = size - span + 1 if padding == "valid" else size
    return (length + stride - 1) // stride


def deconv_output_length(size: int | None, kernel: int, padding: str, output_padding: int | None, stride: int,
                         dilation: int = 1) -> int | None:
    """Keras's output length of a transposed convolution along one axis."""
    if size is None:
        return None
    span = (kernel - 1) * dilation + 1
    if output_padding is None:
        return size * stride if padding == "same" else size * stride + max(span - stride, 0)
    pad = span // 2 if padding == "same" else 0
    return (size - 1) * stride + span - 2 * pad + output_padding


class _Conv(Layer):
    """The shared part of the convolution layers: arguments, a kernel and a bias."""

    rank = 2
    _paddings: tuple[str, ...] = ("valid", "same")

    def __init__(self, filters: int, kernel_size: Any, strides: Any = 1, padding: str = "valid",
                 data_format: str | None = None, dilation_rate: Any = 1, groups: int = 1, activation: Any = None,
                 use_bias: bool = True, kernel_initializer: Any = "glorot_uniform", bias_initializer: Any = "zeros",
                 kernel_regularizer: Any = None, bias_regularizer: Any = None, activity_regularizer: Any = None,
                 kernel_constraint: Any = None, bias_constraint: Any = None, **kwargs: Any) -> None:
        super().__init__(activity_regularizer=activity_regularizer, **kwargs)
        self.filters = int(filters) if filters is not None else None
        if self.filters is not None and self.filters <= 0:
            raise ValueError(f"Invalid value for argument `filters`. Expected a strictly positive value. "
                             f"Received filters={filters}.")
        self.groups = int(groups)
        self.kernel_size = normalize_tuple(kernel_size, self.rank, "kernel_size")
        self.strides = normalize_tuple(strides, self.rank, "strides")
        self.padding = _padding(padding, self._paddings)
        self.data_format = backend.normalize_data_format(data_format)
        self.dilation_rate = normalize_tuple(dilation_rate, self.rank, "dilation_rate")
        self.activation = activations.get(activation)
        self.use_bias = bool(use_bias)
        self.kernel_initializer = initializers.get(kernel_initializer)
        self.bias_initializer = initializers.get(bias_initializer)
        self.kernel_regularizer = regularizers.get(kernel_regularizer)
        self.bias_regularizer = regularizers.get(bias_regularizer)
        self.kernel_constraint = constraints.get(kernel_constraint)
        self.bias_constraint = constraints.get(bias_constraint)
        if self.filters is not None and self.filters % self.groups:
            raise ValueError(f"The number of filters must be evenly divisible by the number of groups. Received: "
                             f"groups={groups}, filters={filters}")

    @property
    def _channel_axis(self) -> int:
        return -1 if self.data_format == "channels_last" else 1

    def _channels(self, input_shape: Any) -> int:
        shape = as_shape_tuple(input_shape)
        if len(shape) != self.rank + 2:
            raise ValueError(f"Input 0 of layer {self.name} is incompatible with the layer: expected "
                             f"ndim={self.rank + 2}, found ndim={len(shape)}. Full shape received: {shape}")
        channels = shape[self._channel_axis]
        if channels is None:
            raise ValueError("The channel dimension of the inputs should be defined. Found `None`.")
        return int(channels)

    def _kernel_shape(self, channels: int) -> tuple[int, ...]:
        if channels % self.groups:
            raise ValueError(f"The number of input channels must be evenly divisible by the number of groups. "
                             f"Received groups={self.groups}, but the input has {channels} channels.")
        return (*self.kernel_size, channels // self.groups, self.filters)

    def build(self, input_shape: Any) -> None:
        channels = self._channels(input_shape)
        self.kernel = self.add_weight("kernel", shape=self._kernel_shape(channels),
                                      initializer=self.kernel_initializer, regularizer=self.kernel_regularizer,
                                      constraint=self.kernel_constraint, trainable=True)
        self.bias = self.add_weight("bias", shape=(self.filters,), initializer=self.bias_initializer,
                                    regularizer=self.bias_regularizer, constraint=self.bias_constraint,
                                    trainable=True) if self.use_bias else None
        self._build_input_shape = input_shape
        self.built = True

    def _finish(self, x: Any) -> Any:
        if self.use_bias:
            bias = self.bias if self.data_format == "channels_last" else \
                tf.reshape(self.bias, [1, -1] + [1] * self.rank)
            x = x + bias
        return x if self.activation is activations.linear else self.activation(x)

    def _tf_format(self) -> str:
        return {1: "NWC", 2: "NHWC", 3: "NDHWC"}[self.rank] if self.data_format == "channels_last" else \
            {1: "NCW", 2: "NCHW", 3: "NCDHW"}[self.rank]

    def _nn_padding(self, x: Any) -> Any:
        return self.padding.upper()

    def call(self, inputs: Any) -> Any:
        x = tf.convert_to_tensor(inputs)
        y = conv_ops.convolution(x, self.kernel, self.strides, self._nn_padding(x), self._tf_format(),
                                 self.dilation_rate)
        return self._finish(y)

    def _spatial(self, shape: tuple[int | None, ...]) -> tuple[int | None, ...]:
        return shape[1:-1] if self.data_format == "channels_last" else shape[2:]

    def _with_spatial(self, shape: tuple[int | None, ...], spatial: list[int | None], channels: int) -> tuple:
        if self.data_format == "channels_last":
            return (shape[0], *spatial, channels)
        return (shape[0], channels, *spatial)

    def compute_output_shape(self, input_shape: Any) -> Any:
        shape = as_shape_tuple(input_shape)
        spatial = [conv_output_length(d, k, self.padding, s, r) for d, k, s, r in
                   zip(self._spatial(shape), self.kernel_size, self.strides, self.dilation_rate)]
        return self._with_spatial(shape, spatial, self.filters)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "filters": self.filters, "kernel_size": self.kernel_size,
                "strides": self.strides, "padding": self.padding, "data_format": self.data_format,
                "dilation_rate": self.dilation_rate, "groups": self.groups,
                "activation": activations.serialize(self.activation), "use_bias": self.use_bias,
                "kernel_initializer": initializers.serialize(self.kernel_initializer),
                "bias_initializer": initializers.serialize(self.bias_initializer), **weight_options_config(self)}


class Conv1D(_Conv):
    """1-D convolution over ``[batch, steps, channels]``; ``padding="causal"`` pads on the left only."""

    rank = 1
    _paddings = ("valid", "same", "causal")

    def __init__(self, filters: int, kernel_size: Any, strides: Any = 1, padding: str = "valid",
                 data_format: str = "channels_last", dilation_rate: Any = 1, groups: int = 1, **kwargs: Any) -> None:
        super().__init__(filters, kernel_size, strides, padding, data_format, dilation_rate, groups, **kwargs)

    def _nn_padding(self, x: Any) -> Any:
        if self.padding == "causal":
            return [[0, 0], [(self.kernel_size[0] - 1) * self.dilation_rate[0], 0], [0, 0]] \
                if self.data_format == "channels_last" else \
                [[0, 0], [0, 0], [(self.kernel_size[0] - 1) * self.dilation_rate[0], 0]]
        return self.padding.upper()

    def compute_output_shape(self, input_shape: Any) -> Any:
        if self.padding != "causal":
            return super().compute_output_shape(input_shape)
        shape = as_shape_tuple(input_shape)
        steps = conv_output_length(self._spatial(shape)[0], 1, "same", self.strides[0])
        return self._with_spatial(shape, [steps], self.filters)


class Conv2D(_Conv):
    """2-D convolution over ``[batch, rows, cols, channels]``."""

    rank = 2


class Conv3D(_Conv):
    """3-D convolution over ``[batch, depth, rows, cols, channels]``."""

    rank = 3


class _ConvTranspose(_Conv):
    """Transposed convolution: the gradient of a convolution with respect to its input."""

    def __init__(self, filters: int, kernel_size: Any, strides: Any = 1, padding: str = "valid",
                 output_padding: Any = None, data_format: str | None = None, dilation_rate: Any = 1,
                 **kwargs: Any) -> None:
        super().__init__(filters, kernel_size, strides, padding, data_format, dilation_rate, **kwargs)
        self.output_padding = None if output_padding is None else \
            normalize_tuple(output_padding, self.rank, "output_padding")
        for p, s in zip(self.output_padding or (), self.strides):
            if p >= s:
                raise ValueError(f"Strides must be greater than output padding. Received strides={self.strides}, "
                                 f"output_padding={self.output_padding}.")

    def _kernel_shape(self, channels: int) -> tuple[int, ...]:
        return (*self.kernel_size, self.filters, channels)

    def compute_output_shape(self, input_shape: Any) -> Any:
        shape = as_shape_tuple(input_shape)
        pads = self.output_padding or (None,) * self.rank
        spatial = [deconv_output_length(d, k, self.padding, p, s, r) for d, k, p, s, r in
                   zip(self._spatial(shape), self.kernel_size, pads, self.strides, self.dilation_rate)]
        return self._with_spatial(shape, spatial, self.filters)

    def call(self, inputs: Any) -> Any:
        x = tf.convert_to_tensor(inputs)
        out_shape = self.compute_output_shape(tuple(x.shape.as_list()))
        y = conv_ops.conv_transpose(x, self.kernel, out_shape, self.strides, self.padding.upper(), self._tf_format(),
                                    self.dilation_rate)
        return self._finish(y)

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.pop("groups")
        return {**config, "output_padding": self.output_padding}


class Conv1DTranspose(_ConvTranspose):
    """Transposed 1-D convolution (``kernel [k, filters, channels]``)."""

    rank = 1


class Conv2DTranspose(_ConvTranspose):
    """Transposed 2-D convolution (``kernel [kh, kw, filters, channels]``)."""

    rank = 2


class DepthwiseConv2D(_Conv):
    """Each input channel convolved with its own ``depth_multiplier`` filters (no mixing)."""

    def __init__(self, kernel_size: Any, strides: Any = 1, padding: str = "valid", depth_multiplier: int = 1,
                 data_format: str | None = None, dilation_rate: Any = 1, activation: Any = None,
                 use_bias: bool = True, depthwise_initializer: Any = "glorot_uniform",
                 bias_initializer: Any = "zeros", depthwise_regularizer: Any = None, bias_regularizer: Any = None,
                 activity_regularizer: Any = None, depthwise_constraint: Any = None, bias_constraint: Any = None,
                 **kwargs: Any) -> None:
        super().__init__(None, kernel_size, strides, padding, data_format, dilation_rate, 1, activation, use_bias,
                         depthwise_initializer, bias_initializer, depthwise_regularizer, bias_regularizer,
                         activity_regularizer, depthwise_constraint, bias_constraint, **kwargs)
        self.depth_multiplier = int(depth_multiplier)

    def build(self, input_shape: Any) -> None:
        channels = self._channels(input_shape)
        self.filters = channels * self.depth_multiplier
        self.depthwise_kernel = self.add_weight(
            "depthwise_kernel", shape=(*self.kernel_size, channels, self.depth_multiplier),
            initializer=self.kernel_initializer, regularizer=self.kernel_regularizer,
            constraint=self.kernel_constraint)
        self.bias = self.add_weight("bias", shape=(self.filters,), initializer=self.bias_initializer,
                                    regularizer=self.bias_regularizer, constraint=self.bias_constraint) \
            if self.use_bias else None
        self._build_input_shape = input_shape
        self.built = True

    def call(self, inputs: Any) -> Any:
        y = conv_ops.depthwise_conv2d(inputs, self.depthwise_kernel, (1, *self.strides, 1), self.padding.upper(),
                                      self._tf_format(), self.dilation_rate)
        return self._finish(y)

    def compute_output_shape(self, input_shape: Any) -> Any:
        shape = as_shape_tuple(input_shape)
        spatial = [conv_output_length(d, k, self.padding, s, r) for d, k, s, r in
                   zip(self._spatial(shape), self.kernel_size, self.strides, self.dilation_rate)]
        return self._with_spatial(shape, spatial, self._channels(shape) * self.depth_multiplier)

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        for key in ("filters", "groups"):
            config.pop(key)
        config["depthwise_initializer"] = config.pop("kernel_initializer")
        config["depthwise_regularizer"] = config.pop("kernel_regularizer")
        config["depthwise_constraint"] = config.pop("kernel_constraint")
        return {**config, "depth_multiplier": self.depth_multiplier}


class _SeparableConv(_Conv):
    """A depthwise convolution followed by a pointwise (1x1) one."""

    def __init__(self, filters: int, kernel_size: Any, strides: Any = 1, padding: str = "valid",
                 data_format: str | None = None, dilation_rate: Any = 1, depth_multiplier: int = 1,
                 activation: Any = None, use_bias: bool = True, depthwise_initializer: Any = "glorot_uniform",
                 pointwise_initializer: Any = "glorot_uniform", bias_initializer: Any = "zeros",
                 depthwise_regularizer: Any = None, pointwise_regularizer: Any = None, bias_regularizer: Any = None,
                 activity_regularizer: Any = None, depthwise_constraint: Any = None, pointwise_constraint: Any = None,
                 bias_constraint: Any = None, **kwargs: Any) -> None:
        super().__init__(filters, kernel_size, strides, padding, data_format, dilation_rate, 1, activation,
                         use_bias, depthwise_initializer, bias_initializer, depthwise_regularizer, bias_regularizer,
                         activity_regularizer, depthwise_constraint, bias_constraint, **kwargs)
        self.depth_multiplier = int(depth_multiplier)
        self.pointwise_initializer = initializers.get(pointwise_initializer)
        self.pointwise_regularizer = regularizers.get(pointwise_regularizer)
        self.pointwise_constraint = constraints.get(pointwise_constraint)

    def build(self, input_shape: Any) -> None:
        channels = self._channels(input_shape)
        depth = channels * self.depth_multiplier
        self.depthwise_kernel = self.add_weight(
            "depthwise_kernel", shape=(*self.kernel_size, channels, self.depth_multiplier),
            initializer=self.kernel_initializer, regularizer=self.kernel_regularizer,
            constraint=self.kernel_constraint)
        self.pointwise_kernel = self.add_weight(
            "pointwise_kernel", shape=((1,) * self.rank + (depth, self.filters)),
            initializer=self.pointwise_initializer, regularizer=self.pointwise_regularizer,
            constraint=self.pointwise_constraint)
        self.bias = self.add_weight("bias", shape=(self.filters,), initializer=self.bias_initializer,
                                    regularizer=self.bias_regularizer, constraint=self.bias_constraint) \
            if self.use_bias else None
        self._build_input_shape = input_shape
        self.built = True

    def call(self, inputs: Any) -> Any:
        x = tf.convert_to_tensor(inputs)
        last = self.data_format == "channels_last"
        if self.rank == 1:  # a 1-D separable convolution is the 2-D one over a height of 1
            x = tf.expand_dims(x, 1 if last else 2)
        depthwise = tf.reshape(self.depthwise_kernel, [1] * (2 - self.rank) + self.depthwise_kernel.shape.as_list())
        pointwise = tf.reshape(self.pointwise_kernel, [1, 1, *self.pointwise_kernel.shape.as_list()[-2:]])
        y = conv_ops.separable_conv2d(x, depthwise, pointwise, (1, *((1,) * (2 - self.rank)), *self.strides, 1),
                                      self.padding.upper(), "NHWC" if last else "NCHW",
                                      (*((1,) * (2 - self.rank)), *self.dilation_rate))
        if self.rank == 1:
            y = tf.squeeze(y, 1 if last else 2)
        return self._finish(y)

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.pop("groups")
        config["depthwise_initializer"] = config.pop("kernel_initializer")
        config["depthwise_regularizer"] = config.pop("kernel_regularizer")
        config["depthwise_constraint"] = config.pop("kernel_constraint")
        return {**config, "depth_multiplier": self.depth_multiplier,
                "pointwise_initializer": initializers.serialize(self.pointwise_initializer),
                "pointwise_regularizer": regularizers.serialize(self.pointwise_regularizer),
                "pointwise_constraint": constraints.serialize(self.pointwise_constraint)}


class SeparableConv1D(_SeparableConv):
    """Depthwise-separable 1-D convolution."""

    rank = 1


class SeparableConv2D(_SeparableConv):
    """Depthwise-separable 2-D convolution."""

    rank = 2


# -- pooling ----------------------------------------------------------------------------------------------
class _Pooling(Layer):
    """Max or average pooling over ``rank`` spatial axes."""

    rank = 2
    _pool = staticmethod(conv_ops.max_pool)

    def __init__(self, pool_size: Any = 2, strides: Any = None, padding: str = "valid",
                 data_format: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.pool_size = normalize_tuple(pool_size, self.rank, "pool_size")
        self.strides = self.pool_size if strides is None else normalize_tuple(strides, self.rank, "strides")
        self.padding = _padding(padding, ("valid", "same"))
        self.data_format = backend.normalize_data_format(data_format)

    def call(self, inputs: Any) -> Any:
        fmt = {1: "NWC", 2: "NHWC", 3: "NDHWC"}[self.rank] if self.data_format == "channels_last" else \
            {1: "NCW", 2: "NCHW", 3: "NCDHW"}[self.rank]
        return type(self)._pool(inputs, self.pool_size, self.strides, self.padding.upper(), fmt)

    def compute_output_shape(self, input_shape: Any) -> Any:
        shape = as_shape_tuple(input_shape)
        last = self.data_format == "channels_last"
        spatial = shape[1:-1] if last else shape[2:]
        out = [conv_output_length(d, k, self.padding, s) for d, k, s in zip(spatial, self.pool_size, self.strides)]
        return (shape[0], *out, shape[-1]) if last else (shape[0], shape[1], *out)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "pool_size": self.pool_size, "strides": self.strides,
                "padding": self.padding, "data_format": self.data_format}


class MaxPooling1D(_Pooling):
    """The largest value of each window of ``pool_size`` steps."""

    rank = 1


class MaxPooling2D(_Pooling):
    """The largest value of each ``pool_size`` window."""

    rank = 2


class MaxPooling3D(_Pooling):
    """The largest value of each ``pool_size`` window of a volume."""

    rank = 3


class AveragePooling1D(_Pooling):
    """The mean of each window of ``pool_size`` steps."""

    rank = 1
    _pool = staticmethod(conv_ops.avg_pool)


class AveragePooling2D(_Pooling):
    """The mean of each ``pool_size`` window (padding not counted)."""

    rank = 2
    _pool = staticmethod(conv_ops.avg_pool)


class AveragePooling3D(_Pooling):
    """The mean of each ``pool_size`` window of a volume."""

    rank = 3
    _pool = staticmethod(conv_ops.avg_pool)


class _GlobalPooling(Layer):
    """The max or mean over every spatial axis."""

    rank = 2
    _reduce = staticmethod(tf.reduce_max)

    def __init__(self, data_format: str | None = None, keepdims: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.data_format = backend.normalize_data_format(data_format)
        self.keepdims = bool(keepdims)

    def _axes(self) -> list[int]:
        return list(range(1, 1 + self.rank)) if self.data_format == "channels_last" else \
            list(range(2, 2 + self.rank))

    def call(self, inputs: Any) -> Any:
        return type(self)._reduce(inputs, axis=self._axes(), keepdims=self.keepdims)

    def compute_output_shape(self, input_shape: Any) -> Any:
        shape = as_shape_tuple(input_shape)
        axes = self._axes()
        if self.keepdims:
            return tuple(1 if k in axes else d for k, d in enumerate(shape))
        return tuple(d for k, d in enumerate(shape) if k not in axes)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "data_format": self.data_format, "keepdims": self.keepdims}


class GlobalMaxPooling1D(_GlobalPooling):
    """The largest value over the steps."""

    rank = 1


class GlobalMaxPooling2D(_GlobalPooling):
    """The largest value over rows and columns."""

    rank = 2


class GlobalAveragePooling1D(_GlobalPooling):
    """The mean over the steps."""

    rank = 1
    _reduce = staticmethod(tf.reduce_mean)


class GlobalAveragePooling2D(_GlobalPooling):
    """The mean over rows and columns."""

    rank = 2
    _reduce = staticmethod(tf.reduce_mean)


Convolution1D, Convolution2D, Convolution3D = Conv1D, Conv2D, Conv3D
Convolution2DTranspose = Conv2DTranspose
MaxPool1D, MaxPool2D, MaxPool3D = MaxPooling1D, MaxPooling2D, MaxPooling3D
AvgPool1D, AvgPool2D, AvgPool3D = AveragePooling1D, AveragePooling2D, AveragePooling3D
GlobalMaxPool1D, GlobalMaxPool2D = GlobalMaxPooling1D, GlobalMaxPooling2D
GlobalAvgPool1D, GlobalAvgPool2D = GlobalAveragePooling1D, GlobalAveragePooling2D
