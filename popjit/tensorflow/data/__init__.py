"""``tf.data``: input pipelines (implemented in :mod:`popjit.data`)."""

from popjit.data import AUTOTUNE, INFINITE_CARDINALITY, UNKNOWN_CARDINALITY, Dataset, Options  # noqa: F401
from popjit.data.iterator import HostIterator as Iterator  # noqa: F401
from popjit.data.options import DistributeOptions, OptimizationOptions, ThreadingOptions  # noqa: F401
from popjit.errors import missing_attributes
from popjit.tensorflow.data import experimental  # noqa: F401

DatasetV2 = Dataset


__getattr__ = missing_attributes("tf.data")
