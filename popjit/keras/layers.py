"""``tf.keras.layers``: Dense, Flatten, Activation, Dropout, Reshape, Lambda, the activation layers
and the element-wise merge layers, written with TensorFlow functions (``popjit.frontend.api``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from popjit.frontend import api as tf
from popjit.keras import activations, backend, constraints, generic_utils, initializers, regularizers
from popjit.keras.base_layer import Layer, as_shape_tuple
from popjit.keras.keras_tensor import Input, InputLayer, KerasTensor, infer_output_signature  # noqa: F401

__all__ = [
    "ELU", "Activation", "Add", "Average", "Concatenate", "Dense", "Dropout", "Flatten", "Input", "InputLayer",
    "Lambda", "Layer", "LeakyReLU", "Maximum", "Minimum", "Multiply", "ReLU", "Reshape", "Softmax", "Subtract",
]


def weight_options_config(layer: Layer, prefixes: tuple[str, ...] = ("kernel", "bias")) -> dict[str, Any]:
    """The ``*_regularizer`` and ``*_constraint`` entries of a layer's config (and its activity penalty)."""
    config: dict[str, Any] = {}
    for prefix in prefixes:
        config[f"{prefix}_regularizer"] = regularizers.serialize(getattr(layer, f"{prefix}_regularizer"))
        config[f"{prefix}_constraint"] = constraints.serialize(getattr(layer, f"{prefix}_constraint"))
    config["activity_regularizer"] = regularizers.serialize(layer.activity_regularizer)
    return config


def _prod(dims: Any) -> int | None:
    dims = list(dims)
    if any(d is None for d in dims):
        return None
    return int(np.prod(dims, dtype=np.int64))


class Dense(Layer):
    """``activation(inputs @ kernel + bias)`` over the last axis of the inputs."""

    def __init__(self, units: int, activation: Any = None, use_bias: bool = True,
                 kernel_initializer: Any = "glorot_uniform", bias_initializer: Any = "zeros",
                 kernel_regularizer: Any = None, bias_regularizer: Any = None,
                 activity_regularizer: Any = None, kernel_constraint: Any = None, bias_constraint: Any = None,
                 **kwargs: Any) -> None:
        super().__init__(activity_regularizer=activity_regularizer, **kwargs)
        units = int(units)
        if units <= 0:
            raise ValueError(f"Received an invalid value for `units`, expected a positive integer, got {units}.")
        self.units = units
        self.activation = activations.get(activation)
        self.use_bias = bool(use_bias)
        self.kernel_initializer = initializers.get(kernel_initializer)
        self.bias_initializer = initializers.get(bias_initializer)
        self.kernel_regularizer = regularizers.get(kernel_regularizer)
        self.bias_regularizer = regularizers.get(bias_regularizer)
        self.kernel_constraint = constraints.get(kernel_constraint)
        self.bias_constraint = constraints.get(bias_constraint)
        self.kernel: tf.Variable | None = None
        self.bias: tf.Variable | None = None

    def build(self, input_shape: Any) -> None:
        dtype = tf.as_dtype(self.dtype)
        if not dtype.is_floating:
            raise TypeError(f"Unable to build `Dense` layer with non-floating point dtype {dtype.name}")
        shape = as_shape_tuple(input_shape)
        if not shape or shape[-1] is None:
            raise ValueError("The last dimension of the inputs to `Dense` should be defined. Found `None`.")
        self.kernel = self.add_weight("kernel", shape=(shape[-1], self.units), initializer=self.kernel_initializer,
                                      regularizer=self.kernel_regularizer, constraint=self.kernel_constraint,
                                      dtype=dtype, trainable=True)
        if self.use_bias:
            self.bias = self.add_weight("bias", shape=(self.units,), initializer=self.bias_initializer, dtype=dtype,
                                        regularizer=self.bias_regularizer, constraint=self.bias_constraint,
                                        trainable=True)
        self._build_input_shape = input_shape
        self.built = True

    def call(self, inputs: Any) -> Any:
        x = tf.convert_to_tensor(inputs)
        if x.dtype != tf.as_dtype(self.compute_dtype):
            x = tf.cast(x, self.compute_dtype)
        rank = x.shape.rank
        if rank == 2:
            out = tf.matmul(x, self.kernel)
        else:
            shape = x.shape.as_list()
            flat = tf.reshape(x, (-1, shape[-1]))
            out = tf.reshape(tf.matmul(flat, self.kernel), shape[:-1] + [self.units])
        if self.use_bias:
            out = out + self.bias
        if self.activation is not activations.linear:
            out = self.activation(out)
        return out

    def compute_output_shape(self, input_shape: Any) -> Any:
        shape = as_shape_tuple(input_shape)
        if not shape or shape[-1] is None:
            raise ValueError(f"The innermost dimension of input_shape must be defined, but saw: {shape}")
        return shape[:-1] + (self.units,)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "units": self.units, "activation": activations.serialize(self.activation),
                "use_bias": self.use_bias, "kernel_initializer": initializers.serialize(self.kernel_initializer),
                "bias_initializer": initializers.serialize(self.bias_initializer), **weight_options_config(self)}


class Flatten(Layer):
    """Reshape each example to a vector (a rank-1 input becomes ``[batch, 1]``)."""

    def __init__(self, data_format: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.data_format = data_format or backend.image_data_format()

    def call(self, inputs: Any) -> Any:
        x = tf.convert_to_tensor(inputs)
        rank = x.shape.rank
        if self.data_format == "channels_first" and rank >= 3:
            x = tf.transpose(x, [0] + list(range(2, rank)) + [1])
        if rank == 1:
            return tf.expand_dims(x, 1)
        shape = x.shape.as_list()
        return tf.reshape(x, (shape[0], _prod(shape[1:])))

    def compute_output_shape(self, input_shape: Any) -> Any:
        shape = as_shape_tuple(input_shape)
        if len(shape) == 1:
            return (shape[0], 1)
        return (shape[0], _prod(shape[1:]))

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "data_format": self.data_format}


class Activation(Layer):
    """Apply an activation function (by name or callable)."""

    def __init__(self, activation: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.activation = activations.get(activation)

    def call(self, inputs: Any) -> Any:
        return self.activation(inputs)

    def compute_output_shape(self, input_shape: Any) -> Any:
        return input_shape

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "activation": activations.serialize(self.activation)}


class Dropout(Layer):
    """In training, zero each element with probability ``rate`` and scale the rest by ``1 / (1 - rate)``;
    at inference, the identity. The mask is drawn from ``tf.random.uniform`` with the layer's seed, so a
    compiled step draws a new mask on every iteration and execution."""

    def __init__(self, rate: float, noise_shape: Any = None, seed: int | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if isinstance(rate, (int, float)) and not 0 <= rate <= 1:
            raise ValueError(f"Invalid value {rate} received for `rate`, expected a value between 0 and 1.")
        self.rate = rate
        self.noise_shape = noise_shape
        self.seed = seed

    def _noise_shape(self, x: Any) -> list[int]:
        shape = x.shape.as_list()
        if self.noise_shape is None:
            return shape
        return [s if n is None else int(n) for n, s in zip(self.noise_shape, shape)]

    def _dropped(self, x: Any) -> Any:
        return tf.nn.dropout(x, self.rate, noise_shape=self._noise_shape(x), seed=self.seed)

    def call(self, inputs: Any, training: Any = None) -> Any:
        x = tf.convert_to_tensor(inputs)
        if isinstance(self.rate, (int, float)) and self.rate == 0:
            return x
        return backend.in_training(training, lambda: self._dropped(x), lambda: x)

    def compute_output_shape(self, input_shape: Any) -> Any:
        return input_shape

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "rate": self.rate, "noise_shape": self.noise_shape, "seed": self.seed}


class Reshape(Layer):
    """Reshape each example to ``target_shape`` (one entry may be -1)."""

    def __init__(self, target_shape: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.target_shape = tuple(int(d) for d in target_shape)

    def _resolved(self, input_shape: tuple[int | None, ...]) -> tuple[int | None, ...]:
        target = list(self.target_shape)
        total = _prod(input_shape[1:])
        if -1 in target:
            known = _prod([d for d in target if d != -1])
            if total is not None:
                if known == 0 or total % known:
                    raise ValueError(f"total size of new array must be unchanged, input_shape = "
                                     f"{list(input_shape[1:])}, output_shape = {list(self.target_shape)}")
                target[target.index(-1)] = total // known
            else:
                target[target.index(-1)] = None  # type: ignore[call-overload]
        elif total is not None and total != _prod(target):
            raise ValueError(f"total size of new array must be unchanged, input_shape = {list(input_shape[1:])}, "
                             f"output_shape = {list(self.target_shape)}")
        return tuple(target)

    def call(self, inputs: Any) -> Any:
        x = tf.convert_to_tensor(inputs)
        shape = x.shape.as_list()
        return tf.reshape(x, (shape[0],) + self._resolved(tuple(shape)))

    def compute_output_shape(self, input_shape: Any) -> Any:
        shape = as_shape_tuple(input_shape)
        return (shape[0],) + self._resolved(shape)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "target_shape": self.target_shape}


class Lambda(Layer):
    """Wrap a function of tensors as a layer (no weights)."""

    def __init__(self, function: Callable[..., Any], output_shape: Any = None, mask: Any = None,
                 arguments: dict[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.function = function
        self.arguments = dict(arguments or {})
        self._lambda_output_shape = output_shape

    def call(self, inputs: Any) -> Any:
        return self.function(inputs, **self.arguments)

    def compute_output_shape(self, input_shape: Any) -> Any:
        spec = self._lambda_output_shape
        if spec is None:
            return super().compute_output_shape(input_shape)
        if callable(spec):
            return as_shape_tuple(spec(input_shape))
        return (as_shape_tuple(input_shape)[0],) + as_shape_tuple(spec)

    def compute_output_signature(self, input_shape: Any, input_dtype: Any) -> tuple[Any, Any]:
        if self._lambda_output_shape is not None:
            return super().compute_output_signature(input_shape, input_dtype)

        return infer_output_signature(self, input_shape, input_dtype)


class ReLU(Layer):
    """Rectified linear unit with an optional cap, slope below the threshold, and threshold."""

    def __init__(self, max_value: float | None = None, negative_slope: float = 0.0, threshold: float = 0.0,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if max_value is not None and max_value < 0.0:
            raise ValueError(f"max_value of a ReLU layer cannot be a negative value. Received: {max_value}")
        if negative_slope < 0.0:
            raise ValueError(f"negative_slope of a ReLU layer cannot be a negative value. Received: {negative_slope}")
        self.max_value, self.negative_slope, self.threshold = max_value, negative_slope, threshold

    def call(self, inputs: Any) -> Any:
        return activations.relu(inputs, alpha=self.negative_slope, max_value=self.max_value, threshold=self.threshold)

    def compute_output_shape(self, input_shape: Any) -> Any:
        return input_shape

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "max_value": self.max_value, "negative_slope": self.negative_slope,
                "threshold": self.threshold}


class LeakyReLU(Layer):
    """``x`` for positive values, ``alpha * x`` otherwise (``alpha`` 0.3 by default)."""

    def __init__(self, alpha: float = 0.3, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.alpha = float(alpha)

    def call(self, inputs: Any) -> Any:
        return activations.leaky_relu(inputs, self.alpha)

    def compute_output_shape(self, input_shape: Any) -> Any:
        return input_shape

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "alpha": self.alpha}


class ELU(Layer):
    """Exponential linear unit with slope ``alpha``."""

    def __init__(self, alpha: float = 1.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.alpha = float(alpha)

    def call(self, inputs: Any) -> Any:
        return activations.elu(inputs, self.alpha)

    def compute_output_shape(self, input_shape: Any) -> Any:
        return input_shape

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "alpha": self.alpha}


class Softmax(Layer):
    """Softmax along ``axis``."""

    def __init__(self, axis: int = -1, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.axis = axis

    def call(self, inputs: Any) -> Any:
        return tf.nn.softmax(inputs, axis=self.axis)

    def compute_output_shape(self, input_shape: Any) -> Any:
        return input_shape

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "axis": self.axis}


class _Merge(Layer):
    """Combine a list of same-shaped (broadcastable) tensors element-wise."""

    def _merge(self, a: Any, b: Any) -> Any:
        raise NotImplementedError

    def call(self, inputs: Any) -> Any:
        if not isinstance(inputs, (list, tuple)) or len(inputs) < 2:
            raise ValueError(f"A merge layer should be called on a list of at least 2 inputs. Got {inputs}")
        out = inputs[0]
        for x in inputs[1:]:
            out = self._merge(out, x)
        return out

    def compute_output_shape(self, input_shape: Any) -> Any:
        shapes = [as_shape_tuple(s) for s in input_shape]
        return tuple(np.broadcast_shapes(*[tuple(1 if d is None else d for d in s) for s in shapes])) \
            if all(None not in s for s in shapes) else shapes[0]


class Add(_Merge):
    """Sum of the inputs."""

    def _merge(self, a: Any, b: Any) -> Any:
        return a + b


class Subtract(_Merge):
    """The first input minus the second."""

    def call(self, inputs: Any) -> Any:
        if not isinstance(inputs, (list, tuple)) or len(inputs) != 2:
            raise ValueError("A `Subtract` layer should be called on exactly 2 inputs")
        return inputs[0] - inputs[1]


class Multiply(_Merge):
    """Product of the inputs."""

    def _merge(self, a: Any, b: Any) -> Any:
        return a * b


class Maximum(_Merge):
    """Element-wise maximum of the inputs."""

    def _merge(self, a: Any, b: Any) -> Any:
        return tf.maximum(a, b)


class Minimum(_Merge):
    """Element-wise minimum of the inputs."""

    def _merge(self, a: Any, b: Any) -> Any:
        return tf.minimum(a, b)


class Average(_Merge):
    """Mean of the inputs."""

    def call(self, inputs: Any) -> Any:
        return super().call(inputs) / float(len(inputs))

    def _merge(self, a: Any, b: Any) -> Any:
        return a + b


class Concatenate(Layer):
    """Join the inputs along ``axis``."""

    def __init__(self, axis: int = -1, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.axis = axis

    def call(self, inputs: Any) -> Any:
        return tf.concat(list(inputs), axis=self.axis)

    def compute_output_shape(self, input_shape: Any) -> Any:
        shapes = [list(as_shape_tuple(s)) for s in input_shape]
        out = list(shapes[0])
        axis = self.axis % len(out)
        sizes = [s[axis] for s in shapes]
        out[axis] = None if any(d is None for d in sizes) else sum(sizes)
        return tuple(out)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "axis": self.axis}


def serialize(layer: Layer) -> dict[str, Any]:
    """``{'class_name': ..., 'config': ...}`` for :func:`deserialize` (a registered class by its registered name)."""
    return {"class_name": generic_utils.config_class_name(layer), "config": layer.get_config()}


def deserialize(config: dict[str, Any], custom_objects: dict[str, Any] | None = None) -> Layer:
    """A new layer from a :func:`serialize` dict (models included)."""
    name = config["class_name"]
    # why: the registry and models are built on this module (importing them at the top would be circular)
    from popjit.keras import models
    from popjit.keras.layer_registry import LAYERS

    cls = generic_utils.get_registered_object(name, custom_objects) or LAYERS.get(name) or getattr(models, name, None)
    if not (isinstance(cls, type) and issubclass(cls, Layer)):
        raise ValueError(f"Unknown layer: {name}. Please ensure this object is passed to the `custom_objects` "
                         "argument.")
    with generic_utils.custom_object_scope(custom_objects):  # nested configs find the user's objects too
        return cls.from_config(dict(config.get("config", {})))

