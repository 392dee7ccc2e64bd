"""Matrix multiplication (``tf.matmul``, batched with broadcasting, ``transpose_a/b``).

Lowering: one :class:`~popjit.ir.loop.MatMul` statement whose operands are row-major matrices in
buffers; a transposed view of a buffer becomes the ``ta``/``tb`` flag instead of a copy. The
schedule splits it into partial products over many tiles (``popjit.schedule.matmul_plan``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from popjit import dtypes
from popjit.errors import InvalidArgumentError
from popjit.ir.graph import Aval
from popjit.ir.lazy import Lazy, broadcast_to
from popjit.ir.loop import Buffer, MatMul
from popjit.ir.opdef import MATMUL, REGISTRY, OpDef, register
from popjit.ops.shapes import broadcast_shapes, check_dtype, same_dtype

ALLOWED = (dtypes.float16, dtypes.float32, dtypes.float64, dtypes.int32, dtypes.int64)


def _mk(a: Aval, ta: bool) -> tuple[int, int]:
    m, k = a.shape[-2], a.shape[-1]
    return (k, m) if ta else (m, k)


def _infer(a: Aval, b: Aval, transpose_a: bool = False, transpose_b: bool = False, convolution: bool = False,
           plan: tuple | None = None, backward_plan: tuple | None = None) -> Aval:
    dtype = same_dtype("MatMul", a, b)
    check_dtype("matmul", dtype, ALLOWED)
    if a.ndim < 2 or b.ndim < 2:
        raise InvalidArgumentError(
            f"In[0] and In[1] must have rank >= 2, but are {list(a.shape)} and {list(b.shape)} [Op:MatMul]"
        )
    m, k = _mk(a, transpose_a)
    k2, n = (b.shape[-1], b.shape[-2]) if transpose_b else (b.shape[-2], b.shape[-1])
    if k != k2:
        raise InvalidArgumentError(
            f"Matrix size-incompatible: In[0]: {list(a.shape)}, In[1]: {list(b.shape)} [Op:MatMul]"
        )
    batch = broadcast_shapes(a.shape[:-2], b.shape[:-2], op="BatchMatMulV2")
    return Aval((*batch, m, n), dtype)


def _reference(a: np.ndarray, b: np.ndarray, transpose_a: bool = False, transpose_b: bool = False,
               convolution: bool = False, plan: tuple | None = None, backward_plan: tuple | None = None) -> np.ndarray:
    if transpose_a:
        a = np.swapaxes(a, -1, -2)
    if transpose_b:
        b = np.swapaxes(b, -1, -2)
    acc = np.float32 if a.dtype == np.float16 else a.dtype
    return np.matmul(a.astype(acc), b.astype(acc)).astype(a.dtype)


def matrix_operand(ctx: Any, x: Lazy, batch: tuple[int, ...]) -> tuple[Buffer, bool, int]:
    """A buffer holding ``x`` (broadcast over ``batch``) as row-major matrices, a transpose flag, and
    the batch stride (0 when one matrix is shared by every batch entry)."""
    r, c = x.shape[-2:]
    full = broadcast_to(x, (*batch, r, c))
    v = full.view
    if v is not None:
        br = v.strides[:-2]
        sr, sc = v.strides[-2:]
        layout = None
        if (sc == 1 or c == 1) and (sr == c or r == 1):
            layout = False
        elif (sr == 1 or r == 1) and (sc == r or c == 1):
            layout = True
        nonzero = [(d, s) for d, s in zip(batch, br) if d != 1 and s != 0]
        if layout is not None and v.offset == 0 and v.buffer.size >= r * c:
            if not nonzero:
                return v.buffer, layout, 0
            if len(nonzero) == len([d for d in batch if d != 1]):
                expected, stride = [], r * c
                for d, _ in reversed(nonzero):
                    expected.append(stride)
                    stride *= d
                if [s for _, s in reversed(nonzero)] == expected:
                    return v.buffer, layout, r * c
    dense = ctx.materialize(full, "matmul_operand")
    assert dense.view is not None
    return dense.view.buffer, False, (r * c if any(d != 1 for d in batch) else 0)


def _lower(ctx: Any, node: Any, args: list[Lazy]) -> list[Lazy]:
    out = node.outputs[0].aval
    ta, tb = node.attrs.get("transpose_a", False), node.attrs.get("transpose_b", False)
    batch = out.shape[:-2]
    a, a_t, a_bs = matrix_operand(ctx, args[0], batch)
    b, b_t, b_bs = matrix_operand(ctx, args[1], batch)
    m, n = out.shape[-2:]
    k = args[0].shape[-2] if ta else args[0].shape[-1]
    res = ctx.new_temp(out.shape, out.dtype, "matmul")
    nbatch = int(np.prod(batch, dtype=np.int64)) if batch else 1
    plan = node.attrs.get("plan")
    ctx.emit(MatMul(ctx.name("matmul", ()), res, a, b, nbatch, m, n, k, ta != a_t, tb != b_t, a_bs, b_bs,
                    convolution=bool(node.attrs.get("convolution", False)),
                    plan=tuple(plan) if plan is not None else None))
    return [Lazy.of_buffer(res, out.shape)]


register(OpDef("matmul", MATMUL, _infer, _reference, _lower, doc="tf.linalg.matmul"))


def _matmul_vjp(t: Any, primals: list, outputs: list, cts: list, transpose_a: bool = False,
                transpose_b: bool = False, convolution: bool = False, plan: tuple | None = None,
                backward_plan: tuple | None = None) -> list[Any]:
    """dA = dC Bᵀ, dB = Aᵀ dC (with the transposes folded in), summed over broadcast batch axes. A
    convolution's gradients are convolutions too (they plan with the convolution options); a pipeline
    stage's backward planner options (``backward_plan``) become the gradients' own."""
    (a, b), (ct,) = primals, cts
    marks = {"convolution": True} if convolution else {}
    if backward_plan is not None:
        marks["plan"] = backward_plan
    if marks:
        t = _MarkedGradOps(t, marks)
    if transpose_a:
        ga = t.matmul(b, ct, transpose_a=transpose_b, transpose_b=True)
    else:
        ga = t.matmul(ct, b, transpose_b=not transpose_b)
    if transpose_b:
        gb = t.matmul(ct, a, transpose_a=True, transpose_b=transpose_a)
    else:
        gb = t.matmul(a, ct, transpose_a=not transpose_a)
    return [t.unbroadcast(ga, t.shape_of(a)), t.unbroadcast(gb, t.shape_of(b))]


class _MarkedGradOps:
    """Gradient ops whose matmuls carry ``marks`` (a convolution's, a pipeline stage's planner options)."""

    def __init__(self, ops: Any, marks: dict[str, Any]) -> None:
        self._ops, self._marks = ops, marks

    def matmul(self, a: Any, b: Any, transpose_a: bool = False, transpose_b: bool = False) -> Any:
        return self._ops.apply_op("matmul", [a, b], transpose_a=transpose_a, transpose_b=transpose_b,
                                  **self._marks)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ops, name)


REGISTRY["matmul"].vjp = _matmul_vjp
