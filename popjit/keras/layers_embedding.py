"""Embedding, the noise and regularization layers (SpatialDropout1D/2D, GaussianNoise,
GaussianDropout, ActivityRegularization) and Rescaling."""

from __future__ import annotations

from typing import Any

from popjit.frontend import api as tf
from popjit.keras import backend, constraints, initializers, regularizers
from popjit.keras.base_layer import Layer, as_shape_tuple
from popjit.keras.layers import Dropout

__all__ = [
    "ActivityRegularization",
    "Embedding",
    "GaussianDropout",
    "GaussianNoise",
    "Rescaling",
    "SpatialDropout1D",
    "SpatialDropout2D",
]



class Embedding(Layer):
    """Rows of a trainable ``[input_dim, output_dim]`` table picked by integer indices."""

    def __init__(self, input_dim: int, output_dim: int, embeddings_initializer: Any = "uniform",
                 embeddings_regularizer: Any = None, activity_regularizer: Any = None,
                 embeddings_constraint: Any = None, mask_zero: bool = False, input_length: Any = None,
                 **kwargs: Any) -> None:
        if input_length is not None and "input_shape" not in kwargs:
            kwargs["input_shape"] = (input_length,) if isinstance(input_length, int) else tuple(input_length)
        kwargs.setdefault("autocast", False)
        super().__init__(activity_regularizer=activity_regularizer, **kwargs)
        if int(input_dim) <= 0 or int(output_dim) <= 0:
            raise ValueError(f"Both `input_dim` and `output_dim` should be positive, found input_dim {input_dim} and "
                             f"output_dim {output_dim}")
        if mask_zero:
            raise tf.errors.UnimplementedError(
                "Embedding(mask_zero=True) needs Keras masking, which popjit does not implement: pad sequences to "
                "one length and let the model learn the padding token instead.")
        self.input_dim, self.output_dim = int(input_dim), int(output_dim)
        self.embeddings_initializer = initializers.get(embeddings_initializer)
        self.embeddings_regularizer = regularizers.get(embeddings_regularizer)
        self.embeddings_constraint = constraints.get(embeddings_constraint)
        self.mask_zero = False
        self.input_length = input_length

    def build(self, input_shape: Any) -> None:
        self.embeddings = self.add_weight("embeddings", shape=(self.input_dim, self.output_dim),
                                          initializer=self.embeddings_initializer,
                                          regularizer=self.embeddings_regularizer,
                                          constraint=self.embeddings_constraint)
        self._build_input_shape = input_shape
        self.built = True

    def call(self, inputs: Any) -> Any:
        ids = tf.convert_to_tensor(inputs)
        if not ids.dtype.is_integer:
            ids = tf.cast(ids, tf.int32)
        return tf.gather(self.embeddings, ids)

    def compute_output_shape(self, input_shape: Any) -> Any:
        return (*as_shape_tuple(input_shape), self.output_dim)

    def compute_output_signature(self, input_shape: Any, input_dtype: Any) -> tuple[Any, Any]:
        return self.compute_output_shape(input_shape), self.compute_dtype

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "input_dim": self.input_dim, "output_dim": self.output_dim,
                "embeddings_initializer": initializers.serialize(self.embeddings_initializer),
                "embeddings_regularizer": regularizers.serialize(self.embeddings_regularizer),
                "activity_regularizer": regularizers.serialize(self.activity_regularizer),
                "embeddings_constraint": constraints.serialize(self.embeddings_constraint),
                "mask_zero": self.mask_zero, "input_length": self.input_length}


class SpatialDropout1D(Dropout):
    """Dropout of whole feature channels of ``[batch, steps, channels]`` (one mask per example)."""

    def __init__(self, rate: float, **kwargs: Any) -> None:
        super().__init__(rate, **kwargs)

    def _noise_shape(self, x: Any) -> list[int]:
        shape = x.shape.as_list()
        return [shape[0], 1, shape[2]]


class SpatialDropout2D(Dropout):
    """Dropout of whole feature maps of an image (one mask per example and channel)."""

    def __init__(self, rate: float, data_format: str | None = None, **kwargs: Any) -> None:
        super().__init__(rate, **kwargs)
        self.data_format = backend.normalize_data_format(data_format)

    def _noise_shape(self, x: Any) -> list[int]:
        shape = x.shape.as_list()
        return [shape[0], 1, 1, shape[3]] if self.data_format == "channels_last" else [shape[0], shape[1], 1, 1]

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "data_format": self.data_format}


class _TrainingNoise(Layer):
    """A layer that changes its inputs in training only."""

    def _noisy(self, x: Any) -> Any:
        raise NotImplementedError

    def call(self, inputs: Any, training: Any = None) -> Any:
        x = tf.convert_to_tensor(inputs)
        return backend.in_training(training, lambda: self._noisy(x), lambda: x)

    def compute_output_shape(self, input_shape: Any) -> Any:
        return input_shape


class GaussianNoise(_TrainingNoise):
    """Add ``N(0, stddev)`` noise in training."""

    def __init__(self, stddev: float, seed: int | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.stddev, self.seed = float(stddev), seed

    def _noisy(self, x: Any) -> Any:
        return x + tf.random.normal(x.shape.as_list(), stddev=self.stddev, dtype=x.dtype, seed=self.seed)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "stddev": self.stddev, "seed": self.seed}


class GaussianDropout(_TrainingNoise):
    """Multiply by ``N(1, sqrt(rate / (1 - rate)))`` noise in training."""

    def __init__(self, rate: float, seed: int | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.rate, self.seed = float(rate), seed

    def _noisy(self, x: Any) -> Any:
        if not 0 < self.rate < 1:
            return x
        stddev = (self.rate / (1.0 - self.rate)) ** 0.5
        return x * tf.random.normal(x.shape.as_list(), mean=1.0, stddev=stddev, dtype=x.dtype, seed=self.seed)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "rate": self.rate, "seed": self.seed}


class ActivityRegularization(Layer):
    """The identity, adding an L1/L2 penalty on its inputs to the model's losses."""

    def __init__(self, l1: float = 0.0, l2: float = 0.0, **kwargs: Any) -> None:
        super().__init__(activity_regularizer=regularizers.L1L2(l1=l1, l2=l2), **kwargs)
        self.l1, self.l2 = float(l1), float(l2)

    def compute_output_shape(self, input_shape: Any) -> Any:
        return input_shape

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "l1": self.l1, "l2": self.l2}


class Rescaling(Layer):
    """``inputs * scale + offset`` (as a float)."""

    def __init__(self, scale: float, offset: float = 0.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.scale, self.offset = scale, offset

    def call(self, inputs: Any) -> Any:
        x = tf.cast(inputs, self.compute_dtype)
        return x * tf.cast(self.scale, self.compute_dtype) + tf.cast(self.offset, self.compute_dtype)

    def compute_output_shape(self, input_shape: Any) -> Any:
        return input_shape

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "scale": self.scale, "offset": self.offset}
