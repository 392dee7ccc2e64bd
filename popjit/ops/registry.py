"""Looking up ops. Importing :mod:`popjit.ops` registers every family, so ``get`` finds any op.

The definitions (``OpDef``, the op kinds, ``register``) live in :mod:`popjit.ir.opdef`.
"""

from __future__ import annotations

from popjit.errors import UnimplementedError
from popjit.ir.opdef import (  # noqa: F401  (lookups use the kinds with the ops)
    BINARY,
    CONTROL,
    EFFECT,
    ELEMENTWISE,
    ELEMENTWISE_KINDS,
    MATMUL,
    MOVEMENT,
    OTHER,
    REDUCE,
    REGISTRY,
    SOURCE,
    UNARY,
    ElementCost,
    OpDef,
    facet,
)


def get(name: str) -> OpDef:
    """The op called ``name``; ``UnimplementedError`` if popjit has no such op."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise UnimplementedError(f"Op '{name}' is not implemented by popjit.") from None


def all_ops() -> dict[str, OpDef]:
    """Every registered op, by name."""
    return dict(REGISTRY)
