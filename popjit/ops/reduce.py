"""Reductions (sum, prod, max, min, any, all), arg-reductions and cumulative sums.

Lowering: one :class:`~popjit.ir.loop.Kernel` with a ``Reduce`` part; its domain is the kept
axes and its ``rdomain`` the reduced ones, so an element-wise producer (``sum(x * x)``) fuses into
the reduction's body.

:data:`REDUCTIONS` has one row per way of combining (the loop IR's ``Reduce.op``): its NumPy
reference, identity, the Numba source of one combining step, the Poplar operation and the
cycle formula. The loop interpreter, the code generator and the schedule read these rows; a new
reduction is a new row here (and an op below, and its frontend name).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from popjit import dtypes
from popjit.dtypes import DType
from popjit.errors import InvalidArgumentError
from popjit.ir.graph import Aval
from popjit.ir.lazy import Lazy
from popjit.ir.loop import Kernel, Reduce, Store, flat_index, ivar, row_major_strides
from popjit.ir.opdef import REDUCE, REGISTRY, OpDef, register
from popjit.ops.elementwise import no_gradient
from popjit.ops.shapes import check_dtype, normalize_axes, normalize_axis

FLOATS = (dtypes.float16, dtypes.float32, dtypes.float64)
NUMERIC = FLOATS + (dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32, dtypes.int64)
BOOL = (dtypes.bool_,)


def _acc_dtype(x: np.ndarray) -> Any:
    return np.float32 if x.dtype == np.float16 else None


def _lowest(x: np.ndarray) -> Any:
    return -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min


def _highest(x: np.ndarray) -> Any:
    return np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).max


@dataclass(frozen=True)
class Reduction:
    """One way a loop-IR ``Reduce`` combines elements (its ``op``), every facet side by side.

    - ``numpy(x, axes, keepdims)``: the reference (the ops below and the loop interpreter run it);
    - ``identity(dtype)``: the value an accumulator of ``dtype`` starts from;
    - ``combine``: Numba source of one step ``acc ⊕ v`` for floating and for other accumulators,
      with ``{acc}`` and ``{v}`` in it; arg-reductions have ``better`` instead, the comparison that
      moves the running index;
    - ``poplar``: the ``popops::Operation`` of the reduce vertex the schedule places;
    - ``cost``: the reduce-vertex cycle formula (``vectorised``, ``logical`` or ``generic``, see
      :func:`popjit.schedule.cost.reduce_thread_cycles`);
    - ``widens``: integer inputs accumulate in int64 (sums and products).
    """

    name: str
    poplar: str
    numpy: Callable[[np.ndarray, tuple[int, ...], bool], Any]
    identity: Callable[[DType], Any]
    combine: tuple[str, str] | None = None
    better: str | None = None
    cost: str = "vectorised"
    widens: bool = False

    @property
    def is_arg(self) -> bool:
        """An arg-reduction: the result is the index of the extreme along one axis."""
        return self.better is not None

    def accumulator(self, dtype: DType) -> DType:
        """The accumulator's type: int64 for widening integer reductions, float32 for float16."""
        if self.widens and dtype.is_integer:
            return dtypes.int64
        return dtypes.float32 if dtype == dtypes.float16 else dtype

    def step(self, acc: str, v: str, dtype: DType) -> str:
        """Numba source of one combining step for an accumulator of ``dtype``."""
        assert self.combine is not None, f"{self.name} is an arg-reduction: it compares with {self.better!r}"
        return self.combine[0 if dtype.is_floating else 1].format(acc=acc, v=v)

    def partial_bytes(self, dtype: DType) -> int:
        """Bytes of one partial result exchanged between tiles [U]: (value, index) pairs for
        arg-reductions, float partials for half, otherwise the output type."""
        if self.is_arg:
            return 8
        return 4 if dtype == dtypes.float16 else dtype.size


def _extreme(low: bool) -> Callable[[DType], Any]:
    return lambda d: (-np.inf if low else np.inf) if d.is_floating else (d.min if low else d.max)


REDUCTIONS: dict[str, Reduction] = {r.name: r for r in [
    Reduction("sum", "ADD", lambda x, a, k: np.sum(x, axis=a, keepdims=k, dtype=_acc_dtype(x)), lambda d: 0,
              ("{acc} + {v}", "{acc} + {v}"), widens=True),
    Reduction("prod", "MUL", lambda x, a, k: np.prod(x, axis=a, keepdims=k, dtype=_acc_dtype(x)), lambda d: 1,
              ("{acc} * {v}", "{acc} * {v}"), widens=True),
    Reduction("max", "MAX", lambda x, a, k: np.max(x, axis=a, keepdims=k, initial=_lowest(x)), _extreme(True),
              ("km.fmax({acc}, {v})", "max({acc}, {v})")),
    Reduction("min", "MIN", lambda x, a, k: np.min(x, axis=a, keepdims=k, initial=_highest(x)), _extreme(False),
              ("km.fmin({acc}, {v})", "min({acc}, {v})")),
    Reduction("any", "LOGICAL_OR", lambda x, a, k: np.any(x, axis=a, keepdims=k), lambda d: False,
              ("{acc} or {v}", "{acc} or {v}"), cost="logical"),
    Reduction("all", "LOGICAL_AND", lambda x, a, k: np.all(x, axis=a, keepdims=k), lambda d: True,
              ("{acc} and {v}", "{acc} and {v}"), cost="logical"),
    Reduction("argmax", "ARGMAX", lambda x, a, k: np.argmax(x, axis=a[0]), _extreme(True), better=">",
              cost="generic"),
    Reduction("argmin", "ARGMIN", lambda x, a, k: np.argmin(x, axis=a[0]), _extreme(False), better="<",
              cost="generic"),
]}


def reduced_shape(shape: tuple[int, ...], axes: tuple[int, ...], keepdims: bool) -> tuple[int, ...]:
    if keepdims:
        return tuple(1 if k in axes else d for k, d in enumerate(shape))
    return tuple(d for k, d in enumerate(shape) if k not in axes)


def _lower_reduction(ctx: Any, x: Lazy, axes: tuple[int, ...], reduce: str, out: Aval, mode: str = "reduce",
                     exclusive: bool = False, reverse: bool = False) -> Lazy:
    kept = [k for k in range(x.ndim) if k not in axes]
    domain = tuple(x.shape[k] for k in kept)
    rdomain = tuple(x.shape[k] for k in axes)
    dvars = {k: ivar(f"i{j}") for j, k in enumerate(kept)}
    rvars = {k: ivar(f"r{j}") for j, k in enumerate(axes)}
    idx = tuple(dvars[k] if k in dvars else rvars[k] for k in range(x.ndim))
    body = x.build(idx)
    buf = ctx.new_temp(out.shape, out.dtype, reduce)
    if mode == "scan":
        store_index = flat_index(idx, row_major_strides(x.shape))
    else:
        store_index = flat_index([dvars[k] for k in kept], row_major_strides(domain))
    spec = Reduce(reduce, rdomain, mode, exclusive, reverse)
    ctx.emit(Kernel(ctx.name(reduce, x.ops), domain, [Store(buf, store_index, body)], spec, x.ops + (reduce,)))
    return Lazy.of_buffer(buf, out.shape)


def check_axes(axes: int | tuple[int, ...], ndim: int, op: str) -> tuple[int, ...]:
    """The normalized reduction axes; ``InvalidArgumentError`` for axes out of range (a scalar has
    none) or repeated, as TensorFlow raises."""
    given = (axes,) if isinstance(axes, int) else tuple(axes)
    if ndim == 0 and given:
        raise InvalidArgumentError(
            f"Invalid reduction dimension ({given[0]} for input with 0 dimension(s)) [Op:{op}]")
    norm = normalize_axes(given, ndim, op)
    if len(norm) != len(given):
        raise InvalidArgumentError(
            f"Invalid reduction arguments: Axes contains duplicate dimension: {list(given)} [Op:{op}]")
    return norm


def _check_axis(axis: int, ndim: int, op: str) -> int:
    """One axis of an arg-reduction or scan, which a scalar does not have."""
    if ndim == 0:
        raise InvalidArgumentError(f"Expected dimension (axis) in the range [0, 0), but got {axis} [Op:{op}]")
    return normalize_axis(axis, ndim, op)


def reduction(name: str, reduce: str, allowed: tuple[DType, ...]) -> OpDef:
    """Register ``reduce_<op>(x, axes, keepdims)`` over the row ``REDUCTIONS[reduce]``."""
    ref = REDUCTIONS[reduce].numpy

    def infer(x: Aval, axes: tuple[int, ...], keepdims: bool = False) -> Aval:
        check_dtype(name, x.dtype, allowed)
        axes = check_axes(axes, x.ndim, name)
        return Aval(reduced_shape(x.shape, axes, keepdims), x.dtype)

    def reference(x: np.ndarray, axes: tuple[int, ...], keepdims: bool = False) -> np.ndarray:
        axes = normalize_axes(axes, x.ndim, name)
        with np.errstate(all="ignore"):
            return np.asarray(ref(x, axes, keepdims)).astype(x.dtype)

    def lower(ctx: Any, node: Any, args: list[Lazy]) -> list[Lazy]:
        axes = normalize_axes(node.attrs["axes"], args[0].ndim)
        return [_lower_reduction(ctx, args[0], axes, reduce, node.outputs[0].aval)]

    return register(OpDef(name, REDUCE, infer, reference, lower, doc=f"{reduce} over axes (keepdims)",
                          extra={"reduce": reduce, "dtypes": allowed}))


reduction("reduce_sum", "sum", NUMERIC)
reduction("reduce_prod", "prod", NUMERIC)
reduction("reduce_max", "max", NUMERIC)
reduction("reduce_min", "min", NUMERIC)
reduction("reduce_any", "any", BOOL)
reduction("reduce_all", "all", BOOL)


def arg_reduction(name: str, reduce: str) -> OpDef:
    """Register ``argmax``/``argmin(x, axis, output_type)`` over the row ``REDUCTIONS[reduce]``: the
    first index of the extreme."""
    ref = REDUCTIONS[reduce].numpy

    def infer(x: Aval, axis: int, output_type: DType = dtypes.int64) -> Aval:
        check_dtype(name, x.dtype, NUMERIC + BOOL)
        ax = _check_axis(axis, x.ndim, name)
        if x.shape[ax] == 0:
            raise InvalidArgumentError(f"Reduction axis {axis} is empty in shape {list(x.shape)}")
        return Aval(tuple(d for k, d in enumerate(x.shape) if k != ax), output_type)

    def reference(x: np.ndarray, axis: int, output_type: DType = dtypes.int64) -> np.ndarray:
        return np.asarray(ref(x, (normalize_axis(axis, x.ndim),), False)).astype(output_type.np)

    def lower(ctx: Any, node: Any, args: list[Lazy]) -> list[Lazy]:
        ax = normalize_axis(node.attrs["axis"], args[0].ndim)
        return [_lower_reduction(ctx, args[0], (ax,), reduce, node.outputs[0].aval)]

    return register(OpDef(name, REDUCE, infer, reference, lower, doc=f"index of the first {reduce[3:]} along an axis",
                          extra={"reduce": reduce}))


arg_reduction("argmax", "argmax")
arg_reduction("argmin", "argmin")


def _cumsum_infer(x: Aval, axis: int, exclusive: bool = False, reverse: bool = False) -> Aval:
    check_dtype("cumsum", x.dtype, NUMERIC)
    _check_axis(axis, x.ndim, "Cumsum")
    return x


def _cumsum_ref(x: np.ndarray, axis: int, exclusive: bool = False, reverse: bool = False) -> np.ndarray:
    ax = normalize_axis(axis, x.ndim)
    y = np.flip(x, ax) if reverse else x
    c = np.cumsum(y, axis=ax, dtype=_acc_dtype(x))
    if exclusive:
        c = np.concatenate([np.zeros_like(np.take(c, [0], axis=ax)), np.delete(c, -1, axis=ax)], axis=ax)
    return (np.flip(c, ax) if reverse else c).astype(x.dtype)


def _cumsum_lower(ctx: Any, node: Any, args: list[Lazy]) -> list[Lazy]:
    a = node.attrs
    ax = normalize_axis(a["axis"], args[0].ndim)
    return [_lower_reduction(ctx, args[0], (ax,), "sum", node.outputs[0].aval, "scan",
                             a.get("exclusive", False), a.get("reverse", False))]


register(OpDef("cumsum", REDUCE, _cumsum_infer, _cumsum_ref, _cumsum_lower, doc="tf.cumsum (exclusive, reverse)",
               extra={"reduce": "sum"}))


# ----------------------------------------------------------------------------------------------
# Gradient rules (see popjit.autodiff). reduce_mean is reduce_sum and a division, so it needs none.


def _kept(t: Any, x: Any, axes: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``x``'s shape and the shape of its reduction with the reduced axes kept as size 1."""
    shape = t.shape_of(x)
    return shape, reduced_shape(shape, normalize_axes(axes, len(shape)), True)


def _reduce_sum_vjp(t: Any, primals: list, outputs: list, cts: list, axes: tuple[int, ...],
                    keepdims: bool = False) -> list[Any]:
    """Every element of a reduced group gets the group's cotangent."""
    (x,), (ct,) = primals, cts
    if not x.dtype.is_floating:
        return [None]
    shape, kept = _kept(t, x, axes)
    return [t.broadcast_to(t.reshape(ct, kept), shape)]


def _reduce_prod_vjp(t: Any, primals: list, outputs: list, cts: list, axes: tuple[int, ...],
                     keepdims: bool = False) -> list[Any]:
    """d prod / d x_i = the product of the other elements of the group, with zeros handled exactly:
    no zero in the group gives ``prod / x_i``; one zero gives the product of the rest at the zero and 0
    elsewhere; two or more give 0 everywhere (as TensorFlow's rule)."""
    (x,), (ct,) = primals, cts
    if not x.dtype.is_floating:
        return [None]
    shape, kept = _kept(t, x, axes)
    ax = normalize_axes(axes, len(shape))
    is_zero = t.equal(x, 0.0)
    zeros = t.reduce_sum(t.cast(is_zero, x.dtype), ax, keepdims=True)
    rest = t.reduce_prod(t.where(is_zero, t.ones_like(x), x), ax, keepdims=True)
    safe_x = t.where(is_zero, t.ones_like(x), x)
    none_zero = t.where(t.equal(zeros, 0.0), rest / safe_x, t.zeros_like(x))
    one_zero = t.where(t.equal(zeros, 1.0), t.broadcast_to(rest, shape), t.zeros_like(x))
    return [t.reshape(ct, kept) * t.where(is_zero, one_zero, none_zero)]


def _extremum_vjp(t: Any, primals: list, outputs: list, cts: list, axes: tuple[int, ...],
                  keepdims: bool = False) -> list[Any]:
    """reduce_max/min: the cotangent is split equally between the elements equal to the extreme (TF)."""
    (x,), (y,), (ct,) = primals, outputs, cts
    if not x.dtype.is_floating:
        return [None]
    _, kept = _kept(t, x, axes)
    hit = t.cast(t.equal(x, t.reshape(y, kept)), x.dtype)
    count = t.reduce_sum(hit, normalize_axes(axes, x.ndim), keepdims=True)
    return [hit * (t.reshape(ct, kept) / count)]


def _cumsum_vjp(t: Any, primals: list, outputs: list, cts: list, axis: int, exclusive: bool = False,
                reverse: bool = False) -> list[Any]:
    """The adjoint of a cumulative sum is the cumulative sum in the other direction."""
    if not primals[0].dtype.is_floating:
        return [None]
    return [t.cumsum(cts[0], axis=axis, exclusive=exclusive, reverse=not reverse)]


REGISTRY["reduce_sum"].vjp = _reduce_sum_vjp
REGISTRY["reduce_prod"].vjp = _reduce_prod_vjp
REGISTRY["reduce_max"].vjp = _extremum_vjp
REGISTRY["reduce_min"].vjp = _extremum_vjp
REGISTRY["cumsum"].vjp = _cumsum_vjp
for _name in ("argmax", "argmin", "reduce_any", "reduce_all"):
    REGISTRY[_name].vjp = no_gradient  # TF's NotDifferentiable
