"""``tf.compat.v1.train``: TF1's optimizers and global step, with TF1's update rules.

An optimizer's ``minimize(loss)`` differentiates what the graph recorded (``tf.gradients``) and
assigns each variable its update. In graph mode the result is an operation: running it in a
session applies the step. Inside an on-device loop (``ipu.loops.repeat``) the updates are carried
from one iteration to the next, as in the compiled program on the IPU. Slot variables (momentum,
Adam's moments) are variables of the graph, initialized by ``global_variables_initializer``.
The checkpoint names of TensorFlow 2's ``tf.train`` are here too.
"""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np

from popjit import dtypes
from popjit.compat.v1 import graph_ops
from popjit.compat.v1.saver import Saver, get_checkpoint_state, import_meta_graph
from popjit.errors import UnimplementedError, missing_attributes
from popjit.frontend import graph_mode
from popjit.frontend import math_ops as m
from popjit.frontend.convert import convert_to_tensor
from popjit.frontend.tensor import placed_beside
from popjit.frontend.variables import Variable
from popjit.train.checkpoint import (
    Checkpoint,
    CheckpointManager,
    CheckpointReader,
    latest_checkpoint,
    list_variables,
    load_checkpoint,
)


class Optimizer:
    """The TF1 optimizer base: ``compute_gradients``, ``apply_gradients`` and ``minimize``."""

    GATE_NONE, GATE_OP, GATE_GRAPH = 0, 1, 2
    _places_updates = False  # each variable's update on its gradient's IPU (ipu.optimizers.ShardedOptimizer)

    def _apply_placed(self, grad: Any, var: Variable) -> Any:
        with placed_beside(grad) if self._places_updates else contextlib.nullcontext():
            return self._apply_dense(convert_to_tensor(grad, dtype=var.dtype), var)

    def __init__(self, use_locking: bool, name: str) -> None:
        self._name = name
        self._slots: dict[str, dict[int, Variable]] = {}
        self._non_slots: dict[str, Variable] = {}

    def get_name(self) -> str:
        return self._name

    # -- the public steps ------------------------------------------------------------------------------
    def compute_gradients(self, loss: Any, var_list: Any = None, gate_gradients: int = GATE_OP,
                          aggregation_method: Any = None, colocate_gradients_with_ops: bool = False,
                          grad_loss: Any = None) -> list[tuple[Any, Variable]]:
        """``[(gradient, variable)]`` of ``loss`` for ``var_list`` (default: the trainable variables)."""
        if callable(loss):
            raise UnimplementedError("A callable loss is TensorFlow 2 style: pass the loss tensor to a TF1 optimizer.")
        variables = list(var_list) if var_list is not None else graph_ops.trainable_variables()
        if not variables:
            raise ValueError("No variables to optimize.")
        grads = graph_ops.gradients(loss, variables, grad_ys=grad_loss)
        return list(zip(grads, variables))

    def apply_gradients(self, grads_and_vars: Any, global_step: Variable | None = None, name: str | None = None) -> Any:
        """Update each variable by its gradient; an operation doing it (and incrementing ``global_step``)."""
        pairs = [(g, v) for g, v in grads_and_vars if g is not None]
        if not pairs:
            raise ValueError("No gradients provided for any variable, check your graph for ops that do not support "
                             f"gradients, between variables {[v.name for _, v in grads_and_vars]} and loss.")
        self._create_slots([v for _, v in pairs])
        updates = [self._apply_placed(g, v) for g, v in pairs]
        updates.extend(self._finish())
        if global_step is not None:
            updates.append(global_step.assign_add(np.ones((), global_step.dtype.np)))
        return _grouped(updates, name or self._name)

    def minimize(self, loss: Any, global_step: Variable | None = None, var_list: Any = None,
                 gate_gradients: int = GATE_OP, aggregation_method: Any = None,
                 colocate_gradients_with_ops: bool = False, name: str | None = None, grad_loss: Any = None) -> Any:
        """``apply_gradients(compute_gradients(loss))``."""
        return self.apply_gradients(self.compute_gradients(loss, var_list, grad_loss=grad_loss), global_step, name)

    # -- slots ---------------------------------------------------------------------------------------
    def _slot(self, var: Variable, slot: str, fill: float = 0.0) -> Variable:
        """The slot ``slot`` of ``var``, named as TF1 names it: ``<var>/<optimizer>``, then ``_1``, ``_2``
        for the variable's next slots (so checkpoints match TensorFlow's)."""
        by_var = self._slots.setdefault(slot, {})
        if var._id not in by_var:
            init = np.full(var.shape.as_list(), fill, var.dtype.np)
            k = sum(var._id in slots for slots in self._slots.values())
            by_var[var._id] = Variable(init, trainable=False, name=f"{var._name}/{self._name}" + (f"_{k}" if k else ""))
        return by_var[var._id]

    def _non_slot(self, name: str, value: float) -> Variable:
        if name not in self._non_slots:
            self._non_slots[name] = Variable(np.float32(value), trainable=False, name=name)
        return self._non_slots[name]

    def get_slot(self, var: Variable, name: str) -> Variable | None:
        return self._slots.get(name, {}).get(var._id)

    def get_slot_names(self) -> list[str]:
        return sorted(self._slots)

    def variables(self) -> list[Variable]:
        """The optimizer's own variables (slots and non-slot variables)."""
        return [*self._non_slots.values(), *(v for by_var in self._slots.values() for v in by_var.values())]

    # -- what each optimizer defines -------------------------------------------------------------------
    def _create_slots(self, variables: list[Variable]) -> None:
        pass

    def _apply_dense(self, grad: Any, var: Variable) -> Any:
        raise NotImplementedError

    def _finish(self) -> list[Any]:
        return []


def _grouped(updates: list[Any], name: str) -> Any:
    trace = graph_mode.current_graph_trace()
    if trace is None:
        return None
    return graph_mode.Operation(trace, name, inputs=updates)


def _value(x: Any, dtype: dtypes.DType) -> Any:
    """A hyperparameter (a number, tensor or callable returning one) as a tensor of ``dtype``."""
    x = x() if callable(x) else x
    return m.cast(convert_to_tensor(x), dtype)


class GradientDescentOptimizer(Optimizer):
    """``var -= learning_rate * grad``."""

    def __init__(self, learning_rate: Any, use_locking: bool = False, name: str = "GradientDescent") -> None:
        super().__init__(use_locking, name)
        self._learning_rate = learning_rate

    def _apply_dense(self, grad: Any, var: Variable) -> Any:
        return var.assign_sub(m.multiply(_value(self._learning_rate, var.dtype), grad))


class MomentumOptimizer(Optimizer):
    """``accum = momentum * accum + grad; var -= lr * accum`` (Nesterov: ``var -= lr * (grad + momentum * accum)``)."""

    def __init__(self, learning_rate: Any, momentum: Any, use_locking: bool = False, name: str = "Momentum",
                 use_nesterov: bool = False) -> None:
        super().__init__(use_locking, name)
        self._learning_rate, self._momentum, self._nesterov = learning_rate, momentum, use_nesterov

    def _create_slots(self, variables: list[Variable]) -> None:
        for v in variables:
            self._slot(v, "")

    def _apply_dense(self, grad: Any, var: Variable) -> Any:
        lr, mu = _value(self._learning_rate, var.dtype), _value(self._momentum, var.dtype)
        accum = self._slot(var, "")
        new_accum = m.add(m.multiply(accum.read_value(), mu), grad)
        step = m.add(grad, m.multiply(mu, new_accum)) if self._nesterov else new_accum
        return graph_ops.group(accum.assign(new_accum), var.assign_sub(m.multiply(lr, step)))


class AdamOptimizer(Optimizer):
    """Adam with TF1's bias correction folded into the step size:
    ``lr_t = lr * sqrt(1 - beta2^t) / (1 - beta1^t)``, ``var -= lr_t * m / (sqrt(v) + epsilon)``."""

    def __init__(self, learning_rate: Any = 0.001, beta1: float = 0.9, beta2: float = 0.999, epsilon: float = 1e-8,
                 use_locking: bool = False, name: str = "Adam") -> None:
        super().__init__(use_locking, name)
        self._lr, self._beta1, self._beta2, self._epsilon = learning_rate, beta1, beta2, epsilon

    def _create_slots(self, variables: list[Variable]) -> None:
        self._non_slot("beta1_power", self._beta1)
        self._non_slot("beta2_power", self._beta2)
        for v in variables:
            self._slot(v, "m")
            self._slot(v, "v")

    def _apply_dense(self, grad: Any, var: Variable) -> Any:
        dt = var.dtype
        b1, b2, eps = (_value(x, dt) for x in (self._beta1, self._beta2, self._epsilon))
        b1p = m.cast(self._non_slots["beta1_power"].read_value(), dt)
        b2p = m.cast(self._non_slots["beta2_power"].read_value(), dt)
        lr_t = m.multiply(_value(self._lr, dt), m.divide(m.sqrt(m.subtract(1.0, b2p)), m.subtract(1.0, b1p)))
        mv, vv = self._slot(var, "m"), self._slot(var, "v")
        new_m = m.add(m.multiply(b1, mv.read_value()), m.multiply(m.subtract(1.0, b1), grad))
        new_v = m.add(m.multiply(b2, vv.read_value()), m.multiply(m.subtract(1.0, b2), m.square(grad)))
        step = m.multiply(lr_t, m.divide(new_m, m.add(m.sqrt(new_v), eps)))
        return graph_ops.group(mv.assign(new_m), vv.assign(new_v), var.assign_sub(step))

    def _finish(self) -> list[Any]:
        b1p, b2p = self._non_slots["beta1_power"], self._non_slots["beta2_power"]
        return [b1p.assign(m.multiply(b1p.read_value(), np.float32(self._beta1))),
                b2p.assign(m.multiply(b2p.read_value(), np.float32(self._beta2)))]


class RMSPropOptimizer(Optimizer):
    """TF1's RMSProp: ``ms`` starts at one; ``mom = momentum * mom + lr * grad / sqrt(ms + epsilon)``;
    ``var -= mom`` (centered: ``ms - mg^2`` in the root)."""

    def __init__(self, learning_rate: Any, decay: float = 0.9, momentum: float = 0.0, epsilon: float = 1e-10,
                 use_locking: bool = False, centered: bool = False, name: str = "RMSProp") -> None:
        super().__init__(use_locking, name)
        self._lr, self._decay, self._momentum, self._epsilon = learning_rate, decay, momentum, epsilon
        self._centered = centered

    def _create_slots(self, variables: list[Variable]) -> None:
        for v in variables:
            self._slot(v, "rms", 1.0)
            if self._centered:
                self._slot(v, "mg")
            self._slot(v, "momentum")

    def _apply_dense(self, grad: Any, var: Variable) -> Any:
        dt = var.dtype
        lr, rho, mu, eps = (_value(x, dt) for x in (self._lr, self._decay, self._momentum, self._epsilon))
        ms, mom = self._slot(var, "rms"), self._slot(var, "momentum")
        new_ms = m.add(m.multiply(rho, ms.read_value()), m.multiply(m.subtract(1.0, rho), m.square(grad)))
        assigns = [ms.assign(new_ms)]
        denom = new_ms
        if self._centered:
            mg = self._slot(var, "mg")
            new_mg = m.add(m.multiply(rho, mg.read_value()), m.multiply(m.subtract(1.0, rho), grad))
            assigns.append(mg.assign(new_mg))
            denom = m.subtract(new_ms, m.square(new_mg))
        new_mom = m.add(m.multiply(mu, mom.read_value()), m.divide(m.multiply(lr, grad), m.sqrt(m.add(denom, eps))))
        assigns += [mom.assign(new_mom), var.assign_sub(new_mom)]
        return graph_ops.group(*assigns)


def get_or_create_global_step(graph: Any = None) -> Variable:
    """The graph's global step (an int64 scalar variable named ``global_step``), made on first use."""
    trace = (graph._trace if graph is not None else graph_mode.current_graph_trace())
    if trace is None:
        raise UnimplementedError("tf.compat.v1.train.get_or_create_global_step needs graph mode "
                                 "(tf.compat.v1.disable_eager_execution()).")
    existing = trace.collection("global_step")
    if not existing:
        existing.append(Variable(np.int64(0), trainable=False, name="global_step"))
    return existing[0]


def get_global_step(graph: Any = None) -> Variable | None:
    """The graph's global step, or None if none was made."""
    trace = graph._trace if graph is not None else graph_mode.current_graph_trace()
    steps = trace.collection("global_step") if trace is not None else []
    return steps[0] if steps else None


create_global_step = get_or_create_global_step

__all__ = ["AdamOptimizer", "Checkpoint", "CheckpointManager", "CheckpointReader", "GradientDescentOptimizer",
           "MomentumOptimizer", "Optimizer", "RMSPropOptimizer", "Saver", "create_global_step",
           "get_checkpoint_state", "get_global_step", "get_or_create_global_step", "import_meta_graph",
           "latest_checkpoint", "list_variables", "load_checkpoint"]

__getattr__ = missing_attributes("tf.compat.v1.train")
