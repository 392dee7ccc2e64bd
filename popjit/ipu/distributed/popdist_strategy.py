"""``ipu.distributed.popdist_strategy.PopDistStrategy``: the strategy of a program started by ``poprun``
(``popjit poprun``) as several instances, each running its share of the replicas.

    config = ipu.config.IPUConfig()
    popdist.tensorflow.set_ipu_config(config, ipus_per_replica=1)
    config.configure_ipu_system()
    strategy = PopDistStrategy()
    with strategy.scope():
        loss = strategy.run(step, args=(x,))
        mean = strategy.reduce(tf.distribute.ReduceOp.MEAN, loss)    # over every replica of every instance

It is an ``IPUStrategy`` whose reductions span the instances: on the host (``strategy.reduce`` outside a
compiled function) the instances' values are summed through MPI (:mod:`popjit.runtime.instances`); on the
IPU (inside a function ``strategy.run`` compiles) it reduces as ``IPUStrategy`` does, across the replicas of
the program, which span the instances when ``multi_replica_distribution`` says so.

As Graphcore's, a variable created in its scope (eagerly; not in a TensorFlow 1 graph) takes instance 0's
initial value, broadcast when it is created, so every instance starts from the same weights: the instances
must create the same variables in the same order.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import popjit.popdist as popdist
from popjit import context
from popjit.errors import missing_attributes
from popjit.frontend import math_ops, nest
from popjit.ipu.distributed import host_collective, mean_of
from popjit.ipu.ipu_strategy import IPUStrategyV1, ReduceOp
from popjit.runtime import instances
from popjit.runtime.device import canonical, ipu_ordinal


class PopDistStrategy(IPUStrategyV1):
    """A distribution strategy over the replicas of every instance of a poprun program (see the module)."""

    def __init__(self, ipu_device: str = "/device:IPU:0", add_ipu_cross_replica_reductions: bool = True,
                 enable_dataset_iterators: bool = True, enable_keras_extensions: bool = True) -> None:
        popdist.init()
        super().__init__(ipu_device, enable_dataset_iterators=enable_dataset_iterators,
                         enable_keras_extensions=enable_keras_extensions)
        self._add_ipu_cross_replica_reductions = add_ipu_cross_replica_reductions

    @property
    def num_replicas_in_sync(self) -> int:
        """Every replica of every instance: ``popdist.getNumTotalReplicas()``."""
        return popdist.getNumTotalReplicas()

    def update_ipu_config(self, config: Any) -> Any:
        """Set ``config``'s ``experimental.multi_replica_distribution`` to this instance's place
        (``process_count``, ``process_index``) and return it."""
        distribution = config.experimental.multi_replica_distribution
        distribution.process_count = popdist.getNumInstances()
        distribution.process_index = popdist.getInstanceIndex()
        return config

    def reduce(self, reduce_op: Any, value: Any, axis: Any = None) -> Any:
        """Combine ``value`` over the replicas of every instance (then over ``axis`` if given).

        On the host each instance's value is reduced as ``IPUStrategy.reduce`` does (over its replicas), then
        summed over the instances; ``MEAN`` divides by the instance count too, so it is the mean over every
        replica. On the IPU it is ``IPUStrategy.reduce`` (nothing across replicas with
        ``add_ipu_cross_replica_reductions=False``).
        """
        op = ReduceOp.from_any(reduce_op)
        if ipu_ordinal(context.current_device()) is not None:
            if self._add_ipu_cross_replica_reductions:
                return super().reduce(op, value, axis)
            return _reduce_axis(op, value, axis)
        local = super().reduce(op, value, axis)
        world = instances.world()

        def across(a: Any) -> Any:
            total = world.allreduce_sum(a)
            return mean_of(total, world.count) if op is ReduceOp.MEAN else total

        return nest.map_structure(lambda v: host_collective("PopDistStrategy.reduce", across, v), local)

    def initial_value(self, value: np.ndarray) -> np.ndarray:
        """Instance 0's initial value of a variable created in the scope (a collective of every instance)."""
        world = instances.world()
        return world.broadcast(value, 0).reshape(value.shape) if world.count > 1 else value

    def broadcast_to(self, tensor: Any, destinations: Any) -> Any:
        """Instance 0's ``tensor`` in every instance. Only on the host: ``destinations`` (a device name, or a
        tensor or variable on it) must be the CPU, else ``RuntimeError``, as Graphcore's strategy raises."""
        device = destinations if isinstance(destinations, str) else getattr(destinations, "device", destinations)
        if canonical(str(device)) != canonical("cpu"):
            raise RuntimeError(f"Can only broadcast on CPU, but got device {device}")
        world = instances.world()
        return nest.map_structure(
            lambda v: host_collective("PopDistStrategy.broadcast_to", lambda a: world.broadcast(a, 0), v), tensor)


def _reduce_axis(op: ReduceOp, value: Any, axis: Any) -> Any:
    """``value`` reduced over ``axis`` only (each replica its own)."""
    if axis is None:
        return value
    reducer = math_ops.reduce_sum if op is ReduceOp.SUM else math_ops.reduce_mean
    return nest.map_structure(lambda v: reducer(v, axis=axis), value)


__all__ = ["PopDistStrategy"]

__getattr__ = missing_attributes("ipu.distributed.popdist_strategy")
