"""The Keras optimizer base class (``tf.keras.optimizers.Optimizer``, Keras's OptimizerV2).

State lives in ``tf.Variable`` s: the step counter ``iterations`` (int64), one variable per
numeric hyperparameter (so assigning ``opt.learning_rate = 0.1`` reaches compiled steps without
retracing), and per-variable slots (momentum, m, v, ...). They are created on the first
``apply_gradients`` — possibly while a ``tf.function`` is being traced — with host-computed initial
values, on the device of the strategy the optimizer was created under (or of the variable a slot
belongs to), and compiled steps update them in place.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from typing import Any

import numpy as np

from popjit.frontend import api as tf
from popjit.frontend.replication import sum_across_replicas
from popjit.frontend.tensor import placed_beside
from popjit.keras import backend, initializers, schedules

log = logging.getLogger("popjit")

_OPTIMIZER_KWARGS = ("clipnorm", "clipvalue", "lr", "decay", "global_clipnorm")


def _is_dynamic(value: Any) -> bool:
    """True for hyperparameters that are not plain numbers (tensors, variables, callables, schedules)."""
    return isinstance(value, (tf.Tensor, tf.Variable)) or callable(value)


class OptimizerV2:
    """Base class of Keras optimizers: subclasses define ``_create_slots``, ``_prepare_local`` and
    ``_resource_apply_dense``."""

    _places_updates = False  # each variable's update on its gradient's IPU (ipu.optimizers.ShardedOptimizer)

    def __init__(self, name: str, gradient_aggregator: Any = None, gradient_transformers: Any = None,
                 **kwargs: Any) -> None:
        object.__setattr__(self, "_hyper", {})
        for key, value in kwargs.items():
            if key not in _OPTIMIZER_KWARGS:
                raise TypeError(f"Unexpected keyword argument passed to optimizer: {key}")
            if value is not None and not _is_dynamic(value) and value < 0:
                raise ValueError(f"Expected {key} >= 0, received: {value}")
            if key == "lr":
                warnings.warn("The `lr` argument is deprecated, use `learning_rate` instead.", stacklevel=3)
        self._name = name
        self._hypers_created = False
        self._slots: dict[int, dict[str, tf.Variable]] = {}
        self._slot_owners: dict[int, tf.Variable] = {}
        self._slot_names: list[str] = []
        self._weights: list[tf.Variable] = []
        self._iterations: tf.Variable | None = None
        self._strategy = backend.current_strategy()
        self._initial_decay = float(kwargs.get("decay", 0.0) or 0.0)
        self.gradient_transformers = list(gradient_transformers or [])
        self.clipnorm = kwargs.get("clipnorm")
        self.global_clipnorm = kwargs.get("global_clipnorm")
        self.clipvalue = kwargs.get("clipvalue")
        if self.clipnorm is not None and self.global_clipnorm is not None:
            raise ValueError(f"Cannot accept both `clipnorm` and `global_clipnorm`, passed `clipnorm` {self.clipnorm}, "
                             f"`global_clipnorm` {self.global_clipnorm}")

    # -- hyperparameters ---------------------------------------------------------------------------
    def _set_learning_rate(self, learning_rate: Any, kwargs: dict[str, Any]) -> None:
        """The ``learning_rate`` (or deprecated ``lr``) and ``decay`` hyperparameters every optimizer has."""
        self._set_hyper("learning_rate", kwargs.get("lr", learning_rate))
        self._set_hyper("decay", self._initial_decay)

    def _learning_rate_config(self) -> dict[str, Any]:
        """:meth:`get_config` of the base with ``learning_rate`` and ``decay``, which every optimizer adds."""
        return {**OptimizerV2.get_config(self), "learning_rate": self._serialize_hyperparameter("learning_rate"),
                "decay": self._initial_decay}

    def _set_hyper(self, name: str, value: Any) -> None:
        """Set a hyperparameter: a number (kept in a variable once created), a variable, or a schedule."""
        if name not in self._hyper:
            self._hyper[name] = value
            return
        prev = self._hyper[name]
        if not isinstance(prev, tf.Variable) or _is_dynamic(value):
            self._hyper[name] = value
        else:
            prev.assign(np.asarray(value, dtype=prev.dtype.as_numpy_dtype))

    def _get_hyper(self, name: str, dtype: Any = None) -> Any:
        """A hyperparameter's value (a schedule as is; a variable read and cast to ``dtype`` if given)."""
        if not self._hypers_created:
            self._create_hypers()
        value = self._hyper[name]
        if isinstance(value, schedules.LearningRateSchedule):
            return value
        if callable(value):
            value = value()
        if dtype is not None:
            return tf.cast(value, dtype)
        return value

    def _create_hypers(self) -> None:
        if self._hypers_created:
            return
        with backend.strategy_scope(self._strategy):
            for name, value in sorted(self._hyper.items()):
                if _is_dynamic(value):
                    continue
                self._hyper[name] = backend.make_variable(np.float32(value), f"{self._name}/{name}", False)
        self._hypers_created = True

    def _serialize_hyperparameter(self, name: str) -> Any:
        value = self._hyper[name]
        if isinstance(value, schedules.LearningRateSchedule):
            return schedules.serialize(value)
        if callable(value):
            return value()
        if isinstance(value, (tf.Tensor, tf.Variable)):
            return float(str(value.numpy()))  # the shortest decimal of the variable's own precision
        return value

    def __getattr__(self, name: str) -> Any:
        hyper = self.__dict__.get("_hyper")
        if hyper is not None:
            key = "learning_rate" if name == "lr" else name
            if key in hyper:
                return self._get_hyper(key)
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __setattr__(self, name: str, value: Any) -> None:
        key = "learning_rate" if name == "lr" else name
        if key in self.__dict__.get("_hyper", {}):
            self._set_hyper(key, value)
        else:
            object.__setattr__(self, name, value)

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(self._hyper))

    # -- state ---------------------------------------------------------------------------------------
    @property
    def iterations(self) -> tf.Variable:
        """The number of ``apply_gradients`` calls so far (an int64 variable)."""
        if self._iterations is None:
            self._iterations = backend.make_variable(np.int64(0), f"{self._name}/iter", False, self._strategy)
            self._weights.insert(0, self._iterations)
        return self._iterations

    @iterations.setter
    def iterations(self, variable: tf.Variable) -> None:
        if self._iterations is not None:
            raise RuntimeError("Cannot set `iterations` to a new Variable after the Optimizer weights have been "
                               "created")
        self._iterations = variable
        self._weights.insert(0, variable)

    @property
    def weights(self) -> list[tf.Variable]:
        """The step counter, then the slot variables in creation order."""
        return list(self._weights)

    def variables(self) -> list[tf.Variable]:
        """Same as :attr:`weights`."""
        return list(self._weights)

    def get_weights(self) -> list[np.ndarray]:
        return [w.numpy() for w in self._weights]

    def set_weights(self, weights: list[Any]) -> None:
        """Assign NumPy values to :attr:`weights` (same count and shapes)."""
        params = self._weights
        if len(params) != len(weights):
            raise ValueError(f"You called `set_weights(weights)` on optimizer {self._name} with a  weight list of "
                             f"length {len(weights)}, but the optimizer was expecting {len(params)} weights. "
                             f"Provided weights: {str(weights)[:50]}...")
        for var, value in zip(params, weights):
            if tuple(var.shape) != np.shape(value):
                raise ValueError(f"Optimizer weight shape {tuple(var.shape)} not compatible with provided weight "
                                 f"shape {np.shape(value)}")
        for var, value in zip(params, weights):
            var.assign(np.asarray(value, dtype=var.dtype.as_numpy_dtype))

    def add_slot(self, var: tf.Variable, slot_name: str, initializer: Any = "zeros", shape: Any = None,
                 dtype: Any = None) -> tf.Variable:
        """The slot ``slot_name`` of ``var``, created (beside ``var``, of ``var``'s dtype unless ``dtype`` is
        given) on first request."""
        if slot_name not in self._slot_names:
            self._slot_names.append(slot_name)
        slots = self._slots.setdefault(id(var), {})
        self._slot_owners[id(var)] = var
        if slot_name not in slots:
            init = initializers.get(initializer)
            value = backend.host_value(init, tuple(shape if shape is not None else var.shape),
                                       dtype=tf.as_dtype(dtype) if dtype is not None else var.dtype)
            base = var.name.split(":")[0]
            with tf.device(var.device):
                slot = backend.make_variable(value, f"{self._name}/{base}/{slot_name}", False)
            slots[slot_name] = slot
            self._weights.append(slot)
        return slots[slot_name]

    def get_slot(self, var: tf.Variable, slot_name: str) -> tf.Variable:
        """A slot variable of ``var`` (KeyError if it has none of that name)."""
        return self._slots[id(var)][slot_name]

    def get_slot_names(self) -> list[str]:
        return list(self._slot_names)

    def _create_slots(self, var_list: list[tf.Variable]) -> None:
        """Create the slots of ``var_list`` (subclasses)."""

    def _create_all_weights(self, var_list: list[tf.Variable]) -> None:
        _ = self.iterations
        self._create_hypers()
        with backend.strategy_scope(self._strategy):
            self._create_slots(var_list)

    # -- the update -------------------------------------------------------------------------------------
    def _decayed_lr(self, var_dtype: Any) -> Any:
        """The learning rate of this step: the hyperparameter, or the schedule at ``iterations``, with
        the legacy ``decay`` applied."""
        lr = self._get_hyper("learning_rate", var_dtype)
        if isinstance(lr, schedules.LearningRateSchedule):
            lr = tf.cast(lr(tf.cast(self.iterations, var_dtype)), var_dtype)
        if self._initial_decay > 0.0:
            step = tf.cast(self.iterations, var_dtype)
            lr = lr / (1.0 + tf.cast(self._initial_decay, var_dtype) * step)
        return lr

    def _prepare_local(self, var_dtype: Any, apply_state: dict[str, Any]) -> None:
        """Coefficients shared by all variables of ``var_dtype`` (subclasses add theirs)."""
        if "learning_rate" in self._hyper:
            apply_state["lr_t"] = self._decayed_lr(var_dtype)

    def _prepare(self, var_list: list[tf.Variable]) -> dict[Any, dict[str, Any]]:
        states: dict[Any, dict[str, Any]] = {}
        for var in var_list:
            if var.dtype not in states:
                states[var.dtype] = {}
                self._prepare_local(var.dtype, states[var.dtype])
        return states

    def _resource_apply_dense(self, grad: Any, var: tf.Variable, coefficients: dict[str, Any]) -> None:
        raise NotImplementedError("Must be implemented in subclasses.")

    def apply_gradients(self, grads_and_vars: Any, name: str | None = None,
                        experimental_aggregate_gradients: bool = True) -> tf.Variable:
        """Update each variable from its gradient (pairs with a None gradient are skipped with a
        warning) and count the step in :attr:`iterations`.

        In a program run by several replicas (a device of several IPUs), each gradient is first summed
        over the replicas, as TensorFlow's distribution strategies and Graphcore's IPUStrategy do (a sum,
        not a mean: the loss is not scaled by the replica count), unless ``experimental_aggregate_gradients``
        is False; clipping then applies to the sums."""
        pairs = _filter_grads(grads_and_vars)
        var_list = [v for _, v in pairs]
        self._create_all_weights(var_list)
        if pairs:
            computed = grads = [tf.convert_to_tensor(g) for g, _ in pairs]
            if experimental_aggregate_gradients:
                grads = sum_across_replicas(grads)
            grads = self._transform_gradients(grads)
            states = self._prepare(var_list)
            for grad, var, where in zip(grads, var_list, computed):
                with placed_beside(where) if self._places_updates else contextlib.nullcontext():
                    if grad.dtype != var.dtype:
                        grad = tf.cast(grad, var.dtype)
                    self._resource_apply_dense(grad, var, states[var.dtype])
                    if var.constraint is not None:
                        var.assign(var.constraint(var))
        self.iterations.assign_add(np.int64(1))
        return self.iterations

    def _transform_gradients(self, grads: list[Any]) -> list[Any]:
        if self.clipvalue is not None:
            grads = [tf.clip_by_value(g, -self.clipvalue, self.clipvalue) for g in grads]
        if self.clipnorm is not None:
            grads = [_clip_by_norm(g, self.clipnorm) for g in grads]
        if self.global_clipnorm is not None:
            grads = _clip_by_global_norm(grads, self.global_clipnorm)
        for fn in self.gradient_transformers:
            grads = [g for g, _ in fn([(g, None) for g in grads])]
        return grads

    def minimize(self, loss: Any, var_list: Any, grad_loss: Any = None, name: str | None = None,
                 tape: Any = None) -> tf.Variable:
        """Compute the gradients of ``loss`` (a callable, or a tensor recorded by ``tape``) with respect to
        ``var_list`` (a list or a callable returning one) and apply them."""
        grads_and_vars = self._compute_gradients(loss, var_list, grad_loss, tape)
        return self.apply_gradients(grads_and_vars, name=name)

    def _compute_gradients(self, loss: Any, var_list: Any, grad_loss: Any = None, tape: Any = None) -> list[Any]:
        if not callable(loss) and tape is None:
            raise ValueError("`tape` is required when a `Tensor` loss is passed.")
        if tape is None:
            gradient_tape = getattr(tf, "GradientTape", None)
            if gradient_tape is None:
                raise tf.errors.UnimplementedError("minimize needs tf.GradientTape, which this popjit lacks.")
            tape = gradient_tape()
        if callable(loss):
            with tape:
                if not callable(var_list):
                    tape.watch(var_list)
                loss = loss()
                if callable(var_list):
                    var_list = var_list()
        elif callable(var_list):
            var_list = var_list()
        var_list = tf.nest.flatten(var_list)
        grads = tape.gradient(loss, var_list, grad_loss) if grad_loss is not None else tape.gradient(loss, var_list)
        return list(zip(grads, var_list))

    # -- checkpoints -----------------------------------------------------------------------------------
    def _trackable_children(self) -> list[tuple[str, Any]]:
        """The step counter ``iter`` and the hyperparameters held in variables, as Keras 2 checkpoints them
        (created now, so that a restore before the first step finds them)."""
        self._create_hypers()
        hypers = [(name, value) for name, value in self._hyper.items() if isinstance(value, tf.Variable)]
        return [("iter", self.iterations), *hypers]

    def _checkpoint_slots(self) -> list[tuple[tf.Variable, str, tf.Variable]]:
        """``(variable, slot name, slot variable)`` of every slot, for a checkpoint's slot references."""
        return [(self._slot_owners[key], name, slot) for key, slots in self._slots.items()
                for name, slot in slots.items()]

    def _restore_slot(self, var: tf.Variable, slot_name: str) -> tf.Variable:
        """The slot a checkpoint holds a value for, created if it does not exist yet."""
        self._create_hypers()
        return self.add_slot(var, slot_name)

    # -- configuration -------------------------------------------------------------------------------
    def get_config(self) -> dict[str, Any]:
        """Constructor arguments (a schedule as a config dict)."""
        config: dict[str, Any] = {"name": self._name}
        for key in ("clipnorm", "global_clipnorm", "clipvalue"):
            if getattr(self, key) is not None:
                config[key] = getattr(self, key)
        return config

    @classmethod
    def from_config(cls, config: dict[str, Any], custom_objects: dict[str, Any] | None = None) -> OptimizerV2:
        """An optimizer from :meth:`get_config`'s dict."""
        config = dict(config)
        if "lr" in config:
            config["learning_rate"] = config.pop("lr")
        if isinstance(config.get("learning_rate"), dict):
            config["learning_rate"] = schedules.deserialize(config["learning_rate"], custom_objects)
        return cls(**config)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} optimizer '{self._name}'>"


def _filter_grads(grads_and_vars: Any) -> list[tuple[Any, tf.Variable]]:
    pairs = list(grads_and_vars)
    if not pairs:
        return []
    kept = []
    missing = []
    for grad, var in pairs:
        if not isinstance(var, tf.Variable):
            raise TypeError(f"apply_gradients updates tf.Variables; got {type(var).__name__}: {var!r}")
        if grad is None:
            missing.append(var)
        else:
            kept.append((grad, var))
    if not kept:
        raise ValueError(f"No gradients provided for any variable: {[v.name for _, v in pairs]}.")
    if missing:
        log.warning("Gradients do not exist for variables %s when minimizing the loss.", [v.name for v in missing])
    return kept


def _l2norm(t: Any) -> Any:
    total = tf.reduce_sum(t * t)
    positive = total > 0.0
    safe = tf.where(positive, total, tf.ones_like(total))
    return tf.where(positive, tf.sqrt(safe), total)


def _clip_by_norm(t: Any, clip_norm: float) -> Any:
    return t * clip_norm / tf.maximum(_l2norm(t), clip_norm)


def _clip_by_global_norm(grads: list[Any], clip_norm: float) -> list[Any]:
    total = tf.add_n([tf.reduce_sum(g * g) for g in grads])
    norm = tf.sqrt(total)
    scale = clip_norm / tf.maximum(norm, clip_norm)
    return [g * scale for g in grads]
