"""``tf.distribute``: ``ReduceOp``, what ``IPUStrategy.reduce`` takes (``tf.distribute.ReduceOp.SUM``)."""

from popjit.errors import missing_attributes as _missing_attributes
from popjit.ipu.ipu_strategy import ReduceOp

__all__ = ["ReduceOp"]

__getattr__ = _missing_attributes("tf.distribute")
