"""The op registry and every op family. Importing this package registers all ops."""

from popjit.ops import control_flow, elementwise, gather, matmul, movement, random, reduce, source, streams, update  # noqa: F401
from popjit.ops.registry import REGISTRY, OpDef, all_ops, facet, get, register  # noqa: F401
