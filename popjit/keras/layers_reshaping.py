"""Layers that move or repeat elements: Permute, RepeatVector, ZeroPadding1D/2D, Cropping1D/2D,
UpSampling1D/2D."""

from __future__ import annotations

from typing import Any

from popjit.frontend import api as tf
from popjit.keras import backend
from popjit.keras.base_layer import Layer, as_shape_tuple

__all__ = [
    "Cropping1D",
    "Cropping2D",
    "Permute",
    "RepeatVector",
    "UpSampling1D",
    "UpSampling2D",
    "ZeroPadding1D",
    "ZeroPadding2D",
]



class Permute(Layer):
    """Reorder the non-batch axes: ``dims`` is a permutation of ``1..rank-1``."""

    def __init__(self, dims: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.dims = tuple(int(d) for d in dims)
        if sorted(self.dims) != list(range(1, len(self.dims) + 1)):
            raise ValueError(f"Invalid permutation argument `dims` for Permute Layer. The set of indices in `dims` "
                             f"must be consecutive and start from 1. Received dims={dims}")

    def call(self, inputs: Any) -> Any:
        return tf.transpose(inputs, (0, *self.dims))

    def compute_output_shape(self, input_shape: Any) -> Any:
        shape = as_shape_tuple(input_shape)
        return (shape[0], *(shape[d] for d in self.dims))

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "dims": self.dims}


class RepeatVector(Layer):
    """``[batch, features] -> [batch, n, features]``."""

    def __init__(self, n: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.n = int(n)

    def call(self, inputs: Any) -> Any:
        return tf.tile(tf.expand_dims(inputs, 1), [1, self.n, 1])

    def compute_output_shape(self, input_shape: Any) -> Any:
        shape = as_shape_tuple(input_shape)
        return (shape[0], self.n, shape[1])

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "n": self.n}


def _pairs(value: Any, n: int, name: str) -> tuple[tuple[int, int], ...]:
    """An int (both sides of every axis), ``n`` ints (both sides per axis) or ``n`` pairs."""
    if isinstance(value, int):
        return ((value, value),) * n
    items = list(value)
    if len(items) != n:
        raise ValueError(f"`{name}` should have {n} elements. Received: {value}.")
    return tuple((int(v), int(v)) if isinstance(v, int) else (int(v[0]), int(v[1])) for v in items)


class _SpatialLayer(Layer):
    """A layer over ``rank`` spatial axes in ``data_format``."""

    rank = 2

    def __init__(self, data_format: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.data_format = "channels_last" if self.rank == 1 else backend.normalize_data_format(data_format)

    def _spatial_axes(self) -> list[int]:
        return list(range(1, 1 + self.rank)) if self.data_format == "channels_last" else \
            list(range(2, 2 + self.rank))

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        return config if self.rank == 1 else {**config, "data_format": self.data_format}


class _ZeroPadding(_SpatialLayer):
    """Zeros around the spatial axes."""

    def __init__(self, padding: Any = 1, data_format: str | None = None, **kwargs: Any) -> None:
        super().__init__(data_format, **kwargs)
        self.padding = _pairs(padding, self.rank, "padding")

    def call(self, inputs: Any) -> Any:
        x = tf.convert_to_tensor(inputs)
        pads = [[0, 0] for _ in range(x.shape.rank)]
        for axis, pair in zip(self._spatial_axes(), self.padding):
            pads[axis] = list(pair)
        return tf.pad(x, pads)

    def compute_output_shape(self, input_shape: Any) -> Any:
        shape = list(as_shape_tuple(input_shape))
        for axis, (lo, hi) in zip(self._spatial_axes(), self.padding):
            shape[axis] = None if shape[axis] is None else shape[axis] + lo + hi
        return tuple(shape)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "padding": self.padding}


class ZeroPadding1D(_ZeroPadding):
    """Zeros before and after the steps of ``[batch, steps, features]``."""

    rank = 1


class ZeroPadding2D(_ZeroPadding):
    """Zeros around the rows and columns of an image."""

    rank = 2


class _Cropping(_SpatialLayer):
    """Remove ``cropping`` elements from both ends of each spatial axis."""

    def __init__(self, cropping: Any = 1, data_format: str | None = None, **kwargs: Any) -> None:
        super().__init__(data_format, **kwargs)
        self.cropping = _pairs(cropping, self.rank, "cropping")

    def call(self, inputs: Any) -> Any:
        x = tf.convert_to_tensor(inputs)
        shape = x.shape.as_list()
        begin, size = [0] * len(shape), list(shape)
        for axis, (lo, hi) in zip(self._spatial_axes(), self.cropping):
            begin[axis], size[axis] = lo, shape[axis] - lo - hi
        return tf.slice(x, begin, size)

    def compute_output_shape(self, input_shape: Any) -> Any:
        shape = list(as_shape_tuple(input_shape))
        for axis, (lo, hi) in zip(self._spatial_axes(), self.cropping):
            shape[axis] = None if shape[axis] is None else shape[axis] - lo - hi
        return tuple(shape)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "cropping": self.cropping}


class Cropping1D(_Cropping):
    """Crop the steps of ``[batch, steps, features]``."""

    rank = 1


class Cropping2D(_Cropping):
    """Crop the rows and columns of an image."""

    rank = 2


class _UpSampling(_SpatialLayer):
    """Repeat each element ``size`` times along each spatial axis (nearest neighbour)."""

    def __init__(self, size: Any = 2, data_format: str | None = None, interpolation: str = "nearest",
                 **kwargs: Any) -> None:
        super().__init__(data_format, **kwargs)
        self.size = (int(size),) * self.rank if isinstance(size, int) else tuple(int(s) for s in size)
        if interpolation != "nearest":
            raise tf.errors.UnimplementedError(f"UpSampling2D(interpolation={interpolation!r}) is not supported by "
                                               "popjit; only 'nearest' is.")
        self.interpolation = interpolation

    def call(self, inputs: Any) -> Any:
        x = tf.convert_to_tensor(inputs)
        for axis, times in zip(self._spatial_axes(), self.size):
            if times == 1:
                continue
            shape = x.shape.as_list()
            x = tf.expand_dims(x, axis + 1)
            x = tf.tile(x, [times if k == axis + 1 else 1 for k in range(len(shape) + 1)])
            x = tf.reshape(x, shape[:axis] + [shape[axis] * times] + shape[axis + 1:])
        return x

    def compute_output_shape(self, input_shape: Any) -> Any:
        shape = list(as_shape_tuple(input_shape))
        for axis, times in zip(self._spatial_axes(), self.size):
            shape[axis] = None if shape[axis] is None else shape[axis] * times
        return tuple(shape)

    def get_config(self) -> dict[str, Any]:
        config = {**super().get_config(), "size": self.size}
        return config if self.rank == 1 else {**config, "interpolation": self.interpolation}


class UpSampling1D(_UpSampling):
    """Repeat each step ``size`` times."""

    rank = 1

    def __init__(self, size: int = 2, **kwargs: Any) -> None:
        super().__init__(size, **kwargs)


class UpSampling2D(_UpSampling):
    """Repeat each row and column ``size`` times."""

    rank = 2
