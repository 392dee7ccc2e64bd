"""Graphcore's IPU Keras optimizers (``ipu_tensorflow_addons.keras.optimizers``): AdamIpuOptimizer,
LAMBIpuOptimizer and SGDIpuOptimizer on :class:`IpuOptimizerBase`.

They let the optimizer state have its own dtype (``m_dtype``, ``v_dtype``, ``vhat_dtype``,
``momentum_accum_dtype``) and compute the update in ``optimizer_compute_precisions``: gradients and
state are cast to that dtype, updated, and cast back to each variable's and slot's dtype.
SGDIpuOptimizer is Keras's SGD. AdamIpuOptimizer debiases the moments before adding ``epsilon``
(``lr * m_hat / (sqrt(v_hat) + epsilon)``; Keras's Adam folds the debiasing into the learning rate,
which moves ``epsilon``), can skip the debiasing, and its AMSGrad keeps the maximum of the
debiased ``v``. LAMBIpuOptimizer is LAMB (You et al. 2019): Adam's update plus decoupled weight
decay, scaled per variable by the trust ratio ``||w|| / ||update||``.
"""

from __future__ import annotations

import re
from typing import Any

from popjit.errors import UnimplementedError
from popjit.frontend import api as tf
from popjit.keras import backend
from popjit.keras.optimizer_v2 import OptimizerV2
from popjit.keras.optimizers import SGD, Adam

__all__ = ["AdamIpuOptimizer", "IpuOptimizerBase", "LAMBIpuOptimizer", "SGDIpuOptimizer"]


def _dtype_name(dtype: Any) -> Any:
    return None if dtype is None else tf.as_dtype(dtype).name


class IpuOptimizerBase(OptimizerV2):
    """Base of the IPU optimizers: ``optimizer_compute_precisions`` (a tuple of dtypes for the stages
    of the update) and slots of a dtype of their own (:meth:`get_slot_dtype`). Outlining the update
    (``outline_apply_gradients=True``) changes only the IPU's code size, which popjit does not model,
    and is refused."""

    def __init__(self, name: str, optimizer_compute_precisions: Any = (tf.float32,),
                 outline_apply_gradients: bool = False, outline_apply_gradients_kwargs: Any = None,
                 **kwargs: Any) -> None:
        if outline_apply_gradients:
            raise UnimplementedError(
                f"{type(self).__name__}(outline_apply_gradients=True) is not supported by popjit: outlining the "
                "weight update only shares its code on the IPU, which popjit does not model. Remove it.")
        super().__init__(name, **kwargs)
        self.opt_dtypes = tuple(tf.as_dtype(d) for d in optimizer_compute_precisions)
        self.outline_apply_gradients = False
        self.outline_apply_gradients_kwargs = dict(outline_apply_gradients_kwargs or {})

    def get_slot_dtype(self, var: Any, slot_name: str) -> Any:
        """The dtype of ``var``'s slot ``slot_name`` (None: ``var``'s)."""
        return var.dtype

    def add_slot_with_dtype(self, var: Any, slot_name: str, dtype: Any, initializer: Any = "zeros") -> Any:
        """:meth:`add_slot` with an explicit dtype (None: ``var``'s)."""
        return self.add_slot(var, slot_name, initializer=initializer, dtype=dtype)

    def _create_slots_of(self, var_list: list[Any], names: list[str]) -> None:
        for name in names:
            for var in var_list:
                self.add_slot(var, name, dtype=self.get_slot_dtype(var, name))

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "optimizer_compute_precisions": tuple(d.name for d in self.opt_dtypes),
                "outline_apply_gradients": self.outline_apply_gradients,
                "outline_apply_gradients_kwargs": self.outline_apply_gradients_kwargs}


def _l2_norm(t: Any) -> Any:
    return tf.sqrt(tf.reduce_sum(tf.square(t)))


def _moments(opt: Any, grad: Any, var: Any, c: dict[str, Any]) -> tuple[Any, Any, Any, Any]:
    """Adam's moment update in the compute dtype: the new ``m`` and ``v`` (stored in their slots) and
    the (debiased unless ``opt.debiasing`` is off) estimates ``m_hat``, ``v_hat``."""
    dtype = opt.opt_dtypes[0]
    m, v = opt.get_slot(var, "m"), opt.get_slot(var, "v")
    g = tf.cast(grad, dtype)
    next_m = tf.cast(m, dtype) * c["beta_1"] + g * (1.0 - c["beta_1"])
    next_v = tf.cast(v, dtype) * c["beta_2"] + tf.square(g) * (1.0 - c["beta_2"])
    m.assign(tf.cast(next_m, m.dtype))
    v.assign(tf.cast(next_v, v.dtype))
    if not opt.debiasing:
        return next_m, next_v, next_m, next_v
    return next_m, next_v, next_m / (1.0 - c["beta_1_power"]), next_v / (1.0 - c["beta_2_power"])


def _prepare_moments(opt: Any, apply_state: dict[str, Any]) -> None:
    """The coefficients of the moment update, in the compute dtype."""
    dtype = opt.opt_dtypes[0]
    step = tf.cast(opt.iterations + 1, dtype)
    beta_1, beta_2 = opt._get_hyper("beta_1", dtype), opt._get_hyper("beta_2", dtype)
    apply_state.update(beta_1=beta_1, beta_2=beta_2, beta_1_power=tf.pow(beta_1, step),
                       beta_2_power=tf.pow(beta_2, step), epsilon=tf.cast(opt.epsilon, dtype))


class AdamIpuOptimizer(Adam, IpuOptimizerBase):
    """Adam with ``m_dtype``/``v_dtype``/``vhat_dtype`` state, ``debiasing`` and compute precisions:
    ``var -= lr * m_hat / (sqrt(v_hat) + epsilon)`` (see the module docstring)."""

    def __init__(self, learning_rate: Any = 0.001, beta_1: Any = 0.9, beta_2: Any = 0.999, epsilon: float = 1e-7,
                 amsgrad: bool = False, name: str = "Adam", m_dtype: Any = None, v_dtype: Any = None,
                 vhat_dtype: Any = None, debiasing: bool = True, optimizer_compute_precisions: Any = (tf.float32,),
                 outline_apply_gradients: bool = False, outline_apply_gradients_kwargs: Any = None,
                 **kwargs: Any) -> None:
        super().__init__(learning_rate, beta_1, beta_2, epsilon, amsgrad, name,
                         optimizer_compute_precisions=optimizer_compute_precisions,
                         outline_apply_gradients=outline_apply_gradients,
                         outline_apply_gradients_kwargs=outline_apply_gradients_kwargs, **kwargs)
        self.m_dtype, self.v_dtype, self.vhat_dtype = m_dtype, v_dtype, vhat_dtype
        self.debiasing = bool(debiasing)

    def get_slot_dtype(self, var: Any, slot_name: str) -> Any:
        return {"m": self.m_dtype, "v": self.v_dtype, "vhat": self.vhat_dtype}[slot_name]

    def _create_slots(self, var_list: list[Any]) -> None:
        self._create_slots_of(var_list, ["m", "v", "vhat"] if self.amsgrad else ["m", "v"])

    def _prepare_local(self, var_dtype: Any, apply_state: dict[str, Any]) -> None:
        OptimizerV2._prepare_local(self, var_dtype, apply_state)
        _prepare_moments(self, apply_state)

    def _resource_apply_dense(self, grad: Any, var: Any, coefficients: dict[str, Any]) -> None:
        dtype = self.opt_dtypes[0]
        _, _, m_hat, v_hat = _moments(self, grad, var, coefficients)
        if self.amsgrad:
            vhat = self.get_slot(var, "vhat")
            v_hat = tf.maximum(tf.cast(vhat, dtype), v_hat)
            vhat.assign(tf.cast(v_hat, vhat.dtype))
        update = m_hat / (tf.sqrt(v_hat) + coefficients["epsilon"])
        var.assign_sub(tf.cast(tf.cast(coefficients["lr_t"], dtype) * update, var.dtype))

    def get_config(self) -> dict[str, Any]:
        return {**IpuOptimizerBase.get_config(self), **Adam.get_config(self), "m_dtype": _dtype_name(self.m_dtype),
                "v_dtype": _dtype_name(self.v_dtype), "vhat_dtype": _dtype_name(self.vhat_dtype),
                "debiasing": self.debiasing}


class SGDIpuOptimizer(SGD, IpuOptimizerBase):
    """Keras's SGD (momentum, Nesterov) with a ``momentum_accum_dtype`` for the momentum and the
    update computed in ``optimizer_compute_precisions[0]``."""

    def __init__(self, learning_rate: Any = 0.01, momentum: Any = 0.0, nesterov: bool = False, name: str = "SGD",
                 momentum_accum_dtype: Any = None, optimizer_compute_precisions: Any = (tf.float32,),
                 outline_apply_gradients: bool = False, outline_apply_gradients_kwargs: Any = None,
                 **kwargs: Any) -> None:
        super().__init__(learning_rate, momentum, nesterov, name,
                         optimizer_compute_precisions=optimizer_compute_precisions,
                         outline_apply_gradients=outline_apply_gradients,
                         outline_apply_gradients_kwargs=outline_apply_gradients_kwargs, **kwargs)
        self.momentum_accum_dtype = momentum_accum_dtype

    def _create_slots(self, var_list: list[Any]) -> None:
        if self._momentum:
            for var in var_list:
                self.add_slot_with_dtype(var, "momentum", self.momentum_accum_dtype)

    def _resource_apply_dense(self, grad: Any, var: Any, coefficients: dict[str, Any]) -> None:
        if not self._momentum:
            var.assign_sub(grad * coefficients["lr_t"])
            return
        dtype = self.opt_dtypes[0]
        accum = self.get_slot(var, "momentum")
        g, lr = tf.cast(grad, dtype), tf.cast(coefficients["lr_t"], dtype)
        momentum = tf.cast(coefficients["momentum"], dtype)
        new = tf.cast(accum, dtype) * momentum - lr * g
        step = new * momentum - lr * g if self.nesterov else new
        accum.assign(tf.cast(new, accum.dtype))
        var.assign_add(tf.cast(step, var.dtype))

    def get_config(self) -> dict[str, Any]:
        return {**IpuOptimizerBase.get_config(self), **SGD.get_config(self),
                "momentum_accum_dtype": _dtype_name(self.momentum_accum_dtype)}


class LAMBIpuOptimizer(IpuOptimizerBase):
    """LAMB: Adam's ``m_hat / (sqrt(v_hat) + epsilon)`` plus ``weight_decay_rate * var`` (except for
    variables matching ``exclude_from_weight_decay``), times ``lr`` and the trust ratio
    ``||var|| / ||update||`` (1 when either norm is 0, or for ``exclude_from_layer_adaptation``;
    ``||var||`` clipped at ``weight_norm_clip``). Two compute precisions: the update, then the
    ratio and its product."""

    def __init__(self, learning_rate: Any = 0.001, beta_1: Any = 0.9, beta_2: Any = 0.999, epsilon: float = 1e-6,
                 weight_decay_rate: Any = 0.0, exclude_from_weight_decay: Any = None,
                 exclude_from_layer_adaptation: Any = None, name: str = "LAMB", debiasing: bool = True,
                 m_dtype: Any = None, v_dtype: Any = None, weight_norm_clip: Any = None,
                 optimizer_compute_precisions: Any = (tf.float32, tf.float32), outline_apply_gradients: bool = False,
                 outline_apply_gradients_kwargs: Any = None, **kwargs: Any) -> None:
        super().__init__(name, optimizer_compute_precisions, outline_apply_gradients, outline_apply_gradients_kwargs,
                         **kwargs)
        if len(self.opt_dtypes) != 2:
            raise ValueError("Must provide a list of two elements for the optimizer compute precision. The final "
                             "stage of the weight update can be done in a different precision to the initial stage.")
        self._set_hyper("weight_decay_rate", weight_decay_rate)
        self._set_learning_rate(learning_rate, kwargs)
        self._set_hyper("beta_1", beta_1)
        self._set_hyper("beta_2", beta_2)
        self.epsilon = epsilon or backend.epsilon()
        self.exclude_from_weight_decay = exclude_from_weight_decay
        self.exclude_from_layer_adaptation = exclude_from_layer_adaptation
        self.weight_norm_clip = weight_norm_clip
        self.m_dtype, self.v_dtype, self.debiasing = m_dtype, v_dtype, bool(debiasing)

    def get_slot_dtype(self, var: Any, slot_name: str) -> Any:
        return {"m": self.m_dtype, "v": self.v_dtype}[slot_name]

    def _create_slots(self, var_list: list[Any]) -> None:
        self._create_slots_of(var_list, ["m", "v"])

    def _prepare_local(self, var_dtype: Any, apply_state: dict[str, Any]) -> None:
        super()._prepare_local(var_dtype, apply_state)
        _prepare_moments(self, apply_state)
        apply_state["weight_decay_rate"] = self._get_hyper("weight_decay_rate", self.opt_dtypes[0])

    @staticmethod
    def _matches(patterns: Any, name: str) -> bool:
        return any(re.search(p, name) is not None for p in patterns or ())

    def _resource_apply_dense(self, grad: Any, var: Any, coefficients: dict[str, Any]) -> None:
        dtype, ratio_dtype = self.opt_dtypes
        name = re.sub(r":\d+$", "", var.name)
        _, _, m_hat, v_hat = _moments(self, grad, var, coefficients)
        update = m_hat / (tf.sqrt(v_hat) + coefficients["epsilon"])
        if not self._matches(self.exclude_from_weight_decay, name):
            update = update + tf.cast(var, dtype) * coefficients["weight_decay_rate"]
        update = tf.reshape(update, [-1])
        ratio = tf.ones([], dtype)
        if not self._matches(self.exclude_from_layer_adaptation, name):
            w_norm = _l2_norm(tf.cast(var, dtype))
            u_norm = _l2_norm(update)
            if self.weight_norm_clip is not None:
                w_norm = tf.minimum(w_norm, tf.cast(self.weight_norm_clip, dtype))
            safe_u = tf.where(u_norm > 0, u_norm, tf.ones_like(u_norm))
            ratio = tf.where(tf.logical_and(w_norm > 0, u_norm > 0), w_norm / safe_u, tf.ones_like(w_norm))
        step = tf.cast(tf.cast(coefficients["lr_t"], dtype) * ratio, ratio_dtype) * tf.cast(update, ratio_dtype)
        var.assign_sub(tf.cast(tf.reshape(step, var.shape.as_list()), var.dtype))

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), **self._learning_rate_config(),
                "weight_decay_rate": self._serialize_hyperparameter("weight_decay_rate"),
                "beta_1": self._serialize_hyperparameter("beta_1"), "beta_2": self._serialize_hyperparameter("beta_2"),
                "epsilon": self.epsilon, "exclude_from_weight_decay": self.exclude_from_weight_decay,
                "exclude_from_layer_adaptation": self.exclude_from_layer_adaptation,
                "weight_norm_clip": self.weight_norm_clip, "m_dtype": _dtype_name(self.m_dtype),
                "v_dtype": _dtype_name(self.v_dtype), "debiasing": self.debiasing}
