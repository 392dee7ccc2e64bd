"""Normalization layers: BatchNormalization (batch statistics in training, moving averages at
inference) and LayerNormalization (statistics of each example), with Keras 2.6's defaults."""

from __future__ import annotations

from typing import Any

from popjit.frontend import api as tf
from popjit.keras import backend, constraints, initializers, regularizers
from popjit.keras.base_layer import Layer, as_shape_tuple

__all__ = [
    "BatchNormalization",
    "LayerNormalization",
]



def _axes(axis: Any, ndim: int, layer: str) -> list[int]:
    axes = [axis] if isinstance(axis, int) else list(axis)
    out = sorted({a % ndim for a in axes})
    if any(not -ndim <= a < ndim for a in axes):
        raise ValueError(f"Invalid axis for {layer}: {axis} (the input has rank {ndim})")
    return out


class _Normalization(Layer):
    """The shared part: the normalized axes, ``gamma`` (scale) and ``beta`` (center)."""

    def __init__(self, axis: Any, epsilon: float, center: bool, scale: bool, beta_initializer: Any,
                 gamma_initializer: Any, beta_regularizer: Any, gamma_regularizer: Any, beta_constraint: Any,
                 gamma_constraint: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.axis = axis if isinstance(axis, int) else list(axis)
        self.epsilon = float(epsilon)
        self.center, self.scale = bool(center), bool(scale)
        self.beta_initializer = initializers.get(beta_initializer)
        self.gamma_initializer = initializers.get(gamma_initializer)
        self.beta_regularizer = regularizers.get(beta_regularizer)
        self.gamma_regularizer = regularizers.get(gamma_regularizer)
        self.beta_constraint = constraints.get(beta_constraint)
        self.gamma_constraint = constraints.get(gamma_constraint)
        self.gamma = self.beta = None

    def _param_shape(self, input_shape: Any) -> tuple[tuple[int, ...], list[int]]:
        shape = as_shape_tuple(input_shape)
        axes = _axes(self.axis, len(shape), type(self).__name__)
        for a in axes:
            if shape[a] is None:
                raise ValueError(f"Axis {a} of input tensor should have a defined dimension but the layer received "
                                 f"an input with shape {shape}.")
        return tuple(int(shape[a]) for a in axes), axes

    def _add_scale_center(self, param_shape: tuple[int, ...]) -> None:
        # float16 layers keep float32 parameters, read as float32 (normalization computes in float32)
        dtype = tf.float32 if tf.as_dtype(self.dtype) == tf.float16 else self.dtype
        if self.scale:
            self.gamma = self.add_weight("gamma", shape=param_shape, dtype=dtype, initializer=self.gamma_initializer,
                                         regularizer=self.gamma_regularizer, constraint=self.gamma_constraint,
                                         experimental_autocast=False)
        if self.center:
            self.beta = self.add_weight("beta", shape=param_shape, dtype=dtype, initializer=self.beta_initializer,
                                        regularizer=self.beta_regularizer, constraint=self.beta_constraint,
                                        experimental_autocast=False)

    def _broadcast(self, param: Any, ndim: int, axes: list[int], dtype: Any) -> Any:
        if param is None:
            return None
        shape = [1] * ndim
        for a, d in zip(axes, param.shape.as_list()):
            shape[a] = d
        value = tf.cast(param, dtype) if param.dtype != dtype else param
        return tf.reshape(value, shape)

    def compute_output_shape(self, input_shape: Any) -> Any:
        return input_shape

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "axis": self.axis, "epsilon": self.epsilon, "center": self.center,
                "scale": self.scale, "beta_initializer": initializers.serialize(self.beta_initializer),
                "gamma_initializer": initializers.serialize(self.gamma_initializer),
                "beta_regularizer": regularizers.serialize(self.beta_regularizer),
                "gamma_regularizer": regularizers.serialize(self.gamma_regularizer),
                "beta_constraint": constraints.serialize(self.beta_constraint),
                "gamma_constraint": constraints.serialize(self.gamma_constraint)}


class BatchNormalization(_Normalization):
    """Normalize with the batch's mean and variance in training (and fold them into the moving
    averages: ``moving = moving * momentum + batch * (1 - momentum)``), with the moving averages at
    inference. A frozen layer (``trainable = False``) always runs in inference mode, as in Keras 2."""

    def __init__(self, axis: Any = -1, momentum: float = 0.99, epsilon: float = 1e-3, center: bool = True,
                 scale: bool = True, beta_initializer: Any = "zeros", gamma_initializer: Any = "ones",
                 moving_mean_initializer: Any = "zeros", moving_variance_initializer: Any = "ones",
                 beta_regularizer: Any = None, gamma_regularizer: Any = None, beta_constraint: Any = None,
                 gamma_constraint: Any = None, renorm: bool = False, renorm_clipping: Any = None,
                 renorm_momentum: float = 0.99, fused: Any = None, trainable: bool = True,
                 virtual_batch_size: Any = None, adjustment: Any = None, name: str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(axis, epsilon, center, scale, beta_initializer, gamma_initializer, beta_regularizer,
                         gamma_regularizer, beta_constraint, gamma_constraint, trainable=trainable, name=name,
                         **kwargs)
        unsupported = {"renorm": renorm, "virtual_batch_size": virtual_batch_size, "adjustment": adjustment}
        for key, value in unsupported.items():
            if value:
                raise tf.errors.UnimplementedError(f"BatchNormalization({key}=...) is not supported by popjit.")
        self.momentum = float(momentum)
        self.moving_mean_initializer = initializers.get(moving_mean_initializer)
        self.moving_variance_initializer = initializers.get(moving_variance_initializer)
        self.fused = fused

    def build(self, input_shape: Any) -> None:
        param_shape, self._norm_axes = self._param_shape(input_shape)
        self._add_scale_center(param_shape)
        dtype = tf.float32 if tf.as_dtype(self.dtype) == tf.float16 else self.dtype
        self.moving_mean = self.add_weight("moving_mean", shape=param_shape, dtype=dtype,
                                           initializer=self.moving_mean_initializer, trainable=False,
                                           experimental_autocast=False)
        self.moving_variance = self.add_weight("moving_variance", shape=param_shape, dtype=dtype,
                                               initializer=self.moving_variance_initializer, trainable=False,
                                               experimental_autocast=False)
        self._build_input_shape = input_shape
        self.built = True

    def call(self, inputs: Any, training: Any = None) -> Any:
        x = tf.convert_to_tensor(inputs)
        return backend.in_training(training if self.trainable else False, lambda: self._train(x),
                                   lambda: self._infer(x))

    def _reduction_axes(self, ndim: int) -> list[int]:
        return [a for a in range(ndim) if a not in self._norm_axes]

    def _normalize(self, x: Any, mean: Any, variance: Any) -> Any:
        """``x`` normalized; float16 in float32, as Keras does, and cast back."""
        axes, ndim = self._norm_axes, x.shape.rank
        wide = tf.cast(x, tf.float32) if x.dtype == tf.float16 else x
        y = tf.nn.batch_normalization(
            wide, self._broadcast(mean, ndim, axes, wide.dtype), self._broadcast(variance, ndim, axes, wide.dtype),
            self._broadcast(self.beta, ndim, axes, wide.dtype), self._broadcast(self.gamma, ndim, axes, wide.dtype),
            self.epsilon)
        return tf.cast(y, x.dtype) if y.dtype != x.dtype else y

    def _train(self, x: Any) -> Any:
        stats_x = tf.cast(x, self.moving_mean.dtype) if x.dtype != self.moving_mean.dtype else x
        mean, variance = tf.nn.moments(stats_x, self._reduction_axes(x.shape.rank))
        for var, value in ((self.moving_mean, mean), (self.moving_variance, variance)):
            var.assign(var * self.momentum + tf.stop_gradient(value) * (1.0 - self.momentum))
        return self._normalize(x, mean, variance)

    def _infer(self, x: Any) -> Any:
        return self._normalize(x, self.moving_mean, self.moving_variance)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "momentum": self.momentum,
                "moving_mean_initializer": initializers.serialize(self.moving_mean_initializer),
                "moving_variance_initializer": initializers.serialize(self.moving_variance_initializer)}


class LayerNormalization(_Normalization):
    """Normalize each example over ``axis`` (the last by default) with its own mean and variance."""

    def __init__(self, axis: Any = -1, epsilon: float = 1e-3, center: bool = True, scale: bool = True,
                 beta_initializer: Any = "zeros", gamma_initializer: Any = "ones", beta_regularizer: Any = None,
                 gamma_regularizer: Any = None, beta_constraint: Any = None, gamma_constraint: Any = None,
                 **kwargs: Any) -> None:
        super().__init__(axis, epsilon, center, scale, beta_initializer, gamma_initializer, beta_regularizer,
                         gamma_regularizer, beta_constraint, gamma_constraint, **kwargs)

    def build(self, input_shape: Any) -> None:
        param_shape, self._norm_axes = self._param_shape(input_shape)
        self._add_scale_center(param_shape)
        self._build_input_shape = input_shape
        self.built = True

    def call(self, inputs: Any) -> Any:
        x = tf.convert_to_tensor(inputs)
        stats_x = tf.cast(x, tf.float32) if x.dtype == tf.float16 else x
        mean, variance = tf.nn.moments(stats_x, self._norm_axes, keepdims=True)
        ndim = x.shape.rank
        y = tf.nn.batch_normalization(stats_x, mean, variance,
                                      self._broadcast(self.beta, ndim, self._norm_axes, stats_x.dtype),
                                      self._broadcast(self.gamma, ndim, self._norm_axes, stats_x.dtype),
                                      self.epsilon)
        return tf.cast(y, x.dtype) if y.dtype != x.dtype else y
