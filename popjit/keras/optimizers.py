"""``tf.keras.optimizers``: SGD (with momentum and Nesterov), Adam (and AMSGrad), RMSprop (with
momentum, centered), Adagrad, Adadelta, Adamax, Nadam and Ftrl, with Keras's names, defaults and
update formulas (Keras 2.6's, which TensorFlow's fused training ops compute)."""

from __future__ import annotations

from typing import Any

import numpy as np

from popjit.frontend import api as tf
from popjit.keras import backend, generic_utils, initializers, schedules
from popjit.keras.optimizer_v2 import OptimizerV2

Optimizer = OptimizerV2


def _check_momentum(momentum: Any) -> bool:
    """Whether momentum is in use; a number must lie in [0, 1]."""
    if isinstance(momentum, (int, float)):
        if momentum < 0 or momentum > 1:
            raise ValueError("`momentum` must be between [0, 1].")
        return momentum > 0
    return True


class SGD(OptimizerV2):
    """Gradient descent: ``var -= lr * grad``; with momentum ``m = momentum * m - lr * grad; var += m``
    (Nesterov: ``var += momentum * m - lr * grad``)."""

    def __init__(self, learning_rate: Any = 0.01, momentum: Any = 0.0, nesterov: bool = False, name: str = "SGD",
                 **kwargs: Any) -> None:
        super().__init__(name, **kwargs)
        self._set_learning_rate(learning_rate, kwargs)
        self._momentum = _check_momentum(momentum)
        self._set_hyper("momentum", momentum)
        self.nesterov = bool(nesterov)

    def _create_slots(self, var_list: list[tf.Variable]) -> None:
        if self._momentum:
            for var in var_list:
                self.add_slot(var, "momentum")

    def _prepare_local(self, var_dtype: Any, apply_state: dict[str, Any]) -> None:
        super()._prepare_local(var_dtype, apply_state)
        apply_state["momentum"] = self._get_hyper("momentum", var_dtype)

    def _resource_apply_dense(self, grad: Any, var: tf.Variable, coefficients: dict[str, Any]) -> None:
        lr = coefficients["lr_t"]
        if not self._momentum:
            var.assign_sub(grad * lr)
            return
        accum = self.get_slot(var, "momentum")
        momentum = coefficients["momentum"]
        new = accum * momentum - grad * lr
        accum.assign(new)
        var.assign_add(new * momentum - grad * lr if self.nesterov else new)

    def get_config(self) -> dict[str, Any]:
        return {**self._learning_rate_config(), "momentum": self._serialize_hyperparameter("momentum"),
                "nesterov": self.nesterov}


class _Moments(OptimizerV2):
    """Adam's family (Adam, Adamax, Nadam): a learning rate, ``beta_1`` and ``beta_2`` for the moving
    moments ``m`` and ``v`` (one slot each per variable, all ``m`` first), and ``epsilon``."""

    def __init__(self, name: str, learning_rate: Any, beta_1: Any, beta_2: Any, epsilon: float,
                 **kwargs: Any) -> None:
        super().__init__(name, **kwargs)
        self._set_learning_rate(learning_rate, kwargs)
        self._set_hyper("beta_1", beta_1)
        self._set_hyper("beta_2", beta_2)
        self.epsilon = epsilon or backend.epsilon()

    def _create_slots(self, var_list: list[tf.Variable]) -> None:
        for slot in ("m", "v"):
            for var in var_list:
                self.add_slot(var, slot)

    def get_config(self) -> dict[str, Any]:
        return {**self._learning_rate_config(), "beta_1": self._serialize_hyperparameter("beta_1"),
                "beta_2": self._serialize_hyperparameter("beta_2"), "epsilon": self.epsilon}


class Adam(_Moments):
    """Adam: moving averages ``m`` of the gradient and ``v`` of its square; ``var -= lr_t * m / (sqrt(v) +
    epsilon)`` with ``lr_t = lr * sqrt(1 - beta_2^t) / (1 - beta_1^t)`` (AMSGrad: the running max of v)."""

    def __init__(self, learning_rate: Any = 0.001, beta_1: Any = 0.9, beta_2: Any = 0.999, epsilon: float = 1e-7,
                 amsgrad: bool = False, name: str = "Adam", **kwargs: Any) -> None:
        super().__init__(name, learning_rate, beta_1, beta_2, epsilon, **kwargs)
        self.amsgrad = bool(amsgrad)

    def _create_slots(self, var_list: list[tf.Variable]) -> None:
        super()._create_slots(var_list)
        if self.amsgrad:
            for var in var_list:
                self.add_slot(var, "vhat")

    def _prepare_local(self, var_dtype: Any, apply_state: dict[str, Any]) -> None:
        super()._prepare_local(var_dtype, apply_state)
        step = tf.cast(self.iterations + 1, var_dtype)
        beta_1 = self._get_hyper("beta_1", var_dtype)
        beta_2 = self._get_hyper("beta_2", var_dtype)
        beta_1_power = tf.pow(beta_1, step)
        beta_2_power = tf.pow(beta_2, step)
        lr = apply_state["lr_t"] * (tf.sqrt(1.0 - beta_2_power) / (1.0 - beta_1_power))
        apply_state.update(lr=lr, epsilon=tf.cast(self.epsilon, var_dtype), beta_1_t=beta_1,
                           one_minus_beta_1_t=1.0 - beta_1, beta_2_t=beta_2, one_minus_beta_2_t=1.0 - beta_2,
                           beta_1_power=beta_1_power, beta_2_power=beta_2_power)

    def _resource_apply_dense(self, grad: Any, var: tf.Variable, coefficients: dict[str, Any]) -> None:
        m, v = self.get_slot(var, "m"), self.get_slot(var, "v")
        m_t = m + (grad - m) * coefficients["one_minus_beta_1_t"]
        v_t = v + (grad * grad - v) * coefficients["one_minus_beta_2_t"]
        m.assign(m_t)
        v.assign(v_t)
        if self.amsgrad:
            vhat = self.get_slot(var, "vhat")
            v_t = tf.maximum(vhat, v_t)
            vhat.assign(v_t)
        var.assign_sub(coefficients["lr"] * m_t / (tf.sqrt(v_t) + coefficients["epsilon"]))

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "amsgrad": self.amsgrad}


class RMSprop(OptimizerV2):
    """RMSprop: ``rms = rho * rms + (1 - rho) * grad^2; var -= lr * grad / (sqrt(rms) + epsilon)``; centered
    subtracts the squared moving mean of the gradient; with momentum, Keras's fused form
    ``mom = momentum * mom + lr * grad / sqrt(rms + epsilon); var -= mom``."""

    def __init__(self, learning_rate: Any = 0.001, rho: Any = 0.9, momentum: Any = 0.0, epsilon: float = 1e-7,
                 centered: bool = False, name: str = "RMSprop", **kwargs: Any) -> None:
        super().__init__(name, **kwargs)
        self._set_learning_rate(learning_rate, kwargs)
        self._set_hyper("rho", rho)
        self._momentum = _check_momentum(momentum)
        self._set_hyper("momentum", momentum)
        self.epsilon = epsilon or backend.epsilon()
        self.centered = bool(centered)

    def _create_slots(self, var_list: list[tf.Variable]) -> None:
        for var in var_list:
            self.add_slot(var, "rms")
        if self._momentum:
            for var in var_list:
                self.add_slot(var, "momentum")
        if self.centered:
            for var in var_list:
                self.add_slot(var, "mg")

    def _prepare_local(self, var_dtype: Any, apply_state: dict[str, Any]) -> None:
        super()._prepare_local(var_dtype, apply_state)
        rho = self._get_hyper("rho", var_dtype)
        apply_state.update(epsilon=tf.cast(self.epsilon, var_dtype), rho=rho, one_minus_rho=1.0 - rho,
                           momentum=self._get_hyper("momentum", var_dtype))

    def _resource_apply_dense(self, grad: Any, var: tf.Variable, coefficients: dict[str, Any]) -> None:
        c = coefficients
        rms = self.get_slot(var, "rms")
        if self._momentum:
            ms = rms + (grad * grad - rms) * c["one_minus_rho"]
            rms.assign(ms)
            denom = ms
            if self.centered:
                mg = self.get_slot(var, "mg")
                mg_t = mg + (grad - mg) * c["one_minus_rho"]
                mg.assign(mg_t)
                denom = ms - mg_t * mg_t
            mom = self.get_slot(var, "momentum")
            mom_t = mom * c["momentum"] + c["lr_t"] * grad / tf.sqrt(denom + c["epsilon"])
            mom.assign(mom_t)
            var.assign_sub(mom_t)
            return
        rms_t = c["rho"] * rms + c["one_minus_rho"] * (grad * grad)
        rms.assign(rms_t)
        denom = rms_t
        if self.centered:
            mg = self.get_slot(var, "mg")
            mg_t = c["rho"] * mg + c["one_minus_rho"] * grad
            mg.assign(mg_t)
            denom = rms_t - mg_t * mg_t
        var.assign_sub(c["lr_t"] * grad / (tf.sqrt(denom) + c["epsilon"]))

    def get_config(self) -> dict[str, Any]:
        return {**self._learning_rate_config(), "rho": self._serialize_hyperparameter("rho"),
                "momentum": self._serialize_hyperparameter("momentum"), "epsilon": self.epsilon,
                "centered": self.centered}


class Adagrad(OptimizerV2):
    """Adagrad: ``acc += grad^2; var -= lr * grad / (sqrt(acc) + epsilon)``, ``acc`` starting at
    ``initial_accumulator_value``."""

    def __init__(self, learning_rate: Any = 0.001, initial_accumulator_value: float = 0.1, epsilon: float = 1e-7,
                 name: str = "Adagrad", **kwargs: Any) -> None:
        if initial_accumulator_value < 0.0:
            raise ValueError(f"initial_accumulator_value must be non-negative: {initial_accumulator_value}")
        super().__init__(name, **kwargs)
        self._set_learning_rate(learning_rate, kwargs)
        self._initial_accumulator_value = float(initial_accumulator_value)
        self.epsilon = epsilon or backend.epsilon()

    def _create_slots(self, var_list: list[tf.Variable]) -> None:
        for var in var_list:
            self.add_slot(var, "accumulator", initializers.Constant(self._initial_accumulator_value))

    def _prepare_local(self, var_dtype: Any, apply_state: dict[str, Any]) -> None:
        super()._prepare_local(var_dtype, apply_state)
        apply_state["epsilon"] = tf.cast(self.epsilon, var_dtype)

    def _resource_apply_dense(self, grad: Any, var: tf.Variable, coefficients: dict[str, Any]) -> None:
        acc = self.get_slot(var, "accumulator")
        acc_t = acc + grad * grad
        acc.assign(acc_t)
        var.assign_sub(coefficients["lr_t"] * grad / (tf.sqrt(acc_t) + coefficients["epsilon"]))

    def get_config(self) -> dict[str, Any]:
        return {**self._learning_rate_config(), "initial_accumulator_value": self._initial_accumulator_value,
                "epsilon": self.epsilon}


class Adadelta(OptimizerV2):
    """Adadelta: ``acc = rho * acc + (1 - rho) * grad^2``; ``update = sqrt(acc_up + epsilon) / sqrt(acc + epsilon)
    * grad``; ``acc_up = rho * acc_up + (1 - rho) * update^2``; ``var -= lr * update``."""

    def __init__(self, learning_rate: Any = 0.001, rho: Any = 0.95, epsilon: float = 1e-7, name: str = "Adadelta",
                 **kwargs: Any) -> None:
        super().__init__(name, **kwargs)
        self._set_learning_rate(learning_rate, kwargs)
        self._set_hyper("rho", rho)
        self.epsilon = epsilon or backend.epsilon()

    def _create_slots(self, var_list: list[tf.Variable]) -> None:
        for var in var_list:
            self.add_slot(var, "accum_grad")
        for var in var_list:
            self.add_slot(var, "accum_var")

    def _prepare_local(self, var_dtype: Any, apply_state: dict[str, Any]) -> None:
        super()._prepare_local(var_dtype, apply_state)
        apply_state.update(epsilon=tf.cast(self.epsilon, var_dtype), rho=self._get_hyper("rho", var_dtype))

    def _resource_apply_dense(self, grad: Any, var: tf.Variable, coefficients: dict[str, Any]) -> None:
        c = coefficients
        accum, accum_update = self.get_slot(var, "accum_grad"), self.get_slot(var, "accum_var")
        accum_t = accum * c["rho"] + grad * grad * (1.0 - c["rho"])
        update = tf.sqrt(accum_update + c["epsilon"]) / tf.sqrt(accum_t + c["epsilon"]) * grad
        accum.assign(accum_t)
        accum_update.assign(accum_update * c["rho"] + update * update * (1.0 - c["rho"]))
        var.assign_sub(update * c["lr_t"])

    def get_config(self) -> dict[str, Any]:
        return {**self._learning_rate_config(), "rho": self._serialize_hyperparameter("rho"), "epsilon": self.epsilon}


class Adamax(_Moments):
    """Adamax (Adam with the infinity norm): ``m = beta_1 * m + (1 - beta_1) * grad``; ``v = max(beta_2 * v,
    |grad|)``; ``var -= lr / (1 - beta_1^t) * m / (v + epsilon)``."""

    def __init__(self, learning_rate: Any = 0.001, beta_1: Any = 0.9, beta_2: Any = 0.999, epsilon: float = 1e-7,
                 name: str = "Adamax", **kwargs: Any) -> None:
        super().__init__(name, learning_rate, beta_1, beta_2, epsilon, **kwargs)

    def _prepare_local(self, var_dtype: Any, apply_state: dict[str, Any]) -> None:
        super()._prepare_local(var_dtype, apply_state)
        step = tf.cast(self.iterations + 1, var_dtype)
        beta_1 = self._get_hyper("beta_1", var_dtype)
        apply_state.update(lr=apply_state["lr_t"] / (1.0 - tf.pow(beta_1, step)), beta_1=beta_1,
                           beta_2=self._get_hyper("beta_2", var_dtype), epsilon=tf.cast(self.epsilon, var_dtype))

    def _resource_apply_dense(self, grad: Any, var: tf.Variable, coefficients: dict[str, Any]) -> None:
        c = coefficients
        m, v = self.get_slot(var, "m"), self.get_slot(var, "v")
        m_t = m + (grad - m) * (1.0 - c["beta_1"])
        v_t = tf.maximum(v * c["beta_2"], tf.abs(grad))
        m.assign(m_t)
        v.assign(v_t)
        var.assign_sub(c["lr"] * (m_t / (v_t + c["epsilon"])))


class Nadam(_Moments):
    """Nadam (Adam with Nesterov momentum), Keras's form: the momentum ``beta_1 * (1 - 0.5 * 0.96^(0.004 t))``
    warms up over the steps, its running product is kept in the weight ``momentum_cache``; ``m`` and ``v`` are
    Adam's moving averages, bias-corrected with that product and ``beta_2^t``."""

    _SCHEDULE_DECAY = 0.004  # Keras keeps it in ``decay`` (the legacy ``schedule_decay``), not for the rate

    def __init__(self, learning_rate: Any = 0.001, beta_1: Any = 0.9, beta_2: Any = 0.999, epsilon: float = 1e-7,
                 name: str = "Nadam", **kwargs: Any) -> None:
        kwargs["decay"] = kwargs.pop("schedule_decay", kwargs.get("decay", self._SCHEDULE_DECAY))
        if isinstance(kwargs.get("lr", learning_rate), schedules.LearningRateSchedule):
            raise ValueError("The Nadam optimizer does not support tf.keras.optimizers.LearningRateSchedules as the "
                             "learning rate.")
        super().__init__(name, learning_rate, beta_1, beta_2, epsilon, **kwargs)
        self._m_cache: tf.Variable | None = None

    def _create_slots(self, var_list: list[tf.Variable]) -> None:
        if self._m_cache is None:
            self._m_cache = backend.make_variable(np.float32(1.0), f"{self._name}/momentum_cache", False)
            self._weights.append(self._m_cache)
        super()._create_slots(var_list)

    def _prepare(self, var_list: list[tf.Variable]) -> dict[Any, dict[str, Any]]:
        self._m_cache_read = tf.identity(self._m_cache)
        return super()._prepare(var_list)

    def _decayed_lr(self, var_dtype: Any) -> Any:
        return self._get_hyper("learning_rate", var_dtype)  # ``decay`` drives the momentum schedule instead

    def _prepare_local(self, var_dtype: Any, apply_state: dict[str, Any]) -> None:
        super()._prepare_local(var_dtype, apply_state)
        beta_1, beta_2 = self._get_hyper("beta_1", var_dtype), self._get_hyper("beta_2", var_dtype)
        step = tf.cast(self.iterations + 1, var_dtype)
        decay = tf.cast(self._initial_decay, var_dtype)
        momentum_t = beta_1 * (1.0 - 0.5 * tf.pow(tf.cast(0.96, var_dtype), decay * step))
        momentum_next = beta_1 * (1.0 - 0.5 * tf.pow(tf.cast(0.96, var_dtype), decay * (step + 1.0)))
        schedule = tf.cast(self._m_cache_read, var_dtype) * momentum_t
        if var_dtype == self._m_cache.dtype:
            self._m_cache.assign(schedule)
        apply_state.update(momentum_t=momentum_t, momentum_next=momentum_next, schedule=schedule,
                           schedule_next=schedule * momentum_next, beta_1=beta_1, beta_2=beta_2,
                           beta_2_power=tf.pow(beta_2, step), epsilon=tf.cast(self.epsilon, var_dtype))

    def _resource_apply_dense(self, grad: Any, var: tf.Variable, coefficients: dict[str, Any]) -> None:
        c = coefficients
        m, v = self.get_slot(var, "m"), self.get_slot(var, "v")
        m_t = c["beta_1"] * m + (1.0 - c["beta_1"]) * grad
        v_t = c["beta_2"] * v + (1.0 - c["beta_2"]) * (grad * grad)
        m.assign(m_t)
        v.assign(v_t)
        m_bar = (1.0 - c["momentum_t"]) * (grad / (1.0 - c["schedule"])) + c["momentum_next"] * (
            m_t / (1.0 - c["schedule_next"]))
        var.assign_sub(c["lr_t"] * m_bar / (tf.sqrt(v_t / (1.0 - c["beta_2_power"])) + c["epsilon"]))


class Ftrl(OptimizerV2):
    """FTRL-proximal (TensorFlow's ``ApplyFtrlV2``): per weight an accumulator of squared gradients and a
    ``linear`` term; the weight is the closed-form minimiser ``(clip(linear, -l1, l1) - linear) / quadratic``,
    with ``l2`` plus ``beta / (2 lr)`` in the quadratic and ``l2_shrinkage`` added to the gradient."""

    def __init__(self, learning_rate: Any = 0.001, learning_rate_power: float = -0.5,
                 initial_accumulator_value: float = 0.1, l1_regularization_strength: float = 0.0,
                 l2_regularization_strength: float = 0.0, name: str = "Ftrl",
                 l2_shrinkage_regularization_strength: float = 0.0, beta: float = 0.0, **kwargs: Any) -> None:
        _check_ftrl(learning_rate_power, initial_accumulator_value, l1_regularization_strength,
                    l2_regularization_strength, l2_shrinkage_regularization_strength)
        super().__init__(name, **kwargs)
        self._set_learning_rate(learning_rate, kwargs)
        self._set_hyper("learning_rate_power", learning_rate_power)
        self._set_hyper("l1_regularization_strength", l1_regularization_strength)
        self._set_hyper("l2_regularization_strength", l2_regularization_strength)
        self._set_hyper("beta", beta)
        self._initial_accumulator_value = float(initial_accumulator_value)
        self._l2_shrinkage_regularization_strength = float(l2_shrinkage_regularization_strength)

    def _create_slots(self, var_list: list[tf.Variable]) -> None:
        for var in var_list:
            self.add_slot(var, "accumulator", initializers.Constant(self._initial_accumulator_value))
            self.add_slot(var, "linear")

    def _prepare_local(self, var_dtype: Any, apply_state: dict[str, Any]) -> None:
        super()._prepare_local(var_dtype, apply_state)
        lr = apply_state["lr_t"]
        apply_state.update(
            power=-self._get_hyper("learning_rate_power", var_dtype),
            l1=self._get_hyper("l1_regularization_strength", var_dtype),
            l2=self._get_hyper("l2_regularization_strength", var_dtype)
            + self._get_hyper("beta", var_dtype) / (2.0 * lr),
            shrinkage=tf.cast(self._l2_shrinkage_regularization_strength, var_dtype))

    def _resource_apply_dense(self, grad: Any, var: tf.Variable, coefficients: dict[str, Any]) -> None:
        c = coefficients
        accum, linear = self.get_slot(var, "accumulator"), self.get_slot(var, "linear")
        accum_t = accum + grad * grad
        sigma = (tf.pow(accum_t, c["power"]) - tf.pow(accum, c["power"])) / c["lr_t"]
        linear_t = linear + (grad + 2.0 * c["shrinkage"] * var) - sigma * var
        quadratic = tf.pow(accum_t, c["power"]) / c["lr_t"] + 2.0 * c["l2"]
        accum.assign(accum_t)
        linear.assign(linear_t)
        var.assign((tf.clip_by_value(linear_t, -c["l1"], c["l1"]) - linear_t) / quadratic)

    def get_config(self) -> dict[str, Any]:
        return {**self._learning_rate_config(),
                "learning_rate_power": self._serialize_hyperparameter("learning_rate_power"),
                "initial_accumulator_value": self._initial_accumulator_value,
                "l1_regularization_strength": self._serialize_hyperparameter("l1_regularization_strength"),
                "l2_regularization_strength": self._serialize_hyperparameter("l2_regularization_strength"),
                "beta": self._serialize_hyperparameter("beta"),
                "l2_shrinkage_regularization_strength": self._l2_shrinkage_regularization_strength}


def _check_ftrl(power: float, initial: float, l1: float, l2: float, shrinkage: float) -> None:
    """Keras's argument checks of Ftrl."""
    if initial < 0.0:
        raise ValueError(f"`initial_accumulator_value` needs to be positive or zero. Received: "
                         f"initial_accumulator_value={initial}.")
    if power > 0.0:
        raise ValueError(f"`learning_rate_power` needs to be negative or zero. Received: learning_rate_power={power}.")
    for name, value in (("l1_regularization_strength", l1), ("l2_regularization_strength", l2),
                        ("l2_shrinkage_regularization_strength", shrinkage)):
        if value < 0.0:
            raise ValueError(f"`{name}` needs to be positive or zero. Received: {name}={value}.")


_CLASSES = {cls.__name__.lower(): cls for cls in (SGD, Adam, RMSprop, Adagrad, Adadelta, Adamax, Nadam, Ftrl)}


def register(cls: type) -> type:
    """Make an optimizer class of another module (``LossScaleOptimizer``) known to :func:`deserialize` by name."""
    _CLASSES[cls.__name__.lower()] = cls
    return cls


def serialize(optimizer: OptimizerV2) -> dict[str, Any]:
    """``{'class_name': ..., 'config': ...}`` of an optimizer."""
    return {"class_name": type(optimizer).__name__, "config": optimizer.get_config()}


def deserialize(config: dict[str, Any], custom_objects: dict[str, Any] | None = None) -> OptimizerV2:
    """The optimizer a :func:`serialize` dict describes."""
    name = config["class_name"]
    cls = generic_utils.get_registered_object(name, custom_objects) or _CLASSES.get(name.lower())
    if cls is None:
        raise ValueError(f"Unknown optimizer: {name}. Please ensure this object is passed to the `custom_objects` "
                         "argument.")
    return cls.from_config(config.get("config", {}), custom_objects)


def get(identifier: Any) -> OptimizerV2:
    """An optimizer from a name (``'adam'``), a config dict or an instance."""
    if isinstance(identifier, OptimizerV2):
        return identifier
    if isinstance(identifier, dict):
        return deserialize(identifier)
    if isinstance(identifier, str):
        cls = _CLASSES.get(identifier.lower())
        if cls is None:
            raise backend.unknown_object("optimizer", identifier)
        return cls()
    raise ValueError(f"Could not interpret optimizer identifier: {identifier}")


__all__ = ["SGD", "Adadelta", "Adagrad", "Adam", "Adamax", "Ftrl", "Nadam", "Optimizer", "RMSprop", "deserialize",
           "get", "schedules", "serialize"]
