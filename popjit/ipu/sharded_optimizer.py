"""``ipu.sharded_optimizer.ShardedOptimizer`` (also ``ipu.optimizers.ShardedOptimizer``): the weight update of
each variable on the IPU of its gradient, which is the IPU of the forward op that used it.

In a sharded program (``ipu.scopes.ipu_shard``) popjit already computes every gradient on the IPU of its
forward op; this wrapper also places each variable's update there, instead of leaving the update where
most of its data is (``popjit.schedule.shards``). The values are those of the wrapped optimizer.
"""

from __future__ import annotations

from typing import Any

from popjit.ipu.optimizers import IpuOptimizer, bottom_optimizer


class ShardedOptimizer(IpuOptimizer):
    """``ShardedOptimizer(opt)``: ``opt`` (a TF1 or Keras optimizer), each variable's update placed on its
    gradient's IPU."""

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


__all__ = ["ShardedOptimizer"]
