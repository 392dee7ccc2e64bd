"""``tf.data.Dataset``: the public class; each method builds one pipeline stage.

The stages live in :mod:`popjit.data.sources`, :mod:`popjit.data.transforms`,
:mod:`popjit.data.shuffle` and :mod:`popjit.data.mapping`; this module only checks arguments and
wires them together. See :mod:`popjit.data` for the execution model and the infeed API.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from popjit import context
from popjit.data.core import INFINITE, UNKNOWN, ChunkIter, RAIter, RandomAccess
from popjit.data.iterator import GraphIterator, HostIterator, NumpyIterator
from popjit.data.options import Options
from popjit.data.structure import Structure
from popjit.errors import InvalidArgumentError, missing_api
from popjit.frontend.tensor import Tensor


def scalar_arg(value: Any, name: str) -> int:
    """An integer argument given as a Python int, NumPy scalar or eager tensor."""
    if isinstance(value, Tensor):
        value = value.numpy()
    arr = np.asarray(value)
    if arr.shape != () or not (np.issubdtype(arr.dtype, np.integer) or arr.dtype == np.bool_):
        raise TypeError(f"{name} must be an integer scalar, not {value!r}")
    return int(arr)


class Dataset:
    """A pipeline of elements (``tf.data.Dataset``), built from sources and transformations.

    Iterating it (``for x in ds``) yields eager tensors in the element's structure;
    :meth:`as_numpy_iterator` yields NumPy values; ``iter(ds)`` inside ``IPUStrategy.scope()``
    feeds compiled loops (see :mod:`popjit.data.iterator`).
    """

    _structure: Structure

    # -- the internal protocol (overridden by every stage) ---------------------------------------
    def _chunks(self) -> ChunkIter:
        """A new pass over the elements."""
        ra = self._random_access()
        assert ra is not None, f"{type(self).__name__} must override _chunks"
        return RAIter(ra)

    def _random_access(self) -> RandomAccess | None:
        """Direct access to elements, when this stage and its inputs are deterministic."""
        return None

    def _cardinality(self) -> int:
        return UNKNOWN

    # -- sources -----------------------------------------------------------------------------------
    @staticmethod
    def from_tensor_slices(tensors: Any, name: str | None = None) -> Dataset:
        """One element per row of ``tensors`` (a tensor, array, list, or tuple/dict nest of them)."""
        return sources.TensorSlicesDataset(tensors)

    @staticmethod
    def from_tensors(tensors: Any, name: str | None = None) -> Dataset:
        """A dataset of one element, ``tensors``."""
        return sources.TensorsDataset(tensors)

    @staticmethod
    def range(*args: Any, output_type: Any = None, name: str | None = None) -> Dataset:
        """``range(stop)``, ``range(start, stop[, step])`` as int64 scalars (or ``output_type``)."""
        return sources.RangeDataset(*[scalar_arg(a, "range argument") for a in args], output_type=output_type)

    @staticmethod
    def zip(*args: Any, datasets: Any = None, name: str | None = None) -> Dataset:
        """Elements of several datasets side by side: ``zip((a, b))``, ``zip(a, b)`` or a dict."""
        if datasets is None:
            if not args:
                raise TypeError("Dataset.zip() needs at least one dataset")
            datasets = args[0] if len(args) == 1 else tuple(args)
        return transforms.ZipDataset(datasets)

    @staticmethod
    def from_generator(generator: Callable, output_types: Any = None, output_shapes: Any = None,
                       args: Any = None, output_signature: Any = None, name: str | None = None) -> Dataset:
        """Elements produced by a Python generator function (called anew for each pass)."""
        return sources.GeneratorDataset(generator, output_types, output_shapes, args, output_signature)

    # -- transformations -------------------------------------------------------------------------
    def map(self, map_func: Callable, num_parallel_calls: Any = None, deterministic: Any = None,
            name: str | None = None) -> Dataset:
        """Apply ``map_func`` to every element; it is traced once and run on whole chunks when it can be."""
        return mapping.MapDataset(self, map_func)

    def filter(self, predicate: Callable, name: str | None = None) -> Dataset:
        """Keep the elements for which ``predicate`` returns a true scalar bool."""
        return mapping.FilterDataset(self, predicate)

    def batch(self, batch_size: Any, drop_remainder: bool = False, num_parallel_calls: Any = None,
              deterministic: Any = None, name: str | None = None) -> Dataset:
        """Stack ``batch_size`` consecutive elements; the last batch may be smaller unless ``drop_remainder``."""
        size = scalar_arg(batch_size, "batch_size")
        if size <= 0:
            raise InvalidArgumentError(f"Batch size must be greater than zero, got {size}.")
        return transforms.BatchDataset(self, size, bool(drop_remainder))

    def unbatch(self, name: str | None = None) -> Dataset:
        """Split every element along its first dimension (the inverse of ``batch``)."""
        return transforms.UnbatchDataset(self)

    def shuffle(self, buffer_size: Any, seed: Any = None, reshuffle_each_iteration: bool | None = None,
                name: str | None = None) -> Dataset:
        """Randomly order elements through a buffer of ``buffer_size`` (see :mod:`popjit.data.shuffle`)."""
        size = scalar_arg(buffer_size, "buffer_size")
        if size <= 0:
            raise InvalidArgumentError(f"buffer_size must be greater than zero, got {size}.")
        reshuffle = True if reshuffle_each_iteration is None else bool(reshuffle_each_iteration)
        return shuffle.ShuffleDataset(self, size, None if seed is None else scalar_arg(seed, "seed"), reshuffle)

    def repeat(self, count: Any = None, name: str | None = None) -> Dataset:
        """Repeat the elements ``count`` times (forever when ``count`` is None or -1)."""
        n = -1 if count is None else scalar_arg(count, "count")
        return transforms.RepeatDataset(self, n)

    def take(self, count: Any, name: str | None = None) -> Dataset:
        """The first ``count`` elements (all of them when ``count`` is -1)."""
        return transforms.TakeDataset(self, scalar_arg(count, "count"))

    def shard(self, num_shards: Any, index: Any, name: str | None = None) -> Dataset:
        """Every ``num_shards``-th element, starting at element ``index`` (what one of ``num_shards`` workers
        reads: PopDist instances shard their data this way)."""
        shards, at = scalar_arg(num_shards, "num_shards"), scalar_arg(index, "index")
        if shards < 1:
            raise InvalidArgumentError(f"num_shards must be > 0 but got {shards}")
        if not 0 <= at < shards:
            raise InvalidArgumentError(f"index must be in [0, {shards}) but got {at}")
        return transforms.ShardDataset(self, shards, at)

    def skip(self, count: Any, name: str | None = None) -> Dataset:
        """All but the first ``count`` elements (none when ``count`` is -1)."""
        return transforms.SkipDataset(self, scalar_arg(count, "count"))

    def prefetch(self, buffer_size: Any = None, name: str | None = None) -> Dataset:
        """Accepted for compatibility: popjit's infeed already reads a whole execution's batches at once."""
        return transforms.PassThroughDataset(self, "PrefetchDataset")

    def cache(self, filename: str = "", name: str | None = None) -> Dataset:
        """Keep the elements of the first complete pass in memory and replay them afterwards."""
        return transforms.CacheDataset(self, filename)

    def enumerate(self, start: Any = 0, name: str | None = None) -> Dataset:
        """Pairs ``(i, element)`` with an int64 counter ``i`` starting at ``start``."""
        return Dataset.zip((sources.CounterDataset(scalar_arg(start, "start")), self))

    def concatenate(self, dataset: Dataset, name: str | None = None) -> Dataset:
        """The elements of this dataset followed by those of ``dataset``."""
        return transforms.ConcatenateDataset(self, dataset)

    def apply(self, transformation_func: Callable[[Dataset], Dataset]) -> Dataset:
        """``transformation_func(self)``."""
        return transformation_func(self)

    def with_options(self, options: Any, name: str | None = None) -> Dataset:
        """Accepted for compatibility; the options are kept but do not change popjit's pipeline."""
        ds = transforms.PassThroughDataset(self, "OptionsDataset")
        ds._options = options
        return ds

    def options(self) -> Any:
        """The options set by :meth:`with_options` (default ``tf.data.Options()``)."""
        ds: Any = self
        while ds is not None:
            opts = getattr(ds, "_options", None)
            if opts is not None:
                return opts
            ds = getattr(ds, "_input", None)
        return Options()

    # -- information -------------------------------------------------------------------------------
    @property
    def element_spec(self) -> Any:
        """The structure of ``tf.TensorSpec`` s of one element (unknown dimensions are None)."""
        return self._structure.element_spec()

    def cardinality(self) -> Any:
        """The number of elements as an int64 scalar tensor: -1 infinite, -2 unknown."""
        return Tensor.eager(np.array(self._cardinality(), dtype=np.int64))

    def __len__(self) -> int:
        n = self._cardinality()
        if n == INFINITE:
            raise TypeError("The dataset is infinite.")
        if n == UNKNOWN:
            raise TypeError("The dataset length is unknown.")
        return n

    def __bool__(self) -> bool:
        return True

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)

        raise missing_api("tf.data.Dataset", name)

    def __repr__(self) -> str:
        label = getattr(self, "_label", type(self).__name__)
        return f"<{label} element_spec={self.element_spec}>"

    # -- iteration -------------------------------------------------------------------------------
    def __iter__(self) -> Any:
        """An iterator yielding eager tensors (also the infeed's host iterator); inside
        ``IPUStrategy.scope()`` an infeed iterator whose ``next()`` a compiled program dequeues."""
        strategy = context.current_strategy()
        if strategy is not None and strategy.enable_dataset_iterators:
            return strategy.dataset_iterator(self)
        return self._make_host_iterator()

    def _make_host_iterator(self) -> Any:
        """A new :class:`~popjit.data.iterator.HostIterator` over this dataset."""
        return HostIterator(self)

    def make_one_shot_iterator(self) -> Any:
        """TF1 graph mode: an iterator whose ``get_next()`` gives one element per session run, from the start."""
        return GraphIterator(self, initializable=False)

    def make_initializable_iterator(self, shared_name: str | None = None) -> Any:
        """TF1 graph mode: an iterator that starts when a session runs its ``initializer``."""
        return GraphIterator(self, initializable=True)

    def as_numpy_iterator(self) -> Iterator[Any]:
        """An iterator yielding each element as NumPy values in the element's structure."""
        return NumpyIterator(self._make_host_iterator())

    def take_while(self, predicate: Callable, name: str | None = None) -> Dataset:
        """The elements before the first one for which ``predicate`` is false."""
        return mapping.FilterDataset(self, predicate, stop_at_first_false=True)


# why: these modules subclass Dataset (they import this one), so they load once it is defined.
from popjit.data import mapping, shuffle, sources, transforms  # noqa: E402
