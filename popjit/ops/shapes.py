"""Shape and dtype rule helpers shared by the op families."""

from __future__ import annotations

from collections.abc import Sequence

from popjit import dtypes
from popjit.dtypes import DType
from popjit.errors import InvalidArgumentError
from popjit.ir.graph import Aval


def fmt_shape(shape: Sequence[int]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


def broadcast_shapes(*shapes: Sequence[int], op: str = "") -> tuple[int, ...]:
    """NumPy/TensorFlow broadcasting; ``InvalidArgumentError('Incompatible shapes: ...')`` otherwise."""
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for k in range(ndim):
        dims = {s[len(s) - ndim + k] for s in shapes if len(s) - ndim + k >= 0}
        dims.discard(1)
        if len(dims) > 1:
            tag = f" [Op:{op}]" if op else ""
            raise InvalidArgumentError(f"Incompatible shapes: {' vs. '.join(fmt_shape(s) for s in shapes)}{tag}")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def same_dtype(op: str, *avals: Aval) -> DType:
    """All inputs must share one dtype, as TensorFlow requires (no implicit promotion)."""
    first = avals[0].dtype
    for i, a in enumerate(avals[1:], start=1):
        if a.dtype != first:
            raise InvalidArgumentError(
                f"cannot compute {op} as input #{i}(zero-based) was expected to be a {first.name} tensor "
                f"but is a {a.dtype.name} tensor [Op:{op}]"
            )
    return first


def check_dtype(op: str, dtype: DType, allowed: Sequence[DType]) -> None:
    if dtype not in allowed:
        names = ", ".join(d.name for d in allowed)
        raise InvalidArgumentError(
            f"Op '{op}' does not support {dtype.name} inputs (allowed: {names}). "
            f"Cast the input with tf.cast first."
        )


def normalize_axis(axis: int, ndim: int, op: str = "") -> int:
    if not -ndim <= axis < max(ndim, 1) or (ndim == 0 and axis not in (0, -1)):
        raise InvalidArgumentError(
            f"Invalid reduction dimension {axis} for input with {ndim} dimensions.{f' [Op:{op}]' if op else ''}"
        )
    return axis % ndim if ndim else 0


def normalize_axes(axis: int | Sequence[int] | None, ndim: int, op: str = "") -> tuple[int, ...]:
    """Sorted, de-duplicated non-negative axes; ``None`` means all axes."""
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, int):
        axis = (axis,)
    return tuple(sorted({normalize_axis(int(a), ndim, op) for a in axis}))


FLOAT = dtypes.FLOATS
NUMERIC = dtypes.NUMERIC
FLOAT_AND_INT = (dtypes.float16, dtypes.float32, dtypes.int32, dtypes.int8, dtypes.uint8, dtypes.int16,
                 dtypes.uint16, dtypes.uint32, dtypes.int64, dtypes.float64)
HOST_FLOAT = (dtypes.float16, dtypes.float32, dtypes.float64)
ANY = dtypes.ALL
