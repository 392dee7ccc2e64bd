"""``tf.keras.mixed_precision``: dtype policies, autocast weights and dynamic loss scaling (Keras 2.6's API).

A :class:`Policy` names a layer's two dtypes: ``compute_dtype`` (its inputs are cast to it and it
computes in it) and ``variable_dtype`` (its weights). ``"mixed_float16"`` computes in float16 and
keeps float32 weights; a weight a layer creates is then an :class:`AutoCastVariable`, read as
float16 inside that layer's call (so gradients flow back to the float32 weight through the cast)
and as float32 everywhere else (the optimizer updates float32 values). A layer's policy is its
``dtype=`` argument (a policy, its name, or a dtype), else the global policy at its creation
(:func:`set_global_policy`); without either, ``backend.floatx()``.

:class:`LossScaleOptimizer` wraps an optimizer with dynamic loss scaling, as Keras 2.6's does: the
loss is multiplied by the loss scale before differentiating and the gradients divided by it; a step
whose gradients are not all finite is skipped (the wrapped optimizer's ``iterations`` still counts
it) and halves the scale (not below 1); ``dynamic_growth_steps`` finite steps in a row double it.
``Model.compile`` wraps the optimizer of a ``mixed_float16`` model in one.

bfloat16 does not exist in popjit: ``"mixed_bfloat16"`` and ``"bfloat16"`` raise ``UnimplementedError``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from popjit.frontend import api as tf
from popjit.keras import backend, optimizers
from popjit.keras.optimizer_v2 import OptimizerV2, _filter_grads

_MIXED = {"mixed_float16": ("float16", "float32"), "mixed_bfloat16": ("bfloat16", "float32")}
_INITIAL_SCALE = 2.0**15
_GROWTH_STEPS = 2000


class Policy:
    """A dtype policy: the ``compute_dtype`` a layer computes in and the ``variable_dtype`` of its weights."""

    def __init__(self, name: str) -> None:
        if isinstance(name, tf.DType):
            raise TypeError(f"'name' must be a string, not a DType. Instead, pass DType.name. Got: {name.name}")
        if not isinstance(name, str):
            raise TypeError(f"'name' must be a string, but got: {name}")
        self._name = name
        self._compute_dtype, self._variable_dtype = self._parse_name(name)

    @staticmethod
    def _parse_name(name: str) -> tuple[str | None, str | None]:
        if name.endswith("_float32_vars"):
            raise ValueError(f"Policies ending in '_float32_vars' have been removed from TensorFlow. Got policy "
                             f"name: '{name}'")
        if "bfloat16" in name:
            raise tf.errors.UnimplementedError(
                f"The '{name}' policy needs bfloat16, which popjit does not have. Use 'mixed_float16' (float16 "
                "computation, float32 weights) instead.")
        if name in _MIXED:
            return _MIXED[name]
        if name == "_infer":
            return None, None
        try:
            dtype = tf.as_dtype(name).name
        except (TypeError, ValueError, AttributeError):
            raise ValueError(f"Cannot convert value {name} to a mixed precision Policy. Valid policies include "
                             "'mixed_float16', 'mixed_bfloat16', and the name of any dtype such as "
                             "'float32'.") from None
        return dtype, dtype

    @property
    def name(self) -> str:
        """The policy's name: ``"mixed_float16"`` or a dtype name."""
        return self._name

    @property
    def compute_dtype(self) -> str | None:
        """The dtype layers compute in (their inputs are cast to it)."""
        return self._compute_dtype

    @property
    def variable_dtype(self) -> str | None:
        """The dtype of layers' weights."""
        return self._variable_dtype

    def __repr__(self) -> str:
        return f'<Policy "{self._name}">'

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, Policy) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self._name)

    def get_config(self) -> dict[str, Any]:
        """``{'name': name}``."""
        return {"name": self._name}

    @classmethod
    def from_config(cls, config: dict[str, Any], custom_objects: Any = None) -> Policy:
        """The policy of :meth:`get_config`'s dict."""
        return cls(**config)


_GLOBAL: list[Policy | None] = [None]


def global_policy() -> Policy:
    """The policy of layers created without ``dtype=``: the one :func:`set_global_policy` set, else
    ``backend.floatx()``'s."""
    return _GLOBAL[0] if _GLOBAL[0] is not None else Policy(backend.floatx())


def set_global_policy(policy: Any) -> None:
    """Make ``policy`` (a :class:`Policy` or its name; None: back to ``floatx``) the policy of layers
    created from now on without ``dtype=``."""
    if policy is not None and not isinstance(policy, Policy):
        policy = Policy(policy)
    if policy is not None and policy.compute_dtype is not None and not tf.as_dtype(policy.compute_dtype).is_floating:
        raise ValueError("set_global_policy can only be used to set the global policy to floating-point policies, "
                         f'such as "float32" and "mixed_float16", but got policy: {policy.name}')
    _GLOBAL[0] = policy


def policy_of(dtype: Any) -> Policy | None:
    """A layer's policy from its ``dtype=`` argument: a policy, a policy's name or config, or a dtype; for
    None the global policy, if one is set (None otherwise: the layer follows ``backend.floatx()``)."""
    if isinstance(dtype, Policy):
        return dtype
    if isinstance(dtype, dict):
        return deserialize(dtype)
    if isinstance(dtype, str) and dtype in _MIXED:
        return Policy(dtype)
    if dtype is not None:
        return Policy(tf.as_dtype(dtype).name)
    return _GLOBAL[0]


def serialize(policy: Policy) -> Any:
    """A policy as a layer config holds it: its name when it is a plain dtype's, else Keras's
    ``{'class_name': 'Policy', 'config': {'name': ...}}``."""
    if policy.compute_dtype == policy.variable_dtype and policy.name == policy.compute_dtype:
        return policy.name
    return {"class_name": "Policy", "config": policy.get_config()}


def deserialize(config: Any, custom_objects: Any = None) -> Policy:
    """The policy of :func:`serialize`'s value."""
    if isinstance(config, str):
        return Policy(config)
    if config is None:
        return Policy("_infer")
    if not isinstance(config, dict) or config.get("class_name") not in ("Policy", "DTypePolicy", "PolicyV1"):
        raise ValueError(f"Unknown policy config: {config}")
    return Policy.from_config(dict(config.get("config", {})), custom_objects)


class AutoCastVariable(tf.Variable):
    """A floating-point weight of a mixed-precision layer: inside a layer's call it reads as that layer's
    compute dtype (``backend.autocast_dtype``), elsewhere as its own dtype, which it keeps (``dtype``)."""

    def read_value(self) -> tf.Tensor:
        value = super().read_value()
        target = backend.autocast_dtype()
        if target is not None and tf.as_dtype(target) != value.dtype:
            return tf.cast(value, target)
        return value

    def __repr__(self) -> str:
        return super().__repr__().replace("<tf.Variable", "<AutoCastVariable", 1)


# -- loss scaling -----------------------------------------------------------------------------------


def _all_finite(grads: list[Any]) -> Any:
    """True when every gradient is finite everywhere (a bool tensor)."""
    flags = [tf.reduce_all(tf.math.is_finite(g)) for g in grads]
    return tf.reduce_all(tf.stack(flags)) if len(flags) > 1 else flags[0]


@optimizers.register
class LossScaleOptimizer(OptimizerV2):
    """An optimizer with loss scaling (Keras 2.6's ``tf.keras.mixed_precision.LossScaleOptimizer``):
    ``dynamic`` (the default) starts at ``initial_scale`` (2**15) and adapts as the module docstring
    says; otherwise the scale stays ``initial_scale``. Everything else is the wrapped optimizer's."""

    def __init__(self, inner_optimizer: Any, dynamic: bool = True, initial_scale: float | None = None,
                 dynamic_growth_steps: int | None = None) -> None:
        if not isinstance(inner_optimizer, OptimizerV2):
            raise TypeError(f'"inner_optimizer" must be an instance of OptimizerV2, but got: {inner_optimizer}')
        if not isinstance(dynamic, bool):
            raise TypeError(f'"dynamic" argument to LossScaleOptimizer.__init__ must be a bool, but got: {dynamic!r}')
        if isinstance(inner_optimizer, LossScaleOptimizer):
            raise TypeError(f"LossScaleOptimizer cannot wrap another LossScaleOptimizer, but got: {inner_optimizer}")
        if getattr(inner_optimizer, "_is_wrapped_by_loss_scale_optimizer", False):
            raise ValueError('"inner_optimizer" is already wrapped by a LossScaleOptimizer. An optimizer can only be '
                             "wrapped by a single LossScaleOptimizer")
        if not dynamic:
            if initial_scale is None:
                raise ValueError('"initial_scale" must be specified if "dynamic" is False')
            if dynamic_growth_steps is not None:
                raise ValueError(f'"dynamic_growth_steps" must be None if "dynamic" is False, but got: '
                                 f"{dynamic_growth_steps}")
        state = {"_optimizer": inner_optimizer, "_dynamic": dynamic,
                 "_initial_scale": float(_INITIAL_SCALE if initial_scale is None else initial_scale),
                 "_growth_steps": int(_GROWTH_STEPS if dynamic_growth_steps is None else dynamic_growth_steps),
                 "_scale": None, "_counter": None, "_name": "LossScaleOptimizer"}
        self.__dict__.update(state)
        object.__setattr__(inner_optimizer, "_is_wrapped_by_loss_scale_optimizer", True)

    # -- what Keras's LossScaleOptimizer exposes ---------------------------------------------------
    @property
    def inner_optimizer(self) -> OptimizerV2:
        """The wrapped optimizer."""
        return self._optimizer

    @property
    def dynamic(self) -> bool:
        """Whether the loss scale adapts."""
        return self._dynamic

    @property
    def initial_scale(self) -> float:
        """The loss scale the optimizer started with."""
        return self._initial_scale

    @property
    def dynamic_growth_steps(self) -> int | None:
        """Finite steps in a row after which the scale doubles (None when not dynamic)."""
        return self._growth_steps if self._dynamic else None

    @property
    def loss_scale(self) -> tf.Tensor:
        """The current loss scale (a float32 scalar)."""
        if not self._dynamic:
            return tf.convert_to_tensor(np.float32(self._initial_scale))
        return self._scale_variables()[0].read_value()

    @property
    def dynamic_counter(self) -> tf.Variable | None:
        """The number of finite steps since the scale last changed (an int64 variable; None when not dynamic)."""
        return self._scale_variables()[1] if self._dynamic else None

    def _scale_variables(self) -> tuple[tf.Variable, tf.Variable]:
        """The current scale and the good-steps counter, created beside the wrapped optimizer's state."""
        if self._scale is None:
            strategy = getattr(self._optimizer, "_strategy", None)
            with backend.init_scope():
                scale = backend.make_variable(np.float32(self._initial_scale), "current_loss_scale", False, strategy)
                counter = backend.make_variable(np.int64(0), "good_steps", False, strategy)
            self.__dict__.update(_scale=scale, _counter=counter)
        return self._scale, self._counter

    def get_scaled_loss(self, loss: Any) -> Any:
        """``loss`` times the loss scale (a callable loss gives a callable)."""
        if callable(loss):
            def scaled() -> Any:
                value = loss()
                return value * tf.cast(self.loss_scale, value.dtype)

            return scaled
        return loss * tf.cast(self.loss_scale, tf.convert_to_tensor(loss).dtype)

    def get_unscaled_gradients(self, grads: list[Any]) -> list[Any]:
        """Each gradient times ``1 / loss_scale`` (None stays None)."""
        reciprocal = 1.0 / self.loss_scale
        return [None if g is None else g * tf.cast(reciprocal, tf.convert_to_tensor(g).dtype) for g in grads]

    # -- the update ---------------------------------------------------------------------------------
    def _compute_gradients(self, loss: Any, var_list: Any, grad_loss: Any = None, tape: Any = None) -> list[Any]:
        tape = tape if tape is not None else tf.GradientTape()
        with tape:
            loss = self.get_scaled_loss(loss)
        pairs = self._optimizer._compute_gradients(loss, var_list, grad_loss, tape=tape)
        grads = self.get_unscaled_gradients([g for g, _ in pairs])
        return list(zip(grads, [v for _, v in pairs]))

    def apply_gradients(self, grads_and_vars: Any, name: str | None = None,
                        experimental_aggregate_gradients: bool = True) -> tf.Variable:
        """Apply the (unscaled) gradients if they are all finite, else skip the step; then update the
        loss scale (dynamic only)."""
        pairs = _filter_grads(grads_and_vars)
        inner = self._optimizer
        if not self._dynamic:
            return inner.apply_gradients(pairs, name)
        inner._create_all_weights([v for _, v in pairs])  # the slots exist before the step may be skipped
        scale, counter = self._scale_variables()
        finite = _all_finite([tf.convert_to_tensor(g) for g, _ in pairs])

        def apply() -> None:
            inner.apply_gradients(pairs, name)

        def skip() -> None:
            inner.iterations.assign_add(np.int64(1))

        tf.cond(finite, apply, skip)
        grow = tf.logical_and(finite, counter + 1 >= self._growth_steps)
        doubled = scale * 2.0
        grown = tf.where(tf.math.is_finite(doubled), doubled, scale)
        scale.assign(tf.where(finite, tf.where(grow, grown, scale), tf.maximum(scale / 2.0, 1.0)))
        counter.assign(tf.where(finite, tf.where(grow, np.int64(0), counter + 1), np.int64(0)))
        return inner.iterations

    def _create_all_weights(self, var_list: list[tf.Variable]) -> None:
        self._optimizer._create_all_weights(var_list)
        if self._dynamic:
            self._scale_variables()

    # -- state and configuration: the wrapped optimizer's ------------------------------------------
    @property
    def iterations(self) -> tf.Variable:
        """The wrapped optimizer's step counter (skipped steps count)."""
        return self._optimizer.iterations

    @property
    def weights(self) -> list[tf.Variable]:
        """The wrapped optimizer's weights."""
        return self._optimizer.weights

    def variables(self) -> list[tf.Variable]:
        """The wrapped optimizer's variables."""
        return self._optimizer.variables()

    def get_weights(self) -> list[np.ndarray]:
        return self._optimizer.get_weights()

    def set_weights(self, weights: list[Any]) -> None:
        self._optimizer.set_weights(weights)

    def get_config(self) -> dict[str, Any]:
        """The wrapped optimizer (serialized) and the loss-scaling arguments."""
        return {"inner_optimizer": optimizers.serialize(self._optimizer), "dynamic": self._dynamic,
                "initial_scale": self._initial_scale, "dynamic_growth_steps": self.dynamic_growth_steps}

    @classmethod
    def from_config(cls, config: dict[str, Any], custom_objects: Any = None) -> LossScaleOptimizer:
        """The optimizer of :meth:`get_config`'s dict."""
        config = dict(config)
        config["inner_optimizer"] = optimizers.deserialize(config["inner_optimizer"], custom_objects)
        return cls(**config)

    def __getattr__(self, name: str) -> Any:
        inner = self.__dict__.get("_optimizer")
        if inner is None:
            raise AttributeError(name)
        return getattr(inner, name)

    def __setattr__(self, name: str, value: Any) -> None:
        inner = self.__dict__.get("_optimizer")
        key = "learning_rate" if name == "lr" else name
        if inner is not None and key in inner.__dict__.get("_hyper", {}):
            setattr(inner, name, value)
        else:
            object.__setattr__(self, name, value)

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(dir(self._optimizer)))

    def __repr__(self) -> str:
        return f"<LossScaleOptimizer wrapping {self._optimizer!r}>"
