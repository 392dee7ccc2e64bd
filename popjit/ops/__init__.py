"""Every op family. Importing this package registers all ops (see :mod:`popjit.ops.registry`)."""

from popjit.ir.opdef import REGISTRY, OpDef, facet, register  # noqa: F401
from popjit.ops import (  # noqa: F401
    collectives,
    control_flow,
    conv,
    elementwise,
    gather,
    matmul,
    movement,
    random,
    reduce,
    source,
    streams,
    update,
)
from popjit.ops.registry import all_ops, get  # noqa: F401
