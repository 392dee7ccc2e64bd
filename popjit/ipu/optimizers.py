"""``ipu.optimizers``: Graphcore's optimizer wrappers.

Each wraps another optimizer, a TF1 one (``tf.compat.v1.train.*Optimizer``) or a Keras one, and changes
the gradients between computing and applying them:

- :class:`CrossReplicaOptimizer`: each gradient summed over the replicas (plain data parallelism);
- :class:`MapGradientOptimizer`: each gradient replaced by ``gradient_mapping_function(grad, var)``;
- :class:`ShardedOptimizer` (:mod:`popjit.ipu.sharded_optimizer`): each variable's update on its gradient's IPU;
- :class:`GradientAccumulationOptimizerV2` (``popjit.keras.gradient_accumulation``) and
  :class:`CrossReplicaGradientAccumulationOptimizerV2`: applied once every ``num_mini_batches`` steps,
  the latter to gradients summed over the replicas once per application.

As in Graphcore's, the change happens in ``compute_gradients`` (and so in ``minimize``); ``apply_gradients``
is the wrapped optimizer's. A Keras optimizer already sums its gradients over the replicas when it
applies them (:meth:`popjit.keras.optimizer_v2.OptimizerV2.apply_gradients`); wrapped, it applies the
wrapper's gradients as they are, so nothing is summed twice.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from popjit.compat.v1.train import Optimizer as TF1Optimizer
from popjit.errors import missing_attributes as _missing_attributes
from popjit.frontend.replication import cross_replica_sum
from popjit.keras.gradient_accumulation import GradientAccumulationOptimizerV2, GradientAccumulator
from popjit.keras.optimizer_v2 import OptimizerV2

__all__ = ["CrossReplicaGradientAccumulationOptimizerV2", "CrossReplicaOptimizer", "GradientAccumulationOptimizerV2",
           "IpuOptimizer", "MapGradientOptimizer", "ShardedOptimizer"]


class IpuOptimizer:
    """The base of the wrappers: ``opt``'s ``compute_gradients`` followed by :meth:`transform`, then ``opt``'s
    ``apply_gradients``. Other attributes (``iterations``, ``learning_rate``, ``get_slot``...) are ``opt``'s."""

    def __init__(self, opt: Any, name: str | None = None) -> None:
        if not isinstance(opt, (TF1Optimizer, OptimizerV2, IpuOptimizer)):
            raise TypeError(f"{type(self).__name__} wraps a TensorFlow 1 optimizer (tf.compat.v1.train.*Optimizer) "
                            f"or a Keras optimizer, not {type(opt).__name__}.")
        self._opt = opt
        self._name = name or type(self).__name__

    def transform(self, grads_and_vars: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
        """The gradients to apply, from the computed ones (unchanged here)."""
        return grads_and_vars

    @property
    def _keras(self) -> bool:
        """Whether the optimizer at the bottom of the wrappers is a Keras one."""
        return self._opt._keras if isinstance(self._opt, IpuOptimizer) else isinstance(self._opt, OptimizerV2)

    def get_name(self) -> str:
        return self._name

    def compute_gradients(self, loss: Any, var_list: Any = None, **kwargs: Any) -> list[tuple[Any, Any]]:
        """The wrapped optimizer's gradients of ``loss``, transformed (``[(gradient, variable)]``)."""
        if isinstance(self._opt, OptimizerV2):
            computed = self._opt._compute_gradients(loss, var_list, kwargs.get("grad_loss"), kwargs.get("tape"))
        else:
            computed = self._opt.compute_gradients(loss, var_list=var_list, **kwargs)
        return self.transform([(g, v) for g, v in computed])

    def apply_gradients(self, grads_and_vars: Any, *args: Any, **kwargs: Any) -> Any:
        """The wrapped optimizer's update with these gradients."""
        return self._opt.apply_gradients(list(grads_and_vars), *args, **kwargs)

    def minimize(self, loss: Any, global_step: Any = None, var_list: Any = None, **kwargs: Any) -> Any:
        """``apply_gradients(compute_gradients(loss))``: TF1's signature (``loss, global_step, var_list``),
        or Keras's (``loss, var_list, tape=...``) for a wrapped Keras optimizer."""
        if self._keras:
            var_list = global_step if var_list is None else var_list  # Keras: minimize(loss, var_list, ...)
            pairs = self.compute_gradients(loss, var_list, **kwargs)
            return self.apply_gradients(pairs, experimental_aggregate_gradients=False)
        pairs = self.compute_gradients(loss, var_list, **{k: v for k, v in kwargs.items() if k != "name"})
        return self.apply_gradients(pairs, global_step, kwargs.get("name"))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_opt", "_name"):
            raise AttributeError(name)
        return getattr(self._opt, name)


def bottom_optimizer(opt: Any) -> Any:
    """The TF1 or Keras optimizer at the bottom of a stack of wrappers."""
    while isinstance(opt, IpuOptimizer):
        opt = opt._opt
    return opt


class CrossReplicaOptimizer(IpuOptimizer):
    """``CrossReplicaOptimizer(opt)``: each gradient summed over all replicas before ``opt`` applies it, so
    every replica makes the same update (data parallelism). In a program on one IPU the sum is the
    gradient itself."""

    def __init__(self, opt: Any, name: str = "CrossReplicaOptimizer") -> None:
        super().__init__(opt, name)

    def transform(self, grads_and_vars: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
        return _summed(grads_and_vars)


class ShardedOptimizer(IpuOptimizer):
    """``ShardedOptimizer(optimizer)``: ``optimizer`` (a TF1 or Keras one), each variable's update placed on the
    IPU of its gradient, which is the IPU of the forward op that used it (in a sharded program popjit already
    computes each gradient there; without the wrapper an update goes where most of its data is). The values
    are the wrapped optimizer's."""

    def __init__(self, optimizer: Any, name: str = "ShardedOptimizer") -> None:
        super().__init__(optimizer, name)

    def apply_gradients(self, grads_and_vars: Any, *args: Any, **kwargs: Any) -> Any:
        """The wrapped optimizer's update, each variable's on its gradient's IPU."""
        bottom = bottom_optimizer(self)
        bottom._places_updates = True
        try:
            return super().apply_gradients(grads_and_vars, *args, **kwargs)
        finally:
            del bottom._places_updates


def _summed(grads_and_vars: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    """Each gradient summed over all replicas."""
    return [(None if g is None else cross_replica_sum(g), v) for g, v in grads_and_vars]


class MapGradientOptimizer(IpuOptimizer):
    """``MapGradientOptimizer(wrapped_optimizer, gradient_mapping_function)``: each gradient replaced by
    ``gradient_mapping_function(grad, var)`` before the wrapped optimizer applies it."""

    def __init__(self, wrapped_optimizer: Any, gradient_mapping_function: Callable[[Any, Any], Any],
                 name: str = "MapGradientOptimizer") -> None:
        super().__init__(wrapped_optimizer, name)
        self._map = gradient_mapping_function

    def transform(self, grads_and_vars: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
        return [(None if g is None else self._map(g, v), v) for g, v in grads_and_vars]


class CrossReplicaGradientAccumulationOptimizerV2(GradientAccumulationOptimizerV2):
    """``GradientAccumulationOptimizerV2`` whose accumulated gradients are summed over the replicas once per
    application (every ``num_mini_batches`` steps), then applied by ``opt``."""

    def __init__(self, opt: Any, num_mini_batches: int, offload_weight_update_variables: Any = None,
                 replicated_optimizer_state_sharding: bool = False, dtype: Any = None,
                 reduction_method: Any = "sum", name: str = "CrossReplicaGradientAccumulationOptimizerV2") -> None:
        super().__init__(opt, num_mini_batches, offload_weight_update_variables, replicated_optimizer_state_sharding,
                         dtype, reduction_method, name)
        self._accumulator = GradientAccumulator(_SummedThenApplied(opt), num_mini_batches, reduction_method)


class _SummedThenApplied:
    """What an accumulator applies through: the gradients summed over the replicas, then ``opt``'s update
    (its other attributes are ``opt``'s)."""

    def __init__(self, opt: Any) -> None:
        self.opt = opt

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "opt":
            raise AttributeError(name)
        return getattr(self.opt, name)

    def apply_gradients(self, grads_and_vars: Any) -> Any:
        pairs = _summed(list(grads_and_vars))
        if isinstance(self.opt, OptimizerV2):
            return self.opt.apply_gradients(pairs, experimental_aggregate_gradients=False)
        return self.opt.apply_gradients(pairs)


__getattr__ = _missing_attributes("ipu.optimizers")  # popjit/support.py lists what is missing

