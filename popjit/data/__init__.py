"""``tf.data`` on popjit: host-side input pipelines that feed compiled programs.

A :class:`Dataset` is a chain of stages (sources, ``map``, ``batch``, ``shuffle``, ``repeat``…).
Iterating it asks the last stage for *chunks* — several consecutive elements as one NumPy array
per leaf — so every stage works on whole arrays instead of one element at a time
(:mod:`popjit.data.core`). ``map`` and ``filter`` functions are traced once and run on whole
chunks when their ops allow it (:mod:`popjit.data.mapping`, :mod:`popjit.data.vectorize`);
``shuffle`` uses TensorFlow's buffer rule, vectorised (:mod:`popjit.data.shuffle`).

The infeed API (:mod:`popjit.data.iterator`): ``it = iter(dataset)`` (or
``dataset._make_host_iterator()``) is a :class:`HostIterator` with

- ``it.element_spec`` — the element's nest of ``tf.TensorSpec`` (unknown dimensions None);
- ``it.get_next()`` — the next element as a nest of NumPy arrays;
- ``it.get_next_n(n)`` — the next ``n`` elements stacked: a nest of arrays ``[n, *shape]``;
  raises :class:`EndOfSequence` (a ``StopIteration`` carrying ``requested`` and ``available``)
  without consuming anything when fewer than ``n`` remain;
- ``next(it)`` — eager tensors in Python; inside a ``tf.function`` trace, the hook installed by
  :func:`set_trace_hook` (the infeed's).
"""

from popjit.data.core import AUTOTUNE
from popjit.data.core import INFINITE as INFINITE_CARDINALITY
from popjit.data.core import UNKNOWN as UNKNOWN_CARDINALITY
from popjit.data.dataset import Dataset
from popjit.data.iterator import EndOfSequence, HostIterator, set_trace_hook
from popjit.data.options import Options

__all__ = ["AUTOTUNE", "INFINITE_CARDINALITY", "UNKNOWN_CARDINALITY", "Dataset", "EndOfSequence", "HostIterator",
           "Options", "set_trace_hook"]
