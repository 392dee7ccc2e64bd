"""``tf.keras.initializers``: how new weights are filled, as classes and by name.

A seeded initializer is a pure function of its seed (it draws from ``tf.random.stateless_*`` with
the seed pair ``[seed, 0]``), so two calls give the same values; an unseeded one draws from the
stateful ``tf.random`` generators (reproducible under ``tf.random.set_seed``). Layers compute
initial values eagerly on the host; the variable then lives on the layer's device.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from popjit.frontend import api as tf
from popjit.keras import backend

# the standard deviation of a unit normal truncated at two standard deviations
_TRUNCATED_STDDEV = 0.87962566103423978


def _dtype(dtype: Any) -> Any:
    return tf.as_dtype(dtype if dtype is not None else backend.floatx())


def compute_fans(shape: tuple[int, ...]) -> tuple[int, int]:
    """(fan_in, fan_out) of a weight shape: rows and columns of a matrix, times the receptive field of
    a convolution kernel (all but the last two axes)."""
    shape = tuple(int(d) for d in shape)
    if len(shape) < 1:
        return 1, 1
    if len(shape) == 1:
        return shape[0], shape[0]
    if len(shape) == 2:
        return shape[0], shape[1]
    receptive = int(np.prod(shape[:-2]))
    return shape[-2] * receptive, shape[-1] * receptive


class Initializer:
    """Base class: ``init(shape, dtype=None)`` returns a tensor of that shape."""

    def __call__(self, shape: Any, dtype: Any = None, **kwargs: Any) -> Any:
        raise NotImplementedError

    def get_config(self) -> dict[str, Any]:
        """The constructor arguments, for :meth:`from_config`."""
        return {}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Initializer:
        config = dict(config)
        config.pop("dtype", None)
        return cls(**config)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items())
        return f"{type(self).__name__}({args})"


def _shape(shape: Any) -> tuple[int, ...]:
    return tuple(int(d) for d in shape)


class Zeros(Initializer):
    """All zeros."""

    def __call__(self, shape: Any, dtype: Any = None, **kwargs: Any) -> Any:
        return tf.zeros(_shape(shape), dtype=_dtype(dtype))


class Ones(Initializer):
    """All ones."""

    def __call__(self, shape: Any, dtype: Any = None, **kwargs: Any) -> Any:
        return tf.ones(_shape(shape), dtype=_dtype(dtype))


class Constant(Initializer):
    """Every element ``value`` (a scalar, or an array of the weight's shape)."""

    def __init__(self, value: Any = 0) -> None:
        self.value = value

    def __call__(self, shape: Any, dtype: Any = None, **kwargs: Any) -> Any:
        dt = _dtype(dtype)
        arr = np.asarray(self.value.numpy() if hasattr(self.value, "numpy") else self.value, dtype=dt.np)
        return tf.constant(np.broadcast_to(arr, _shape(shape)).copy(), dtype=dt)

    def get_config(self) -> dict[str, Any]:
        return {"value": self.value}


class _Random(Initializer):
    """Shared seed handling of the random initializers."""

    def __init__(self, seed: int | None = None) -> None:
        self.seed = seed

    def _uniform(self, shape: tuple[int, ...], lo: float, hi: float, dtype: Any) -> Any:
        if self.seed is not None:
            return tf.random.stateless_uniform(shape, seed=[int(self.seed), 0], minval=lo, maxval=hi, dtype=dtype)
        return tf.random.uniform(shape, minval=lo, maxval=hi, dtype=dtype)

    def _normal(self, shape: tuple[int, ...], mean: float, stddev: float, dtype: Any) -> Any:
        if self.seed is not None:
            return tf.random.stateless_normal(shape, seed=[int(self.seed), 0], mean=mean, stddev=stddev, dtype=dtype)
        return tf.random.normal(shape, mean=mean, stddev=stddev, dtype=dtype)

    def _truncated(self, shape: tuple[int, ...], mean: float, stddev: float, dtype: Any) -> Any:
        if self.seed is not None:
            return tf.random.stateless_truncated_normal(shape, seed=[int(self.seed), 0], mean=mean, stddev=stddev,
                                                        dtype=dtype)
        return tf.random.truncated_normal(shape, mean=mean, stddev=stddev, dtype=dtype)

    @staticmethod
    def _float(dtype: Any) -> Any:
        dt = _dtype(dtype)
        if not dt.is_floating:
            raise ValueError(f"Expected floating point type, got {dt.name}")
        return dt


class RandomNormal(_Random):
    """Normal values with ``mean`` and ``stddev``."""

    def __init__(self, mean: float = 0.0, stddev: float = 0.05, seed: int | None = None) -> None:
        super().__init__(seed)
        self.mean, self.stddev = mean, stddev

    def __call__(self, shape: Any, dtype: Any = None, **kwargs: Any) -> Any:
        return self._normal(_shape(shape), self.mean, self.stddev, self._float(dtype))

    def get_config(self) -> dict[str, Any]:
        return {"mean": self.mean, "stddev": self.stddev, "seed": self.seed}


class RandomUniform(_Random):
    """Uniform values in ``[minval, maxval)``."""

    def __init__(self, minval: float = -0.05, maxval: float = 0.05, seed: int | None = None) -> None:
        super().__init__(seed)
        self.minval, self.maxval = minval, maxval

    def __call__(self, shape: Any, dtype: Any = None, **kwargs: Any) -> Any:
        dt = _dtype(dtype)
        if not (dt.is_floating or dt.is_integer):
            raise ValueError(f"Expected float or integer dtype, got {dt.name}.")
        return self._uniform(_shape(shape), self.minval, self.maxval, dt)

    def get_config(self) -> dict[str, Any]:
        return {"minval": self.minval, "maxval": self.maxval, "seed": self.seed}


class TruncatedNormal(_Random):
    """Normal values with ``mean`` and ``stddev``, redrawn beyond two standard deviations."""

    def __init__(self, mean: float = 0.0, stddev: float = 0.05, seed: int | None = None) -> None:
        super().__init__(seed)
        self.mean, self.stddev = mean, stddev

    def __call__(self, shape: Any, dtype: Any = None, **kwargs: Any) -> Any:
        return self._truncated(_shape(shape), self.mean, self.stddev, self._float(dtype))

    def get_config(self) -> dict[str, Any]:
        return {"mean": self.mean, "stddev": self.stddev, "seed": self.seed}


class VarianceScaling(_Random):
    """Values whose variance is ``scale / n``, ``n`` the fan-in, fan-out or their mean (``mode``)."""

    _MODES = ("fan_in", "fan_out", "fan_avg")
    _DISTRIBUTIONS = ("normal", "uniform", "truncated_normal", "untruncated_normal")

    def __init__(self, scale: float = 1.0, mode: str = "fan_in", distribution: str = "truncated_normal",
                 seed: int | None = None) -> None:
        super().__init__(seed)
        if scale <= 0.0:
            raise ValueError(f"`scale` must be positive float. Received: {scale}")
        mode, distribution = mode.lower(), distribution.lower()
        if mode not in self._MODES:
            raise ValueError(f"Invalid `mode` argument: {mode}")
        if distribution not in self._DISTRIBUTIONS:
            raise ValueError(f"Invalid `distribution` argument: {distribution}")
        self.scale, self.mode = scale, mode
        self.distribution = "truncated_normal" if distribution == "normal" else distribution

    def _n(self, shape: tuple[int, ...]) -> float:
        fan_in, fan_out = compute_fans(shape)
        if self.mode == "fan_in":
            return max(1.0, fan_in)
        if self.mode == "fan_out":
            return max(1.0, fan_out)
        return max(1.0, (fan_in + fan_out) / 2.0)

    def __call__(self, shape: Any, dtype: Any = None, **kwargs: Any) -> Any:
        shape = _shape(shape)
        dt = self._float(dtype)
        variance = self.scale / self._n(shape)
        if self.distribution == "truncated_normal":
            return self._truncated(shape, 0.0, math.sqrt(variance) / _TRUNCATED_STDDEV, dt)
        if self.distribution == "untruncated_normal":
            return self._normal(shape, 0.0, math.sqrt(variance), dt)
        limit = math.sqrt(3.0 * variance)
        return self._uniform(shape, -limit, limit, dt)

    def get_config(self) -> dict[str, Any]:
        return {"scale": self.scale, "mode": self.mode, "distribution": self.distribution, "seed": self.seed}


class _Preset(VarianceScaling):
    """A VarianceScaling with fixed scale, mode and distribution (only the seed is configurable)."""

    _PRESET: tuple[float, str, str] = (1.0, "fan_in", "truncated_normal")

    def __init__(self, seed: int | None = None) -> None:
        scale, mode, distribution = self._PRESET
        super().__init__(scale, mode, distribution, seed)

    def get_config(self) -> dict[str, Any]:
        return {"seed": self.seed}


class GlorotUniform(_Preset):
    """Uniform in ``±sqrt(6 / (fan_in + fan_out))`` (Xavier uniform)."""

    _PRESET = (1.0, "fan_avg", "uniform")


class GlorotNormal(_Preset):
    """Truncated normal with variance ``2 / (fan_in + fan_out)`` (Xavier normal)."""

    _PRESET = (1.0, "fan_avg", "truncated_normal")


class HeNormal(_Preset):
    """Truncated normal with variance ``2 / fan_in``."""

    _PRESET = (2.0, "fan_in", "truncated_normal")


class HeUniform(_Preset):
    """Uniform in ``±sqrt(6 / fan_in)``."""

    _PRESET = (2.0, "fan_in", "uniform")


class LecunNormal(_Preset):
    """Truncated normal with variance ``1 / fan_in``."""

    _PRESET = (1.0, "fan_in", "truncated_normal")


class LecunUniform(_Preset):
    """Uniform in ``±sqrt(3 / fan_in)``."""

    _PRESET = (1.0, "fan_in", "uniform")


class Identity(Initializer):
    """``gain`` times the identity matrix (2-D shapes only)."""

    def __init__(self, gain: float = 1.0) -> None:
        self.gain = gain

    def __call__(self, shape: Any, dtype: Any = None, **kwargs: Any) -> Any:
        shape = _shape(shape)
        if len(shape) != 2:
            raise ValueError(f"Identity matrix initializer can only be used for 2D matrices. Received: {shape}")
        return tf.constant(self.gain * np.eye(*shape), dtype=_dtype(dtype))

    def get_config(self) -> dict[str, Any]:
        return {"gain": self.gain}


class Orthogonal(_Random):
    """A random orthogonal matrix (of the flattened leading axes by the last), times ``gain``."""

    def __init__(self, gain: float = 1.0, seed: int | None = None) -> None:
        super().__init__(seed)
        self.gain = gain

    def __call__(self, shape: Any, dtype: Any = None, **kwargs: Any) -> Any:
        shape = _shape(shape)
        if len(shape) < 2:
            raise ValueError(f"The tensor to initialize must be at least two-dimensional. Received: {shape}")
        rows, cols = int(np.prod(shape[:-1])), shape[-1]
        a = np.asarray(self._normal((max(rows, cols), min(rows, cols)), 0.0, 1.0, tf.float32), np.float64)
        q, r = np.linalg.qr(a)
        q = q * np.sign(np.diag(r))
        if rows < cols:
            q = q.T
        return tf.constant((self.gain * q).reshape(shape), dtype=self._float(dtype))

    def get_config(self) -> dict[str, Any]:
        return {"gain": self.gain, "seed": self.seed}


# Keras's snake-case aliases (the same classes)
zeros = Zeros
ones = Ones
constant = Constant
random_normal = RandomNormal
random_uniform = RandomUniform
truncated_normal = TruncatedNormal
variance_scaling = VarianceScaling
glorot_uniform = GlorotUniform
glorot_normal = GlorotNormal
he_normal = HeNormal
he_uniform = HeUniform
lecun_normal = LecunNormal
lecun_uniform = LecunUniform
identity = Identity
orthogonal = Orthogonal

_CLASSES = {c.__name__: c for c in (Zeros, Ones, Constant, RandomNormal, RandomUniform, TruncatedNormal,
                                    VarianceScaling, GlorotUniform, GlorotNormal, HeNormal, HeUniform, LecunNormal,
                                    LecunUniform, Identity, Orthogonal)}
_CLASSES.update({backend.to_snake_case(name): cls for name, cls in list(_CLASSES.items())})
_CLASSES.update({"he_normal": HeNormal, "he_uniform": HeUniform, "lecun_normal": LecunNormal,
                 "lecun_uniform": LecunUniform, "zero": Zeros, "one": Ones, "normal": RandomNormal,
                 "uniform": RandomUniform})


def serialize(initializer: Initializer) -> dict[str, Any]:
    """``{'class_name': ..., 'config': ...}`` for :func:`deserialize`."""
    return {"class_name": type(initializer).__name__, "config": initializer.get_config()}


def deserialize(config: dict[str, Any], custom_objects: dict[str, Any] | None = None) -> Initializer:
    """The initializer described by a :func:`serialize` dict."""
    name = config["class_name"]
    cls = (custom_objects or {}).get(name) or _CLASSES.get(name)
    if cls is None:
        raise backend.unknown_object("initializer", name)
    return cls.from_config(config.get("config", {}))


def get(identifier: Any) -> Any:
    """An initializer from a name (``'glorot_uniform'``), a config dict, an instance, a class or a
    callable; None stays None."""
    if identifier is None:
        return None
    if isinstance(identifier, str):
        cls = _CLASSES.get(identifier)
        if cls is None:
            raise backend.unknown_object("initializer", identifier)
        return cls()
    if isinstance(identifier, dict):
        return deserialize(identifier)
    if isinstance(identifier, type) and issubclass(identifier, Initializer):
        return identifier()
    if callable(identifier):
        return identifier
    raise ValueError(f"Could not interpret initializer identifier: {identifier}")
