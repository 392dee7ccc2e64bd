"""TensorFlow math functions (``tf.math.*``, ``tf.add``, ``tf.matmul``, reductions...).

Each function converts its arguments (Python scalars take the other operand's dtype, as in
TensorFlow) and applies a registry op with :func:`~popjit.frontend.tracing.apply_op`, or composes
registry ops (``reduce_mean``, ``softmax``...).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from popjit import dtypes, source
from popjit.errors import InvalidArgumentError
from popjit.frontend.convert import convert_to_tensor
from popjit.frontend.tensor import Tensor, is_tensor
from popjit.frontend.tracing import apply_op, current_trace

__all__ = [
    "abs",
    "add",
    "add_n",
    "argmax",
    "argmin",
    "cast",
    "ceil",
    "clip_by_value",
    "cos",
    "cumsum",
    "divide",
    "divide_no_nan",
    "elu",
    "equal",
    "erf",
    "exp",
    "expm1",
    "floor",
    "floordiv",
    "floormod",
    "gelu",
    "greater",
    "greater_equal",
    "is_finite",
    "is_nan",
    "less",
    "less_equal",
    "log",
    "log1p",
    "log_softmax",
    "logical_and",
    "logical_not",
    "logical_or",
    "logical_xor",
    "matmul",
    "maximum",
    "minimum",
    "mod",
    "multiply",
    "negative",
    "not_equal",
    "pow",
    "realdiv",
    "reciprocal",
    "reduce_all",
    "reduce_any",
    "reduce_max",
    "reduce_mean",
    "reduce_min",
    "reduce_prod",
    "reduce_sum",
    "relu",
    "relu6",
    "round",
    "rsqrt",
    "sigmoid",
    "sign",
    "sin",
    "softmax",
    "softplus",
    "sqrt",
    "square",
    "squared_difference",
    "subtract",
    "tanh",
    "truediv",
    "truncatediv",
    "where",
]


def _t(x: Any, dtype: Any = None, hint: Any = None) -> Tensor:
    return convert_to_tensor(x, dtype=dtype, dtype_hint=hint)


def convert_like(value: Any, dtype: dtypes.DType) -> Tensor:
    """Convert the non-tensor operand of a binary op to the other operand's ``dtype``, as TensorFlow does.

    Tensors are returned as they are (a dtype mismatch is the op's ``InvalidArgumentError``). NumPy
    values are cast (TensorFlow casts them too). A Python float cannot become an integer or bool
    tensor, nor a Python int a bool one: ``TypeError``, with TensorFlow's message.
    """
    if is_tensor(value):
        return _t(value)
    arr = np.asarray(value)
    if arr.dtype == object:
        return _t(value, hint=dtype)
    refused = (dtype.is_bool and arr.dtype != np.bool_) or (
        not isinstance(value, (np.ndarray, np.generic)) and arr.dtype.kind == "f" and not dtype.is_floating)
    if refused:
        raise TypeError(f"Cannot convert {value!r} to EagerTensor of dtype {dtype.name}{source.where()}")
    if isinstance(value, (np.ndarray, np.generic)):
        with np.errstate(all="ignore"):
            return _t(arr.astype(dtype.np))
    return _t(value, dtype=dtype)


def convert_pair(x: Any, y: Any) -> tuple[Tensor, Tensor]:
    """Convert binary-op operands: a non-tensor takes the tensor operand's dtype (see :func:`convert_like`)."""
    if is_tensor(x) or (isinstance(x, np.ndarray) and not is_tensor(y)):
        a = _t(x)
        return a, convert_like(y, a.dtype)
    if is_tensor(y) or isinstance(y, np.ndarray):
        c = _t(y)
        return convert_like(x, c.dtype), c
    a = _t(x)
    return a, convert_like(y, a.dtype)


def _binary(op: str) -> Any:
    def fn(x: Any, y: Any, name: str | None = None) -> Tensor:
        a, b = convert_pair(x, y)
        return apply_op(op, [a, b])

    fn.__name__ = op
    fn.__doc__ = f"Element-wise ``{op}`` with NumPy broadcasting."
    return fn


def _unary(op: str) -> Any:
    def fn(x: Any, name: str | None = None) -> Tensor:
        return apply_op(op, [_t(x)])

    fn.__name__ = op
    fn.__doc__ = f"Element-wise ``{op}``."
    return fn


add = _binary("add")
subtract = _binary("sub")
multiply = _binary("mul")
maximum = _binary("maximum")
minimum = _binary("minimum")
floordiv = _binary("floordiv")
floormod = _binary("mod")
squared_difference = _binary("squared_difference")
equal = _binary("equal")
not_equal = _binary("not_equal")
less = _binary("less")
less_equal = _binary("less_equal")
greater = _binary("greater")
greater_equal = _binary("greater_equal")
logical_and = _binary("logical_and")
logical_or = _binary("logical_or")
mod = floormod

negative = _unary("neg")
abs = _unary("abs")
exp = _unary("exp")
expm1 = _unary("expm1")
log = _unary("log")
log1p = _unary("log1p")
sqrt = _unary("sqrt")
rsqrt = _unary("rsqrt")
square = _unary("square")
tanh = _unary("tanh")
sigmoid = _unary("sigmoid")
sin = _unary("sin")
cos = _unary("cos")
floor = _unary("floor")
ceil = _unary("ceil")
round = _unary("round")
sign = _unary("sign")
reciprocal = _unary("reciprocal")
erf = _unary("erf")
logical_not = _unary("logical_not")
is_nan = _unary("is_nan")
is_finite = _unary("is_finite")
relu = _unary("relu")
relu6 = _unary("relu6")
elu = _unary("elu")
softplus = _unary("softplus")


def gelu(features: Any, approximate: bool = False, name: str | None = None) -> Tensor:
    """``tf.nn.gelu``: exact (erf) by default, tanh approximation with ``approximate=True``."""
    return apply_op("gelu", [_t(features)], approximate=bool(approximate))


def truediv(x: Any, y: Any, name: str | None = None) -> Tensor:
    """``x / y``. Integers are converted to float first (8- and 16-bit ones to float32, wider ones
    to float64, which the IPU refuses), as TensorFlow does; bool and mixed dtypes are a ``TypeError``."""
    a, b = convert_pair(x, y)
    if a.dtype != b.dtype:
        raise TypeError(f"`x` and `y` must have the same dtype, got {a.dtype!r} != {b.dtype!r}.{source.where()}")
    if a.dtype.is_bool:
        raise TypeError(f"Invalid dtype {a.dtype!r} in __truediv__. Expected an integer or floating dtype."
                        f"{source.where()}")
    if not a.dtype.is_floating:
        target = dtypes.float32 if a.dtype.size <= 2 else dtypes.float64
        a, b = cast(a, target), cast(b, target)
    return apply_op("div", [a, b])


divide = truediv
realdiv = _binary("div")


def divide_no_nan(x: Any, y: Any, name: str | None = None) -> Tensor:
    """``x / y``, and 0 where ``y`` is 0 (``tf.math.divide_no_nan``; its gradient is 0 there too)."""
    a, b = convert_pair(x, y)
    zero = apply_op("equal", [b, _t(0, dtype=b.dtype)])
    safe = apply_op("select", [zero, _t(1, dtype=b.dtype), b])
    quotient = truediv(a, safe)
    return apply_op("select", [zero, _t(0, dtype=quotient.dtype), quotient])


div_no_nan = divide_no_nan


def pow(x: Any, y: Any, name: str | None = None) -> Tensor:
    """``x ** y`` element-wise."""
    a, b = convert_pair(x, y)
    return apply_op("pow", [a, b])


def logical_xor(x: Any, y: Any, name: str | None = None) -> Tensor:
    """``x != y`` for bool tensors (``tf.math.logical_xor``)."""
    a, b = convert_pair(x, y)
    for t in (a, b):
        if not t.dtype.is_bool:
            raise InvalidArgumentError(f"Op 'logical_xor' does not support {t.dtype.name} inputs (allowed: bool). "
                                       f"Compare with tf.not_equal, or tf.cast to bool first.{source.where()}")
    return apply_op("not_equal", [a, b])


bitwise_and = _binary("bitwise_and")
bitwise_or = _binary("bitwise_or")
bitwise_xor = _binary("bitwise_xor")
invert = _unary("invert")
truncatediv = _binary("truncdiv")


def _bool_or_bitwise(logical: Any, bitwise: Any) -> Any:
    """The Python operator ``&``/``|``/``^``: logical on bool tensors, bitwise on integers (as TensorFlow)."""

    def fn(x: Any, y: Any) -> Tensor:
        a, b = convert_pair(x, y)
        return (logical if a.dtype.is_bool else bitwise)(a, b)

    return fn


logical_and_or_bitwise = _bool_or_bitwise(logical_and, bitwise_and)
logical_or_or_bitwise = _bool_or_bitwise(logical_or, bitwise_or)
logical_xor_or_bitwise = _bool_or_bitwise(logical_xor, bitwise_xor)


def invert_or_logical_not(x: Any) -> Tensor:
    """The Python operator ``~``: ``logical_not`` on bool tensors, ``bitwise.invert`` on integers."""
    t = _t(x)
    return logical_not(t) if t.dtype.is_bool else invert(t)


def cast(x: Any, dtype: Any, name: str | None = None) -> Tensor:
    """``tf.cast``: convert to ``dtype`` (floats to ints truncate toward zero)."""
    t = _t(x)
    dtype = dtypes.as_dtype(dtype)
    if t.dtype == dtype:
        return t
    return apply_op("cast", [t], dtype=dtype)


def clip_by_value(t: Any, clip_value_min: Any, clip_value_max: Any, name: str | None = None) -> Tensor:
    """``min(max(t, lo), hi)`` element-wise."""
    t = _t(t)
    return minimum(maximum(t, clip_value_min), clip_value_max)


def where(condition: Any, x: Any = None, y: Any = None, name: str | None = None) -> Tensor:
    """``tf.where(cond, x, y)``: elements of ``x`` where ``cond``, else of ``y`` (broadcasting)."""
    if x is None and y is None:
        c = _t(condition)
        if current_trace() is not None:
            raise InvalidArgumentError(
                "tf.where(condition) with one argument returns a dynamically shaped tensor, which XLA cannot "
                "compile: its output shape depends on the data. Use tf.where(condition, x, y) instead."
            )
        return Tensor.eager(np.argwhere(c.numpy()).astype(np.int64))
    a, b = convert_pair(x, y)
    return apply_op("select", [_t(condition, dtype=dtypes.bool_), a, b])


def matmul(a: Any, b: Any, transpose_a: bool = False, transpose_b: bool = False, adjoint_a: bool = False,
           adjoint_b: bool = False, a_is_sparse: bool = False, b_is_sparse: bool = False,
           output_type: Any = None, name: str | None = None) -> Tensor:
    """``tf.linalg.matmul``: batched matrix product with optional transposes."""
    x, y = convert_pair(a, b)
    return apply_op("matmul", [x, y], transpose_a=bool(transpose_a or adjoint_a),
                    transpose_b=bool(transpose_b or adjoint_b))


def _axes(axis: Any, op: str = "Sum") -> Any:
    """Reduction axes as a tuple of ints (None stays None); a tensor must be known while tracing."""
    if axis is None:
        return None
    if isinstance(axis, (Tensor, list, tuple)):
        axis = _static(axis, "axis", op)
    if isinstance(axis, np.ndarray):
        return tuple(int(a) for a in np.ravel(axis))
    return (int(axis),)


def _axis_int(axis: Any, op: str) -> int:
    """One axis as an int; a tensor must be known while tracing."""
    return int(np.asarray(_static(axis, "axis", op)).reshape(()))


def _static(t: Any, what: str, op: str) -> Any:
    # why: array_ops is built on this module (importing it at the top would be circular)
    from popjit.frontend.array_ops import static_value

    return static_value(t, what, op=op, index=1)


def _reduce(op: str) -> Any:
    def fn(input_tensor: Any, axis: Any = None, keepdims: bool = False, name: str | None = None) -> Tensor:
        x = _t(input_tensor)
        axes = _axes(axis, op)
        return apply_op(op, [x], axes=tuple(range(x.ndim)) if axes is None else axes, keepdims=bool(keepdims))

    fn.__name__ = op
    fn.__doc__ = f"``tf.{op}`` over ``axis`` (all axes if None)."
    return fn


reduce_sum = _reduce("reduce_sum")
reduce_prod = _reduce("reduce_prod")
reduce_max = _reduce("reduce_max")
reduce_min = _reduce("reduce_min")
reduce_any = _reduce("reduce_any")
reduce_all = _reduce("reduce_all")


def reduce_mean(input_tensor: Any, axis: Any = None, keepdims: bool = False, name: str | None = None) -> Tensor:
    """Mean over ``axis``; integer means truncate toward zero as TensorFlow's do.

    float16 sums and divides in float32 and rounds once (as XLA and poplibs do), so a mean of large
    float16 values does not overflow where the result itself fits.
    """
    x = _t(input_tensor)
    if x.dtype == dtypes.float16:
        return cast(reduce_mean(cast(x, dtypes.float32), axis, keepdims), dtypes.float16)
    total = reduce_sum(x, axis, keepdims)
    n = max(1, x.aval.size // max(1, total.aval.size)) if x.aval.size else 0
    if x.dtype.is_floating:
        return truediv(total, float(n)) if n else total * float("nan")
    return apply_op("truncdiv", [total, _t(n, dtype=x.dtype)])


def argmax(input: Any, axis: Any = None, output_type: Any = dtypes.int64, name: str | None = None) -> Tensor:
    """Index of the largest value along ``axis`` (0 if None)."""
    out = dtypes.as_dtype(output_type)
    return apply_op("argmax", [_t(input)], axis=0 if axis is None else _axis_int(axis, "ArgMax"), output_type=out)


def argmin(input: Any, axis: Any = None, output_type: Any = dtypes.int64, name: str | None = None) -> Tensor:
    """Index of the smallest value along ``axis`` (0 if None)."""
    out = dtypes.as_dtype(output_type)
    return apply_op("argmin", [_t(input)], axis=0 if axis is None else _axis_int(axis, "ArgMin"), output_type=out)


def cumsum(x: Any, axis: int = 0, exclusive: bool = False, reverse: bool = False, name: str | None = None) -> Tensor:
    """Cumulative sum along ``axis``."""
    return apply_op("cumsum", [_t(x)], axis=_axis_int(axis, "Cumsum"), exclusive=bool(exclusive),
                    reverse=bool(reverse))


def add_n(inputs: list[Any], name: str | None = None) -> Tensor:
    out = _t(inputs[0])
    for x in inputs[1:]:
        out = add(out, x)
    return out


def softmax(logits: Any, axis: int = -1, name: str | None = None) -> Tensor:
    """``exp(x - max) / sum(exp(x - max))`` along ``axis``."""
    x = _t(logits)
    e = exp(subtract(x, _stable_shift(x, axis)))
    return truediv(e, reduce_sum(e, axis, keepdims=True))


def log_softmax(logits: Any, axis: int = -1, name: str | None = None) -> Tensor:
    """``x - max - log(sum(exp(x - max)))`` along ``axis``."""
    x = _t(logits)
    shifted = subtract(x, _stable_shift(x, axis))
    return subtract(shifted, log(reduce_sum(exp(shifted), axis, keepdims=True)))


def _stable_shift(x: Tensor, axis: int) -> Tensor:
    """The max along ``axis``, subtracted for stability. Both softmaxes are invariant to it, so its
    gradient is zero: stopping it spares the backward pass a reduction and three element-wise passes."""
    return apply_op("stop_gradient", [reduce_max(x, axis, keepdims=True)])
