"""Iterators over datasets: Python iteration, NumPy iteration, and the infeed's host iterator.

``iter(dataset)`` returns a :class:`HostIterator`. In Python, ``next(it)`` gives one element as
eager tensors (on the host, whatever their dtype). Inside a ``tf.function`` trace, ``next(it)``
and ``it.get_next()`` call the hook installed with :func:`set_trace_hook` (the infeed runtime
installs one that reads the element from the infeed stream).

For the infeed runtime (host side, NumPy in and out, thread-safe):

- ``it.element_spec``: the element's structure of ``tf.TensorSpec`` (None for unknown dims);
- ``it.get_next()``: the next element as a nest of NumPy arrays (0-d arrays for scalars);
- ``it.get_next_n(n)``: the next ``n`` elements stacked along a new first axis, a nest of arrays
  of shape ``[n, *element_shape]``. If fewer than ``n`` remain it raises :class:`EndOfSequence`
  (a ``StopIteration`` with ``.requested`` and ``.available``) and consumes nothing: the
  elements it read stay in the iterator for the next call. For ``from_tensor_slices`` /
  ``range`` pipelines through ``batch``/``map``/``repeat``/``take``/``skip``/``zip`` this is a
  few whole-array NumPy operations (slices are views of the source until the final stack).

Arrays returned may be read-only views of the dataset's source arrays; copy before writing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from popjit import dtypes
from popjit.data.core import Reader
from popjit.data.structure import Chunk, chunk_len, concat_chunks
from popjit.errors import FailedPreconditionError, InvalidArgumentError, OutOfRangeError, UnimplementedError
from popjit.frontend import graph_mode, nest
from popjit.frontend.tensor import Tensor, TensorShape
from popjit.frontend.tracing import current_trace
from popjit.ir.graph import Aval

_READAHEAD_BYTES = 4 << 20
_READAHEAD_MAX = 256


class EndOfSequence(StopIteration):
    """Fewer elements remain than were asked for; the iterator is unchanged."""

    def __init__(self, requested: int, available: int) -> None:
        super().__init__(f"End of sequence: {requested} element(s) requested, {available} available")
        self.requested = requested
        self.available = available


def _no_hook(iterator: HostIterator) -> Any:
    raise InvalidArgumentError(
        "next(iterator) on a tf.data iterator inside a tf.function needs an infeed: create the iterator "
        "inside IPUStrategy.scope() and run the function with strategy.run(fn, args=(iterator, ...))."
    )


_trace_hook: Callable[[HostIterator], Any] = _no_hook


def set_trace_hook(hook: Callable[[HostIterator], Any] | None) -> None:
    """Install what ``next(iterator)`` does while a ``tf.function`` is being traced (None: the default error)."""
    global _trace_hook
    _trace_hook = hook if hook is not None else _no_hook


def _tracing() -> bool:
    return current_trace() is not None


class HostIterator:
    """An iterator over a dataset (``iter(dataset)``); see the module docstring for its API."""

    def __init__(self, dataset: Any) -> None:
        self._dataset = dataset
        self._structure = dataset._structure
        self._reader = Reader(dataset._chunks())
        self._lock = threading.RLock()
        self._readahead = 1
        self._readahead_cap = _READAHEAD_MAX

    @property
    def element_spec(self) -> Any:
        return self._structure.element_spec()

    @property
    def dataset(self) -> Any:
        return self._dataset

    # -- host API -------------------------------------------------------------------------------
    def _next_leaves(self) -> list[np.ndarray]:
        with self._lock:
            if not self._reader.pending:
                c = self._reader.read(self._readahead)
                if c is None:
                    raise EndOfSequence(1, 0)
                self._grow_readahead(c)
                self._reader.unread([c])
            c = self._reader.read(1)
            assert c is not None
            return [np.asarray(a[0]) for a in c]

    def _grow_readahead(self, chunk: Chunk) -> None:
        if self._readahead_cap == _READAHEAD_MAX:
            per = max(1, sum(a[:1].nbytes for a in chunk))
            self._readahead_cap = int(max(1, min(_READAHEAD_MAX, _READAHEAD_BYTES // per)))
        self._readahead = min(self._readahead * 2, self._readahead_cap)

    def get_next(self) -> Any:
        """The next element as a nest of NumPy arrays (inside a trace: the trace hook)."""
        if _tracing():
            return _trace_hook(self)
        return self._structure.pack(self._next_leaves())

    def get_next_n(self, n: int) -> Any:
        """The next ``n`` elements stacked along a new first axis; :class:`EndOfSequence` if fewer remain."""
        n = int(n)
        if n <= 0:
            raise ValueError(f"get_next_n needs a positive count, not {n}")
        with self._lock:
            pieces = self._reader.read_many(n)
            got = sum(chunk_len(c) for c in pieces)
            if got < n:
                self._reader.unread(pieces)
                raise EndOfSequence(n, got)
            try:
                chunk = concat_chunks(pieces)
            except InvalidArgumentError as e:
                self._reader.unread(pieces)
                raise InvalidArgumentError(f"get_next_n: the next {n} elements differ in shape: {e.message}") from None
        return self._structure.pack(chunk)

    # -- Python iteration -------------------------------------------------------------------------
    def __iter__(self) -> HostIterator:
        return self

    def __next__(self) -> Any:
        if _tracing():
            return _trace_hook(self)

        leaves = self._next_leaves()
        return self._structure.pack([Tensor.eager(a, _HOST) for a in leaves])

    def __repr__(self) -> str:
        return f"<popjit.data.HostIterator element_spec={self.element_spec}>"


_HOST = "/job:localhost/replica:0/task:0/device:CPU:0"


class NumpyIterator:
    """``Dataset.as_numpy_iterator()``: elements as NumPy arrays (scalars as NumPy scalars)."""

    def __init__(self, host: HostIterator) -> None:
        self._host = host

    def __iter__(self) -> NumpyIterator:
        return self

    def __next__(self) -> Any:
        leaves = self._host._next_leaves()
        return self._host._structure.pack([a[()] if a.ndim == 0 else a for a in leaves])


class GraphIterator:
    """TF1's dataset iterator in graph mode (``make_one_shot_iterator``, ``make_initializable_iterator``).

    Each ``get_next()`` is a node of the graph whose value a session run takes from the host: one
    element per run that needs it. A one-shot iterator starts at once; an initializable one when a
    run executes its ``initializer`` (again: from the start). An exhausted iterator raises
    ``OutOfRangeError`` before the program runs, so variables keep their values.
    """

    def __init__(self, dataset: Any, initializable: bool) -> None:
        graph_mode.tf1_entry("Dataset.make_initializable_iterator" if initializable else
                             "Dataset.make_one_shot_iterator")
        self._trace = graph_mode.current_graph_trace()
        if self._trace is None:
            raise RuntimeError("dataset.make_one_shot_iterator()/make_initializable_iterator() is TF1 graph API; in "
                               "eager mode iterate the dataset with `for element in dataset` or iter(dataset).")
        specs, self._tree = nest.flatten_with_tree(dataset.element_spec)
        for spec in specs:
            if any(d is None for d in spec.shape):
                raise UnimplementedError(
                    f"A dataset element of shape {list(spec.shape)} is not fully defined: popjit compiles for static "
                    "shapes, as XLA does on the IPU. Batch with drop_remainder=True.")
        self._avals = [Aval(tuple(spec.shape), dtypes.as_dtype(spec.dtype)) for spec in specs]
        self._dataset = dataset
        self._host: HostIterator | None = None if initializable else HostIterator(dataset)

    @property
    def initializer(self) -> Any:
        """The operation that (re)starts the iterator at the dataset's first element."""
        return graph_mode.Operation(self._trace, "MakeIterator", before=[self._restart])

    def _restart(self) -> None:
        self._host = HostIterator(self._dataset)

    def _pull(self) -> list[np.ndarray]:
        if self._host is None:
            raise FailedPreconditionError("GetNext() failed because the iterator has not been initialized. Ensure "
                                          "that you have run the initializer operation for this iterator before "
                                          "getting the next element.")
        try:
            return self._host._next_leaves()
        except StopIteration:
            raise OutOfRangeError("End of sequence: the dataset has no more elements (run the iterator's "
                                  "initializer to start again, or repeat() the dataset)") from None

    def get_next(self, name: str | None = None) -> Any:
        """The next element, as graph tensors in the element's structure."""
        tensors = self._trace.add_host_input(self._avals, self._pull, name or "IteratorGetNext")
        return nest.unflatten(self._tree, tensors)

    @property
    def element_spec(self) -> Any:
        return self._dataset.element_spec

    @property
    def output_types(self) -> Any:
        return nest.unflatten(self._tree, [a.dtype for a in self._avals])

    @property
    def output_shapes(self) -> Any:
        return nest.unflatten(self._tree, [TensorShape(a.shape) for a in self._avals])
