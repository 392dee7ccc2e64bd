"""``ipu.ipu_infeed_queue``: feeding a dataset's elements to compiled programs.

Inside a ``tf.function`` run on the IPU, ``next(iterator)`` (for ``iterator = iter(dataset)``
created inside ``IPUStrategy.scope()``) or ``infeed._dequeue()`` adds an infeed dequeue to the
program. Before each execution the host takes from the dataset exactly the elements the
execution reads, stacks them into one buffer, and the engine reads them natively; the dataset's
position carries over from one execution to the next. A dataset with too few elements left raises
``OutOfRangeError`` before the program runs, so variables keep their values.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from popjit import dtypes
from popjit.errors import (
    FailedPreconditionError,
    OutOfRangeError,
    missing_attributes,
)
from popjit.frontend import graph_mode, nest
from popjit.frontend.tensor import Tensor, TensorShape
from popjit.frontend.tracing import current_trace
from popjit.ir.graph import Aval
from popjit.runtime import streams
from popjit.source import user_location


def _spec_shape(spec: Any) -> tuple[int | None, ...]:
    shape = getattr(spec, "shape", None)
    return tuple(shape) if shape is not None else ()


def _check_specs(specs: list[Any]) -> None:
    for spec in specs:
        shape = _spec_shape(spec)
        if any(d is None for d in shape):
            raise ValueError(f"Output shape {TensorShape(shape)} is not fully defined. If using tf.Dataset.batch, set "
                             "`drop_remainder=True`.")


def _check_prefetch(depth: int | None) -> int:
    depth = 1 if depth is None else depth
    if depth <= 0:
        raise ValueError(f"prefetch_depth must be greater than zero, but it is {depth}")
    if depth > 255:
        raise ValueError(f"prefetch_depth must be less than 256, but it is {depth}")
    return depth


_log = logging.getLogger("popjit")


def legacy_feed_options(queue: str, kwargs: dict[str, Any], known: tuple[str, ...]) -> dict[str, Any]:
    """The SDK 1.x keyword arguments of an infeed or outfeed (``known`` of them), checked: ``feed_name``
    named the feed and is no longer used (a warning, as in SDK 2.x); ``replication_factor`` must be a
    positive int, and the programs using the feed must run as that many replicas (checked when one runs);
    ``data_to_prefetch`` is ``prefetch_depth``'s old name;
    ``outfeed_all`` chooses the outfeed mode; ``io_batch_size`` (how many enqueued values SDK 1.x sent to
    the host at once) changes no value; any other name is a TypeError."""
    for name in kwargs:
        if name not in known:
            raise TypeError(f"{queue}.__init__() got an unexpected keyword argument '{name}'")
    if "feed_name" in kwargs:
        _log.warning("%s: the feed_name argument is deprecated and is no longer used.", queue)
    factor = kwargs.get("replication_factor", 1)
    if type(factor) is not int or factor < 1:
        raise ValueError(f"{queue}: replication_factor must be a positive int, not {factor!r}.")
    return kwargs


class IPUInfeedQueue:
    """A dataset feeding a program on the IPU, one element per dequeue."""

    def __init__(self, dataset: Any, device_ordinal: int | None = None, prefetch_depth: int | None = None,
                 optimise_latency: bool = False, **kwargs: Any) -> None:
        if device_ordinal is not None and (not isinstance(device_ordinal, int) or device_ordinal < 0):
            raise ValueError("Device ordinal must be an integer >= 0")
        legacy = legacy_feed_options("IPUInfeedQueue", kwargs, ("feed_name", "replication_factor", "data_to_prefetch"))
        self._dataset = dataset
        self._specs, self._tree = nest.flatten_with_tree(dataset.element_spec)
        _check_specs(self._specs)
        self._prefetch_depth = _check_prefetch(legacy.get("data_to_prefetch", prefetch_depth))
        self._avals = [Aval(tuple(_spec_shape(s)), dtypes.as_dtype(s.dtype)) for s in self._specs]
        self._id = streams.register(self)
        self.replication_factor: int | None = legacy.get("replication_factor")  # SDK 1.x: the replicas reading it
        self._iterator: Any = None
        self._deleted = False
        self._dequeued = False
        self._initializer_taken = False

    # -- the host side ---------------------------------------------------------------------------
    @property
    def initializer(self) -> Any:
        """Start (or restart) reading the dataset from its beginning. In TF1 graph mode: the operation that
        does so when a session runs it (it can be asked for once)."""
        trace = graph_mode.current_graph_trace()
        if trace is None:
            self._initialize()
            return None
        if self._initializer_taken:
            raise ValueError("The IPUInfeedQueue `initializer` function can only be accessed once.")
        self._initializer_taken = True
        return graph_mode.Operation(trace, "infeed_initializer", before=[self._initialize])

    def _initialize(self) -> None:
        self._check_dtypes()
        self._iterator = self._dataset._make_host_iterator()
        self._deleted = False

    @property
    def deleter(self) -> None:
        """Delete the host side of the infeed (programs using it fail until it is initialized again)."""
        self._deleted = True
        self._iterator = None

    @property
    def dequeued(self) -> bool:
        """Whether a program has dequeued from this infeed."""
        return self._dequeued

    @property
    def number_of_tuple_elements(self) -> int:
        return len(self._specs)

    def _check_dtypes(self) -> None:
        for k, a in enumerate(self._avals):
            if a.dtype == dtypes.int64:
                raise FailedPreconditionError(f"Unsupported datatype int64 on index {k} of feed operation")

    def take(self, n: int) -> list[np.ndarray]:
        """The next ``n`` elements, one stacked array per component (called by the runtime)."""
        if self._iterator is None:
            self._initialize()  # TF2: the iterator starts on first use
        try:
            batch = self._iterator.get_next_n(n)
        except StopIteration:
            raise OutOfRangeError(
                f"End of sequence: the infeed's dataset has fewer than the {n} elements this execution needs. "
                "Use dataset.repeat() for more epochs, or run fewer steps per execution; variables keep the "
                "values they had before this run."
            ) from None
        return [np.asarray(a) for a in nest.flatten(batch)]

    def _rebind(self, dataset: Any) -> None:
        """Feed from ``dataset`` (of the same element structure) from now on, so programs compiled for this
        infeed are reused with new data (Keras does this for each ``fit``)."""
        specs, tree = nest.flatten_with_tree(dataset.element_spec)
        if tree != self._tree or [(tuple(_spec_shape(s)), dtypes.as_dtype(s.dtype)) for s in specs] != \
                [(a.shape, a.dtype) for a in self._avals]:
            raise ValueError("The new dataset's elements differ from the infeed's.")
        self._dataset = dataset
        self._iterator = None

    # -- the program side ------------------------------------------------------------------------
    def get_next(self) -> Any:
        raise ValueError("`get_next()` is now obsolete as the IPUInfeedQueue is now automatically dequeued by the "
                         "loop.")

    def _dequeue(self) -> Any:
        """Add a dequeue to the program being traced; the element as symbolic tensors."""
        trace = current_trace()
        assert trace is not None
        self._check_dtypes()
        node = trace.add_node("infeed_dequeue", [], {"feed": self._id, "avals": tuple(self._avals)}, self._avals,
                              loc=user_location())
        trace.extra.setdefault("streams", []).append(self)  # a TF1 graph keeps its infeeds, as TensorFlow's does
        self._dequeued = True
        return nest.unflatten(self._tree, [Tensor.symbolic(v, trace) for v in node.outputs])


class IPUOwnedIterator(IPUInfeedQueue):
    """What ``iter(dataset)`` gives inside ``IPUStrategy.scope()``: ``next()`` inside a program run on the IPU
    is an infeed dequeue."""

    def __iter__(self) -> IPUOwnedIterator:
        return self

    def __next__(self) -> Any:
        if current_trace() is None:
            raise RuntimeError(
                "Accessing dataset elements can not be accessed in eager mode when inside 'IPUStrategy'. Call "
                "next(iterator) inside a tf.function run with strategy.run (with jit_compile=True, or "
                "experimental_compile=True), or create the strategy with enable_dataset_iterators=False."
            )
        return self._dequeue()

    def get_next(self) -> Any:
        return next(self)

    def get_next_as_optional(self) -> Any:
        raise NotImplementedError("IPU Dataset iterator does not support get_next_as_optional().")

    @property
    def element_spec(self) -> Any:
        return self._dataset.element_spec


IPUIterator = IPUOwnedIterator

__getattr__ = missing_attributes("ipu.ipu_infeed_queue")
