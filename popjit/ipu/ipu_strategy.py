"""``ipu.ipu_strategy.IPUStrategy``: run ``tf.function`` s as single programs on a virtual IPU.

    strategy = ipu.ipu_strategy.IPUStrategy()
    with strategy.scope():
        w = tf.Variable(...)                          # lives on /device:IPU:0
        out = strategy.run(step, args=(x,))           # one compiled engine, results on the host

``run`` compiles the function once per input signature and device (the device's
``compilations`` counter) and runs its native engine on every call (``executions``). Variables
stay in device memory: the engine updates their buffers in place and ``.numpy()`` copies them out.
Every check happens before anything runs, so an error (a plain Python function, float64 data, a
shape error while tracing, a bad ``TF_POPLAR_FLAGS``) leaves the variables and the compiled
programs as they were.
"""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Iterator
from typing import Any

import numpy as np

from popjit import context, dtypes
from popjit.errors import missing_attributes
from popjit.frontend import math_ops, nest
from popjit.frontend.autograph import convert
from popjit.frontend.device import device
from popjit.frontend.function import ConcreteFunction, Function
from popjit.frontend.replication import cross_replica_mean, cross_replica_sum
from popjit.frontend.tensor import Tensor
from popjit.frontend.tracing import current_trace
from popjit.ipu.ipu_infeed_queue import IPUOwnedIterator
from popjit.ipu.ipu_outfeed_queue import IPUOutfeedMode, IPUOutfeedQueue
from popjit.ir.graph import Aval
from popjit.runtime import device as devices
from popjit.runtime.device import canonical, ipu_ordinal, is_ipu_device

_EAGER_RUN = ("IPUStrategyV1.run(fn, ...) does not support eager execution. Either convert `fn` into a "
              "tf.function or consider calling strategy.run inside a tf.function.")


def current_strategy() -> IPUStrategyV1 | None:
    """The strategy of the innermost ``strategy.scope()`` on this thread, if any."""
    strategy = context.current_strategy()
    return strategy if isinstance(strategy, IPUStrategyV1) else None


class ReduceOp(enum.Enum):
    """``tf.distribute.ReduceOp``: how :meth:`IPUStrategyV1.reduce` combines values."""

    SUM = "SUM"
    MEAN = "MEAN"

    @staticmethod
    def from_any(op: Any) -> ReduceOp:
        """A ReduceOp from itself, ``"sum"``/``"MEAN"``, or another enum with that name; ValueError otherwise."""
        name = getattr(op, "name", op)
        if isinstance(name, str) and name.upper() in ReduceOp.__members__:
            return ReduceOp[name.upper()]
        raise ValueError(f"Unsupported reduce op: {op}")


class IPUStrategyV1:
    """A distribution strategy for one IPU device (one replica from the strategy's point of view;
    replication happens inside the compiled program)."""

    def __init__(self, ipu_device: str = "/device:IPU:0", cpu_device: str = "/device:CPU:0",
                 enable_dataset_iterators: bool = True, enable_keras_extensions: bool = True) -> None:
        self._ipu_device = canonical(ipu_device)
        self._cpu_device = canonical(cpu_device)
        if ipu_ordinal(self._ipu_device) is None:
            raise ValueError(f"IPUStrategy needs an IPU device such as '/device:IPU:0', not {ipu_device!r}.")
        self.enable_dataset_iterators = enable_dataset_iterators
        self.enable_keras_extensions = enable_keras_extensions

    # -- properties --------------------------------------------------------------------------------
    @property
    def num_replicas_in_sync(self) -> int:
        """Always 1: replication is expressed inside the program, not by the strategy."""
        return 1

    def _replicas_for(self, shards: int = 1) -> int:
        """How many replicas its programs spanning ``shards`` IPUs have (1 before the system is configured);
        Graphcore's Keras error when the device's IPUs are not a multiple of the IPUs one copy spans."""
        if not devices.is_configured():
            return 1
        device = devices.get_device(self._device_ordinal)
        span = devices.ipus_per_replica(shards)
        if device.num_ipus % span or device.num_ipus < shards:
            raise ValueError(f"Current device has {device.num_ipus} IPUs attached, however the current model requires "
                             f"a multiple of {span} IPUs.")
        return devices.local_replicas(device, shards)

    @property
    def extended(self) -> IPUStrategyV1:
        """TensorFlow's ``strategy.extended``; the strategy itself carries its few extended attributes."""
        return self

    @property
    def worker_devices(self) -> tuple[str, ...]:
        return (self._ipu_device,)

    @property
    def parameter_devices(self) -> tuple[str, ...]:
        return (self._ipu_device,)

    @property
    def supports_loss_scaling(self) -> bool:
        return True

    @property
    def ipu_device(self) -> str:
        """The canonical name of the strategy's IPU device."""
        return self._ipu_device

    @property
    def _device_ordinal(self) -> int:
        return ipu_ordinal(self._ipu_device) or 0

    # -- scope -------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def scope(self) -> Iterator[IPUStrategyV1]:
        """Variables (and Keras models) created inside live on the strategy's IPU device.

        Their initial values are computed on the host, as on the IPU.
        """
        with context.strategy_scope(self):
            yield self

    def initial_value(self, value: np.ndarray) -> np.ndarray:
        """A variable created in the scope starts from the value computed here (PopDist: instance 0's)."""
        return value

    def dataset_iterator(self, dataset: Any, **options: Any) -> IPUOwnedIterator:
        """What ``iter(dataset)`` gives inside the scope: an infeed-backed iterator."""
        return IPUOwnedIterator(dataset, **options)

    def outfeed(self, mode: str, **options: Any) -> IPUOutfeedQueue:
        """A new outfeed (``"all"`` or ``"last"``), for code below the ``ipu`` layer (Keras)."""
        return IPUOutfeedQueue(IPUOutfeedMode.LAST if mode == "last" else IPUOutfeedMode.ALL, **options)

    # -- running -----------------------------------------------------------------------------------
    def run(self, fn: Any, args: Any = (), kwargs: Any = None, options: Any = None) -> Any:
        """Run ``fn(*args, **kwargs)`` as one program on the IPU and return its results to the host.

        ``fn`` must be a ``tf.function`` (ideally ``jit_compile=True``) or a ConcreteFunction when
        called eagerly; inside a ``tf.function`` it becomes part of the enclosing program.
        """
        kwargs = dict(kwargs or {})
        if current_trace() is not None:
            return convert(fn)(*args, **kwargs)
        concrete, leaves = self._concrete(fn, tuple(args), kwargs)
        return concrete.run(leaves, self._ipu_device)

    def _concrete(self, fn: Any, args: tuple, kwargs: dict) -> tuple[ConcreteFunction, list[Any]]:
        """The traced program and its flat arguments, after every check that can fail."""
        if not isinstance(fn, (Function, ConcreteFunction)):
            raise ValueError(_EAGER_RUN)
        _check_dtypes(nest.flatten((args, kwargs)), "input")
        with device(self._ipu_device):
            if isinstance(fn, Function):
                tree, leaves, keys = fn._signature(args, kwargs)
                concrete = fn._lookup(tree, leaves, keys)
            else:
                concrete, leaves = fn, nest.flatten((args, kwargs))
        _check_dtypes([v.aval for v in concrete.graph.results], "output")
        return concrete, leaves

    def experimental_run_v2(self, *args: Any, **kwargs: Any) -> Any:
        """Removed in TensorFlow 2.2: use :meth:`run`."""
        raise RuntimeError("`experimental_run_v2` has been deleted. Use `run` instead.")

    # -- values ------------------------------------------------------------------------------------
    def reduce(self, reduce_op: Any, value: Any, axis: Any = None) -> Any:
        """Combine ``value`` across replicas, then over ``axis`` if given.

        Inside a program on the IPU (a ``tf.function`` run by :meth:`run`), ``SUM`` is a cross-replica sum
        and ``MEAN`` a cross-replica mean over all the device's replicas; on the host (a value
        :meth:`run` returned, which is replica 0's) the value is unchanged, as in Graphcore's strategy.
        ``reduce_op`` is ``ReduceOp.SUM`` or ``ReduceOp.MEAN`` (or their names); anything else raises
        ``ValueError("Unsupported reduce op: ...")``.
        """
        op = ReduceOp.from_any(reduce_op)
        if current_trace() is not None and is_ipu_device(context.current_device()):
            across = cross_replica_sum if op is ReduceOp.SUM else cross_replica_mean
            value = nest.map_structure(across, value)
        if axis is None:
            return value

        reducer = math_ops.reduce_sum if op is ReduceOp.SUM else math_ops.reduce_mean
        return nest.map_structure(lambda v: reducer(v, axis=axis), value)

    def experimental_local_results(self, value: Any) -> tuple[Any, ...]:
        """The per-replica parts of ``value``: just ``(value,)`` with one replica."""
        return (value,)

    def experimental_distribute_dataset(self, dataset: Any, options: Any = None) -> Any:
        """The dataset itself: one replica reads it whole."""
        return dataset

    def distribute_datasets_from_function(self, dataset_fn: Any, options: Any = None) -> Any:
        """``dataset_fn(input_context)`` for the single input pipeline."""
        return dataset_fn(_InputContext())


class _InputContext:
    """``tf.distribute.InputContext`` for one pipeline feeding one replica."""

    num_input_pipelines = 1
    input_pipeline_id = 0
    num_replicas_in_sync = 1

    def get_per_replica_batch_size(self, global_batch_size: int) -> int:
        return global_batch_size


IPUStrategy = IPUStrategyV1


def _dtype_of(x: Any) -> dtypes.DType | None:
    if isinstance(x, (Tensor, Aval)):
        return x.dtype
    if isinstance(x, (np.ndarray, np.generic)):
        try:
            return dtypes.as_dtype(x.dtype)
        except TypeError:  # not a tensor dtype at all: tf.function's argument check names it
            return None
    return None


def _check_dtypes(items: list[Any], what: str) -> None:
    """``TypeError("Unsupported data type for input: float64")``: the IPU has no 64-bit floats."""
    for x in items:
        dt = _dtype_of(x)
        if dt is not None and dt == dtypes.float64:
            raise TypeError(f"Unsupported data type for {what}: float64")


__getattr__ = missing_attributes("ipu.ipu_strategy")
