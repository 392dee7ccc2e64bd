"""``tf.keras.optimizers.schedules``: learning rates as functions of the optimizer's step.

A schedule is called with the step as a tensor (the optimizer's ``iterations`` variable, read
inside the compiled step), so the rate is computed on the device every step with no Python in the
loop.
"""

from __future__ import annotations

import math
from typing import Any

from popjit.frontend import api as tf


class LearningRateSchedule:
    """Base class: ``schedule(step)`` returns the learning rate for ``step``."""

    def __call__(self, step: Any) -> Any:
        raise NotImplementedError("Learning rate schedule must override __call__")

    def get_config(self) -> dict[str, Any]:
        raise NotImplementedError("Learning rate schedule must override get_config")

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> LearningRateSchedule:
        """A schedule from :meth:`get_config`'s dict."""
        return cls(**config)


def _float_step(step: Any, dtype: Any) -> Any:
    return tf.cast(tf.convert_to_tensor(step), dtype)


class _StepDecay(LearningRateSchedule):
    """A rate that decays with ``p = step / decay_steps`` (floored when ``staircase``)."""

    def __init__(self, initial_learning_rate: float, decay_steps: int, decay_rate: float, staircase: bool = False,
                 name: str | None = None) -> None:
        self.initial_learning_rate = initial_learning_rate
        self.decay_steps = decay_steps
        self.decay_rate = decay_rate
        self.staircase = staircase
        self.name = name

    def __call__(self, step: Any) -> Any:
        initial = tf.convert_to_tensor(self.initial_learning_rate)
        dtype = initial.dtype
        p = _float_step(step, dtype) / tf.cast(self.decay_steps, dtype)
        if self.staircase:
            p = tf.floor(p)
        return self._decayed(initial, tf.cast(self.decay_rate, dtype), p)

    def _decayed(self, initial: Any, rate: Any, p: Any) -> Any:
        raise NotImplementedError

    def get_config(self) -> dict[str, Any]:
        return {"initial_learning_rate": self.initial_learning_rate, "decay_steps": self.decay_steps,
                "decay_rate": self.decay_rate, "staircase": self.staircase, "name": self.name}


class ExponentialDecay(_StepDecay):
    """``initial_learning_rate * decay_rate ** (step / decay_steps)`` (the exponent floored when
    ``staircase``)."""

    def _decayed(self, initial: Any, rate: Any, p: Any) -> Any:
        return initial * tf.pow(rate, p)


class PiecewiseConstantDecay(LearningRateSchedule):
    """``values[0]`` while ``step <= boundaries[0]``, ``values[i]`` while ``step <= boundaries[i]``, and
    ``values[-1]`` after the last boundary."""

    def __init__(self, boundaries: list[Any], values: list[Any], name: str | None = None) -> None:
        if len(boundaries) != len(values) - 1:
            raise ValueError("The length of boundaries should be 1 less than the length of values")
        self.boundaries = list(boundaries)
        self.values = list(values)
        self.name = name

    def __call__(self, step: Any) -> Any:
        x = tf.convert_to_tensor(step)
        values = [tf.convert_to_tensor(v) for v in self.values]
        out = values[-1]
        for b, v in zip(reversed(self.boundaries), reversed(values[:-1])):
            bound = tf.cast(tf.convert_to_tensor(b), x.dtype)
            out = tf.where(x <= bound, v, out)
        return out

    def get_config(self) -> dict[str, Any]:
        return {"boundaries": self.boundaries, "values": self.values, "name": self.name}


class PolynomialDecay(LearningRateSchedule):
    """From ``initial_learning_rate`` to ``end_learning_rate`` over ``decay_steps`` along
    ``(1 - step / decay_steps) ** power`` (restarting with longer periods when ``cycle``)."""

    def __init__(self, initial_learning_rate: float, decay_steps: int, end_learning_rate: float = 0.0001,
                 power: float = 1.0, cycle: bool = False, name: str | None = None) -> None:
        self.initial_learning_rate = initial_learning_rate
        self.decay_steps = decay_steps
        self.end_learning_rate = end_learning_rate
        self.power = power
        self.cycle = cycle
        self.name = name

    def __call__(self, step: Any) -> Any:
        initial = tf.convert_to_tensor(self.initial_learning_rate)
        dtype = initial.dtype
        end = tf.cast(self.end_learning_rate, dtype)
        power = tf.cast(self.power, dtype)
        global_step = _float_step(step, dtype)
        decay_steps = tf.cast(self.decay_steps, dtype)
        if self.cycle:
            multiplier = tf.where(tf.equal(global_step, 0.0), tf.ones_like(global_step),
                                  tf.math.ceil(global_step / decay_steps))
            decay_steps = decay_steps * multiplier
        else:
            global_step = tf.minimum(global_step, decay_steps)
        p = global_step / decay_steps
        return (initial - end) * tf.pow(1.0 - p, power) + end

    def get_config(self) -> dict[str, Any]:
        return {"initial_learning_rate": self.initial_learning_rate, "decay_steps": self.decay_steps,
                "end_learning_rate": self.end_learning_rate, "power": self.power, "cycle": self.cycle,
                "name": self.name}


class InverseTimeDecay(_StepDecay):
    """``initial_learning_rate / (1 + decay_rate * step / decay_steps)`` (floored when ``staircase``)."""

    def _decayed(self, initial: Any, rate: Any, p: Any) -> Any:
        return initial / (1.0 + rate * p)


class CosineDecay(LearningRateSchedule):
    """Half a cosine from ``initial_learning_rate`` down to ``alpha * initial_learning_rate`` over
    ``decay_steps``, then constant."""

    def __init__(self, initial_learning_rate: float, decay_steps: int, alpha: float = 0.0,
                 name: str | None = None) -> None:
        self.initial_learning_rate = initial_learning_rate
        self.decay_steps = decay_steps
        self.alpha = alpha
        self.name = name

    def __call__(self, step: Any) -> Any:
        initial = tf.convert_to_tensor(self.initial_learning_rate)
        dtype = initial.dtype
        decay_steps = tf.cast(self.decay_steps, dtype)
        fraction = tf.minimum(_float_step(step, dtype), decay_steps) / decay_steps
        cosine = 0.5 * (1.0 + tf.cos(math.pi * fraction))
        return initial * ((1.0 - self.alpha) * cosine + self.alpha)

    def get_config(self) -> dict[str, Any]:
        return {"initial_learning_rate": self.initial_learning_rate, "decay_steps": self.decay_steps,
                "alpha": self.alpha, "name": self.name}


_CLASSES = {c.__name__: c for c in (ExponentialDecay, PiecewiseConstantDecay, PolynomialDecay, InverseTimeDecay,
                                    CosineDecay)}


def serialize(schedule: LearningRateSchedule) -> dict[str, Any]:
    """``{'class_name': ..., 'config': ...}`` of a schedule."""
    return {"class_name": type(schedule).__name__, "config": schedule.get_config()}


def deserialize(config: dict[str, Any], custom_objects: dict[str, Any] | None = None) -> LearningRateSchedule:
    """The schedule a :func:`serialize` dict describes."""
    name = config["class_name"]
    cls = (custom_objects or {}).get(name) or _CLASSES.get(name)
    if cls is None:
        raise ValueError(f"Unknown learning rate schedule: {name}")
    return cls.from_config(config["config"])
