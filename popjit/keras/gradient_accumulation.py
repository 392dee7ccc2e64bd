"""Gradient accumulation: apply an optimizer once every ``N`` steps to gradients summed or averaged over
those steps (Graphcore's ``GradientAccumulationOptimizerV2``, and what Keras's
``set_gradient_accumulation_options`` wraps the compiled optimizer in).

The accumulators live beside the variables (on the device); each step adds its gradients, and the
``N``-th step applies them through the wrapped optimizer (whose ``iterations`` then counts
applications) and clears them, inside a ``tf.cond``, so a compiled loop of steps runs it on the device.
"""

from __future__ import annotations

import contextlib
import enum
from typing import Any

import numpy as np

from popjit.frontend import api as tf
from popjit.frontend.tracing import current_trace
from popjit.keras import backend

__all__ = ["GradientAccumulationOptimizerV2", "GradientAccumulationReductionMethod", "GradientAccumulator"]


class GradientAccumulationReductionMethod(enum.Enum):
    """How ``N`` steps' gradients combine: their sum, their mean (the sum over ``N``), or a running
    mean (``acc * n / (n + 1) + g / (n + 1)`` after ``n`` steps, the same value rounded differently)."""

    SUM = 0
    MEAN = 1
    RUNNING_MEAN = 2

    @classmethod
    def parse(cls, value: Any) -> GradientAccumulationReductionMethod:
        """The method for an enum member or its name in any case (``"sum"``, ``"running_mean"``...)."""
        if isinstance(value, cls):
            return value
        if isinstance(value, str) and value.upper() in cls.__members__:
            return cls[value.upper()]
        raise ValueError(f"Cannot parse '{value}' as a gradient accumulation reduction method: expected one of "
                         f"{[m.name for m in cls]}.")


class GradientAccumulator:
    """Sums or averages gradients over ``steps`` calls of :meth:`apply_gradients` and applies them
    through ``optimizer`` on the last one."""

    def __init__(self, optimizer: Any, steps: int, reduction: Any = "sum", scale: float = 1.0) -> None:
        if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
            raise ValueError(f"Expected `gradient_accumulation_steps_per_replica` to be a positive integer, but got "
                             f"{steps} instead.")
        self.optimizer, self.steps = optimizer, steps
        self.reduction = GradientAccumulationReductionMethod.parse(reduction)
        self.scale = float(scale)  # experimental_normalize_gradients: 1 / steps
        self._accumulators: dict[int, Any] = {}
        self._count: Any = None

    def _create(self, var_list: list[Any]) -> None:
        """The counter, one zero accumulator per variable and the optimizer's own slots, created
        outside any branch of the step (so a traced step only reads and writes them)."""
        if self._count is None:
            self._count = backend.make_variable(np.int32(0), "gradient_accumulation/count", False,
                                                getattr(self.optimizer, "_strategy", None))
        for var in var_list:
            if id(var) not in self._accumulators:
                zeros = np.zeros(tuple(var.shape), var.dtype.as_numpy_dtype)
                with tf.device(var.device):  # beside its variable, as the optimizer's slots are
                    self._accumulators[id(var)] = backend.make_variable(
                        zeros, f"gradient_accumulation/{var.name.split(':')[0]}", False)
        create_slots = getattr(self.optimizer, "_create_all_weights", None)  # a Keras optimizer's (TF1: on apply)
        if create_slots is not None:
            create_slots(var_list)

    @property
    def accumulators(self) -> list[Any]:
        """The accumulator variables (plus the step counter first)."""
        return ([self._count] if self._count is not None else []) + list(self._accumulators.values())

    def apply_gradients(self, grads_and_vars: Any) -> Any:
        """Accumulate this step's gradients; on every ``steps``-th call apply them and start again.
        Returns whether the optimizer was applied (a boolean tensor)."""
        var_list, count = self.accumulate(grads_and_vars)

        def apply() -> Any:
            self.apply_accumulated(var_list)
            return tf.constant(True)

        trace = current_trace()
        # a pipeline's estimate counts the weight update once per group of steps
        with trace.marking("if", weight_update_every=self.steps) if trace is not None else contextlib.nullcontext():
            return tf.cond(tf.equal(count, self.steps), apply, lambda: tf.constant(False))

    def accumulate(self, grads_and_vars: Any) -> tuple[list[Any], Any]:
        """Add one step's gradients to the accumulators (made on first use) and count the step: the
        variables that have gradients, and the new count."""
        pairs = [(g, v) for g, v in grads_and_vars if g is not None]
        var_list = [v for _, v in pairs]
        self._create(var_list)
        count = self._count + 1
        for grad, var in pairs:
            acc = self._accumulators[id(var)]
            grad = tf.cast(tf.convert_to_tensor(grad), acc.dtype)
            if self.scale != 1.0:
                grad = grad * self.scale
            if self.reduction is GradientAccumulationReductionMethod.RUNNING_MEAN:
                n = tf.cast(count, acc.dtype)
                acc.assign(acc * ((n - 1.0) / n) + grad / n)
            else:
                acc.assign_add(grad)
        self._count.assign(count)
        return var_list, count

    def apply_accumulated(self, var_list: list[Any], *args: Any, **kwargs: Any) -> Any:
        """The optimizer's update of ``var_list`` with the accumulated gradients (averaged for MEAN; ``args``
        and ``kwargs`` go to its ``apply_gradients``); the accumulators and the count start again from zero."""
        accumulated = [self._accumulators[id(v)].read_value() for v in var_list]
        if self.reduction is GradientAccumulationReductionMethod.MEAN:
            accumulated = [a / float(self.steps) for a in accumulated]
        update = self.optimizer.apply_gradients(list(zip(accumulated, var_list)), *args, **kwargs)
        for v in var_list:
            self._accumulators[id(v)].assign(tf.zeros_like(v))
        self._count.assign(np.int32(0))
        return update


class GradientAccumulationOptimizerV2:
    """``ipu.optimizers.GradientAccumulationOptimizerV2(opt, num_mini_batches, ...)``: ``opt`` applied
    once every ``num_mini_batches`` calls of ``apply_gradients`` / ``minimize``, to the gradients of
    those calls combined by ``reduction_method``. Other attributes (``lr``, ``iterations``...) are
    ``opt``'s."""

    def __init__(self, opt: Any, num_mini_batches: int, offload_weight_update_variables: Any = None,
                 replicated_optimizer_state_sharding: bool = False, dtype: Any = None,
                 reduction_method: Any = GradientAccumulationReductionMethod.SUM,
                 name: str = "GradientAccumulationOptimizerV2") -> None:
        refuse_memory_options(offload_weight_update_variables=offload_weight_update_variables,
                              replicated_optimizer_state_sharding=replicated_optimizer_state_sharding, dtype=dtype)
        self._opt = opt
        self._accumulator = GradientAccumulator(opt, num_mini_batches, reduction_method)
        self._name = name

    def apply_gradients(self, grads_and_vars: Any, name: str | None = None) -> Any:
        """Accumulate; apply ``opt`` every ``num_mini_batches`` calls (see the class docstring)."""
        return self._accumulator.apply_gradients(list(grads_and_vars))

    def minimize(self, loss: Any, var_list: Any, grad_loss: Any = None, name: str | None = None,
                 tape: Any = None) -> Any:
        """The gradients of ``loss`` (from ``tape``, or of a callable ``loss``), accumulated."""
        return self.apply_gradients(self._opt._compute_gradients(loss, var_list, grad_loss=grad_loss, tape=tape))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_opt", "_accumulator", "_name"):
            raise AttributeError(name)
        return getattr(self._opt, name)


def refuse_memory_options(call: str | None = None, **options: Any) -> None:
    """Graphcore's options that place accumulators, optimizer state, weights or activations in Streaming
    Memory or across replicas, or set the accumulation type, change what popjit does not model: their
    defaults are accepted, anything else is refused. ``call``: what was given them (``pipeline``), named in
    the error as ``call(option=value)``."""
    for key, value in options.items():
        if value not in (None, False):
            given = f"{call}({key}={value!r})" if call else f"Gradient accumulation option {key}={value!r}"
            raise tf.errors.UnimplementedError(
                f"{given} is not supported by popjit (it places variables in Streaming Memory or across replicas, "
                "or sets the accumulation type, which popjit does not model). Remove it.")
