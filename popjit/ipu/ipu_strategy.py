"""``ipu.ipu_strategy.IPUStrategy``: run ``tf.function`` s as single programs on a virtual IPU."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from popjit import dtypes
from popjit.frontend import nest
from popjit.frontend.device import canonical, device
from popjit.frontend.function import ConcreteFunction, Function
from popjit.frontend.tensor import Tensor
from popjit.frontend.tracing import current_trace

_state = threading.local()


def current_strategy() -> IPUStrategyV1 | None:
    stack = getattr(_state, "stack", None)
    return stack[-1] if stack else None


def current_strategy_device() -> str | None:
    """The IPU device of the innermost ``strategy.scope()``, if any (variables are placed there)."""
    s = current_strategy()
    return s._ipu_device if s else None


class ReduceOp:
    SUM = "SUM"
    MEAN = "MEAN"


class IPUStrategyV1:
    """A distribution strategy targeting one IPU device (one replica from the strategy's view)."""

    def __init__(self, ipu_device: str = "/device:IPU:0", cpu_device: str = "/device:CPU:0",
                 enable_dataset_iterators: bool = True, enable_keras_extensions: bool = True) -> None:
        self._ipu_device = canonical(ipu_device)
        self._cpu_device = canonical(cpu_device)
        self.enable_dataset_iterators = enable_dataset_iterators
        self.enable_keras_extensions = enable_keras_extensions

    @property
    def num_replicas_in_sync(self) -> int:
        return 1

    @contextlib.contextmanager
    def scope(self) -> Iterator[IPUStrategyV1]:
        """Variables (and Keras models) created inside live on the strategy's IPU device."""
        if not hasattr(_state, "stack"):
            _state.stack = []
        _state.stack.append(self)
        try:
            yield self
        finally:
            _state.stack.pop()

    def run(self, fn: Any, args: Any = (), kwargs: Any = None, options: Any = None) -> Any:
        """Run ``fn(*args, **kwargs)`` as one program on the IPU and return its results to the host."""
        kwargs = kwargs or {}
        if current_trace() is not None:
            return fn(*args, **kwargs)
        if not isinstance(fn, (Function, ConcreteFunction)):
            raise ValueError(
                "IPUStrategyV1.run(fn, ...) does not support eager execution. Either convert `fn` into a "
                "tf.function or consider calling strategy.run inside a tf.function."
            )
        _check_float64(nest.flatten((args, kwargs)), "input")
        with device(self._ipu_device):
            if isinstance(fn, Function):
                tree, leaves, keys = fn._signature(tuple(args), dict(kwargs))
                concrete = fn._lookup(tree, leaves, keys)
            else:
                concrete, leaves = fn, nest.flatten((args, kwargs))
            _check_float64_avals([v.aval for v in concrete.graph.results], "output")
            return concrete.run(leaves, self._ipu_device)

    def experimental_run_v2(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("`experimental_run_v2` has been deleted. Use `run` instead.")

    def reduce(self, reduce_op: Any, value: Any, axis: Any = None) -> Any:
        """On one replica, SUM and MEAN return ``value`` unchanged."""
        op = getattr(reduce_op, "name", reduce_op)
        if str(op).upper().split(".")[-1] not in ("SUM", "MEAN"):
            raise ValueError(f"Unsupported reduce op: {reduce_op}")
        return value


IPUStrategy = IPUStrategyV1


def _check_float64(leaves: list[Any], what: str) -> None:
    import numpy as np

    for x in leaves:
        dt = x.dtype if isinstance(x, Tensor) else (dtypes.as_dtype(x.dtype) if isinstance(x, np.ndarray) else None)
        if dt is not None and dtypes.as_dtype(dt) == dtypes.float64:
            raise TypeError(f"Unsupported data type for {what}: float64")


def _check_float64_avals(avals: list[Any], what: str) -> None:
    for a in avals:
        if a.dtype == dtypes.float64:
            raise TypeError(f"Unsupported data type for {what}: float64")
