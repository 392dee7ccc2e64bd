"""The op definition: every op is defined once, with all its facets side by side.

An :class:`OpDef` holds

- ``infer``: the shape/dtype rule, ``infer(*avals, **attrs) -> Aval | tuple[Aval, ...]``; it raises
  ``InvalidArgumentError`` (or ``TypeError``) for bad input;
- ``reference``: the NumPy reference, ``reference(*arrays, **attrs) -> array | tuple``; the graph
  interpreter and the loop-IR interpreter run it, and tests compare compiled code against it;
- ``lower``: how the op becomes loop IR (see :mod:`popjit.loop.lower`);
- ``scalar``: for element-wise ops, the scalar Numba source template used by the codelet
  generator, ``scalar(args, dtype, **attrs) -> str``;
- ``cost``: the cycle estimator inputs (see :mod:`popjit.schedule.cost`);
- ``vjp``: the gradient rule slot (filled by the autodiff work).

The op families in :mod:`popjit.ops` register their ops here; :mod:`popjit.ops.registry` looks
them up (``get`` raises ``UnimplementedError`` naming an op that is not registered), and
``facet(op, name)`` raises ``UnimplementedError`` naming a missing facet.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from popjit.errors import UnimplementedError

# Op kinds. Element-wise kinds share one lowering and one cost model.
UNARY = "unary"
BINARY = "binary"
ELEMENTWISE = "elementwise"  # n-ary element-wise (select, clip, cast...)
REDUCE = "reduce"
MOVEMENT = "movement"
MATMUL = "matmul"
SOURCE = "source"  # constant, iota, fill, random: no tensor inputs read element-wise
CONTROL = "control"
EFFECT = "effect"
OTHER = "other"
ELEMENTWISE_KINDS = frozenset({UNARY, BINARY, ELEMENTWISE})


@dataclass(frozen=True)
class ElementCost:
    """Per-loop cycle figures of an element-wise vertex (``docs/ipu_hardware.md`` §3.2–3.3).

    ``cycles`` per inner loop, processing ``width`` elements; ``natural`` loops use the data-path
    vector width and pay the per-loop overhead of the 1D vertex formulas. ``assembly``: the float and
    half loops are hand-written assembly (ADD/SUB/MUL), whose per-loop overhead is smaller.
    ``entry_1d``: the op's own worker entry cycles in a unary 1D vertex (None: the usual ones).
    """

    float: tuple[int, int, bool] = (2, 2, True)
    half: tuple[int, int, bool] = (2, 4, True)
    int: tuple[int, int, bool] = (7, 1, False)
    flops: int = 1
    assembly: bool = False
    entry_1d: int | None = None


@dataclass
class OpDef:
    """Everything popjit knows about one op."""

    name: str
    kind: str
    infer: Callable[..., Any]
    reference: Callable[..., Any]
    lower: Callable[..., Any] | None = None
    scalar: Callable[..., str] | None = None
    cost: ElementCost | Callable[..., Any] | None = None
    vjp: Callable[..., Any] | None = None
    effect: bool = False
    commutative: bool = False
    half_exact: bool = False  # element-wise: exact on float16 inputs, so its float16 result needs no rounding
    doc: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def is_elementwise(self) -> bool:
        return self.kind in ELEMENTWISE_KINDS

    @property
    def folds(self) -> bool:
        """Whether a node of this op whose inputs are constants may be replaced by its value: not a
        source, an effect, or a cross-replica op (whose value depends on the other replicas)."""
        return not self.effect and self.kind != SOURCE and not self.extra.get("replicated")


REGISTRY: dict[str, OpDef] = {}


def register(op: OpDef) -> OpDef:
    """Add an op; each name may be registered once."""
    assert op.name not in REGISTRY, f"op {op.name!r} registered twice"
    REGISTRY[op.name] = op
    return op


def facet(op: OpDef, name: str) -> Any:
    """One facet of an op; ``UnimplementedError`` naming the op and the facet if it is missing."""
    value = getattr(op, name)
    if value is None:
        raise UnimplementedError(f"{name} for op '{op.name}' not implemented")
    return value
