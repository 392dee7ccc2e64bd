"""``ipu.sharded_optimizer``: where Graphcore's SDK defines ``ShardedOptimizer`` (popjit's is in
:mod:`popjit.ipu.optimizers`): each variable's update on the IPU of its gradient."""

from __future__ import annotations

from popjit.ipu.optimizers import ShardedOptimizer

__all__ = ["ShardedOptimizer"]
