"""The gradient-rule test table: one :class:`Row` per differentiable registry op (or composite).

A row holds a hypothesis strategy of :class:`Case` s: a function of popjit tensors (written against
``popjit.tensorflow``, dtype-agnostic so the same case runs in float64 and float32) with its static
parameters already drawn (axes, slices, paddings...), the NumPy arguments, and which arguments are
differentiated. Values stay away from the points where the function is not differentiable (kinks,
jumps, ties), which the corner-case tests pin separately.

``NOT_DIFFERENTIABLE`` lists the registry ops nothing differentiates through (TensorFlow's
``NotDifferentiable``): their rules must return None for every input. ``OWNED_ELSEWHERE`` lists the
ops whose gradients are tested with their own feature (control flow, feeds).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import popjit.tensorflow as tf
from popjit import dtypes
from popjit.frontend.tracing import apply_op

NOT_DIFFERENTIABLE = frozenset({
    "equal", "not_equal", "less", "less_equal", "greater", "greater_equal", "logical_and", "logical_or",
    "logical_not", "bitwise_and", "bitwise_or", "bitwise_xor", "invert", "is_nan", "is_finite", "argmax", "argmin",
    "reduce_any", "reduce_all", "one_hot", "constant", "iota", "eye", "reserve", "random_uniform", "random_normal",
    "philox",
})
# Gradients of `while`/`if` come with the control-flow work; feeds carry no gradient (effects); the
# collectives' gradients are tested across real replicas (tests/ipu/test_replication.py).
OWNED_ELSEWHERE = frozenset({"while", "if", "infeed_dequeue", "outfeed_enqueue", "all_reduce", "all_gather",
                             "reduce_scatter", "all_to_all"})


@dataclass
class Case:
    """One differentiable function application: ``fn(*tensors)`` at ``args``, differentiated w.r.t. ``wrt``."""

    fn: Callable[..., Any]
    args: tuple[np.ndarray, ...]
    wrt: tuple[int, ...] = (0,)
    note: str = ""

    def __repr__(self) -> str:
        shapes = ", ".join(f"{a.dtype}{list(a.shape)}" for a in self.args)
        return f"Case({self.note} args=[{shapes}] wrt={self.wrt})\n" + "\n".join(repr(a) for a in self.args)


@dataclass(frozen=True)
class Row:
    """A gradient rule under test.

    ``none``: arguments whose gradient must be None (TensorFlow's convention), checked instead of the
    finite differences, which must then be 0 unless ``cut`` (``stop_gradient`` cuts a gradient that
    exists). ``h``/``tol``: finite-difference step and tolerance.
    ``jit``: also compare the compiled float32 gradient with the eager one.
    """

    name: str
    ops: tuple[str, ...]
    cases: st.SearchStrategy[Case]
    none: tuple[int, ...] = ()
    cut: bool = False
    h: float = 1e-6
    tol: float = 1e-6
    jit: bool = True


# ----------------------------------------------------------------------------------------------
# Strategies


def values(lo: float, hi: float, avoid: Sequence[float] = (), margin: float = 0.02) -> st.SearchStrategy[float]:
    """Floats in ``[lo, hi]`` at least ``margin`` from every point of ``avoid``."""
    base = st.floats(lo, hi, allow_nan=False, allow_infinity=False)
    if not avoid:
        return base
    return base.filter(lambda v: all(abs(v - p) >= margin for p in avoid))


def grid(lo: int, hi: int, scale: float, offset: float = 0.0) -> st.SearchStrategy[float]:
    """``k * scale + offset`` for integers ``k`` in ``[lo, hi]``: values with known gaps between them."""
    return st.integers(lo, hi).map(lambda k: k * scale + offset)


def shapes(min_dims: int = 0, max_dims: int = 3, max_side: int = 4) -> st.SearchStrategy[tuple[int, ...]]:
    return hnp.array_shapes(min_dims=min_dims, max_dims=max_dims, min_side=1, max_side=max_side)


def array(shape: tuple[int, ...], elements: st.SearchStrategy[float]) -> st.SearchStrategy[np.ndarray]:
    return hnp.arrays(np.float64, shape, elements=elements)


def distinct(draw: Any, shape: tuple[int, ...]) -> np.ndarray:
    """Distinct values 0.25 apart (no ties for max/min, no kinks between neighbours)."""
    n = int(np.prod(shape, dtype=np.int64))
    perm = draw(st.permutations(range(n)))
    return (np.asarray(perm, np.float64).reshape(shape) - n / 2) * 0.25 + 0.1


def unary(name: str, fn: Callable[[Any], Any], elements: st.SearchStrategy[float], ops: tuple[str, ...] = (),
          **kw: Any) -> Row:
    """A row of a one-argument function over any shape."""

    @st.composite
    def cases(draw: Any) -> Case:
        return Case(fn, (draw(array(draw(shapes()), elements)),))

    return Row(name, ops or (name,), cases(), **kw)


def binary(name: str, fn: Callable[[Any, Any], Any], xs: st.SearchStrategy[float], ys: st.SearchStrategy[float],
           ops: tuple[str, ...] = (), wrt: tuple[int, ...] = (0, 1), **kw: Any) -> Row:
    """A row of a two-argument element-wise function over broadcasting shapes."""

    @st.composite
    def cases(draw: Any) -> Case:
        sx, sy = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=3)).input_shapes
        return Case(fn, (draw(array(sx, xs)), draw(array(sy, ys))), wrt)

    return Row(name, ops or (name,), cases(), **kw)


def axes_of(draw: Any, ndim: int) -> tuple[int, ...]:
    """A subset of the axes of a rank-``ndim`` tensor, each spelled positive or negative."""
    chosen = draw(st.lists(st.integers(0, ndim - 1), unique=True, max_size=ndim))
    return tuple(a - ndim if draw(st.booleans()) else a for a in chosen)


def reduction(name: str, reduce: Callable[..., Any], make: Callable[[Any, tuple[int, ...]], np.ndarray],
              ops: tuple[str, ...] = ()) -> Row:
    @st.composite
    def cases(draw: Any) -> Case:
        shape = draw(shapes(1))
        axes, keepdims = axes_of(draw, len(shape)), draw(st.booleans())
        if not axes and draw(st.booleans()):
            axes = None  # every axis
        return Case(lambda x: reduce(x, axis=axes, keepdims=keepdims), (make(draw, shape),),
                    note=f"axis={axes} keepdims={keepdims}")

    return Row(name, ops or (name,), cases())


def any_values(draw: Any, shape: tuple[int, ...]) -> np.ndarray:
    return draw(array(shape, values(-2, 2)))


def prod_values(draw: Any, shape: tuple[int, ...]) -> np.ndarray:
    """Values with zeros, single and repeated (the product is a polynomial: smooth everywhere)."""
    return draw(array(shape, st.sampled_from([0.0, 0.0, 0.5, -1.5, 2.0, 1.25, -0.75])))


# ----------------------------------------------------------------------------------------------
# Movement and indexing cases


@st.composite
def cumsum_cases(draw: Any) -> Case:
    shape = draw(shapes(1))
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    exclusive, reverse = draw(st.booleans()), draw(st.booleans())
    return Case(lambda x: tf.cumsum(x, axis=axis, exclusive=exclusive, reverse=reverse), (any_values(draw, shape),),
                note=f"axis={axis} exclusive={exclusive} reverse={reverse}")


@st.composite
def matmul_cases(draw: Any) -> Case:
    batch_a, batch_b = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=2, max_side=2)).input_shapes
    m, k, n = (draw(st.integers(1, 3)) for _ in range(3))
    ta, tb = draw(st.booleans()), draw(st.booleans())
    a = any_values(draw, (*batch_a, *((k, m) if ta else (m, k))))
    b = any_values(draw, (*batch_b, *((n, k) if tb else (k, n))))
    return Case(lambda x, y: tf.matmul(x, y, transpose_a=ta, transpose_b=tb), (a, b), (0, 1),
                note=f"transpose_a={ta} transpose_b={tb}")


@st.composite
def reshape_cases(draw: Any) -> Case:
    shape = draw(shapes())
    target = list(reversed(shape)) + [1] * draw(st.integers(0, 1))
    return Case(lambda x: tf.reshape(x, target), (any_values(draw, shape),), note=f"to {target}")


@st.composite
def broadcast_cases(draw: Any) -> Case:
    sx, sy = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=3)).input_shapes
    target = list(np.broadcast_shapes(sx, sy))
    return Case(lambda x: tf.broadcast_to(x, target), (any_values(draw, sx),), note=f"to {target}")


@st.composite
def transpose_cases(draw: Any) -> Case:
    shape = draw(shapes(1, 4, 3))
    perm = draw(st.permutations(range(len(shape))))
    return Case(lambda x: tf.transpose(x, perm), (any_values(draw, shape),), note=f"perm={perm}")


@st.composite
def slice_cases(draw: Any) -> Case:
    shape = draw(shapes(1, 3, 6))
    key = tuple(draw(st.slices(d)) for d in shape)
    return Case(lambda x: x[key], (any_values(draw, shape),), note=f"x[{key}]")


@st.composite
def reverse_cases(draw: Any) -> Case:
    shape = draw(shapes(1))
    axes = list(axes_of(draw, len(shape)))
    return Case(lambda x: tf.reverse(x, axes), (any_values(draw, shape),), note=f"axis={axes}")


@st.composite
def concat_cases(draw: Any) -> Case:
    shape = list(draw(shapes(1)))
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    sizes = draw(st.lists(st.integers(1, 3), min_size=2, max_size=3))
    parts = []
    for s in sizes:
        shape[axis] = s
        parts.append(any_values(draw, tuple(shape)))
    wrt = tuple(range(len(parts)))
    return Case(lambda *xs: tf.concat(list(xs), axis), tuple(parts), wrt, note=f"axis={axis}")


@st.composite
def split_cases(draw: Any) -> Case:
    shape = draw(shapes(1, 3, 5))
    axis = draw(st.integers(0, len(shape) - 1))
    cuts = sorted(draw(st.lists(st.integers(0, shape[axis]), max_size=2)))
    sizes = [b - a for a, b in zip([0, *cuts], [*cuts, shape[axis]])]
    used = draw(st.lists(st.integers(0, len(sizes) - 1), min_size=1, unique=True))

    def fn(x: Any) -> Any:
        pieces = tf.split(x, sizes, axis=axis)
        return tuple(pieces[k] for k in used)

    return Case(fn, (any_values(draw, shape),), note=f"sizes={sizes} axis={axis} used={used}")


@st.composite
def tile_cases(draw: Any) -> Case:
    shape = draw(shapes(1))
    multiples = [draw(st.integers(1, 3)) for _ in shape]
    return Case(lambda x: tf.tile(x, multiples), (any_values(draw, shape),), note=f"multiples={multiples}")


@st.composite
def pad_cases(draw: Any) -> Case:
    mode = draw(st.sampled_from(["CONSTANT", "REFLECT", "SYMMETRIC"]))
    shape = draw(shapes(1, 3, 4).filter(lambda s: mode != "REFLECT" or min(s) > 1))
    limit = {"CONSTANT": lambda d: 3, "REFLECT": lambda d: d - 1, "SYMMETRIC": lambda d: d}[mode]
    pads = [[draw(st.integers(0, limit(d))), draw(st.integers(0, limit(d)))] for d in shape]
    value = draw(st.sampled_from([0.0, 1.5]))
    return Case(lambda x: tf.pad(x, pads, mode=mode, constant_values=value), (any_values(draw, shape),),
                note=f"{mode} {pads} value={value}")


@st.composite
def gather_cases(draw: Any) -> Case:
    """Indices with repeats and out-of-range values (which clamp, as on the IPU)."""
    pshape = draw(shapes(1, 3, 4))
    batch_dims = draw(st.integers(0, len(pshape) - 1))
    axis = draw(st.integers(batch_dims, len(pshape) - 1))
    extra = draw(hnp.array_shapes(min_dims=0, max_dims=2, min_side=1, max_side=3))
    ishape = pshape[:batch_dims] + extra
    d = pshape[axis]
    indices = draw(hnp.arrays(np.int32, ishape, elements=st.integers(-1, d)))
    spell = axis - len(pshape) if draw(st.booleans()) else axis
    return Case(lambda p, i: tf.gather(p, i, axis=spell, batch_dims=batch_dims), (any_values(draw, pshape), indices),
                note=f"axis={spell} batch_dims={batch_dims}")


@st.composite
def segment_cases(draw: Any) -> Case:
    """Ids with repeats, empty segments and out-of-range ids (dropped)."""
    ishape = draw(hnp.array_shapes(min_dims=1, max_dims=2, min_side=1, max_side=4))
    batch_dims = draw(st.integers(0, len(ishape) - 1))
    inner = draw(hnp.array_shapes(min_dims=0, max_dims=1, min_side=1, max_side=3))
    n = draw(st.integers(1, 4))
    ids = draw(hnp.arrays(np.int32, ishape, elements=st.integers(-1, n)))
    data = any_values(draw, ishape + inner)
    def fn(x: Any, i: Any) -> Any:
        return tf.math.unsorted_segment_sum(x, i, n, batch_dims=batch_dims)

    return Case(fn, (data, ids), note=f"num_segments={n} batch_dims={batch_dims}")


@st.composite
def dynamic_slice_cases(draw: Any) -> Case:
    """A slice at a run-time start (out-of-range starts clamp so the slice fits)."""
    shape = draw(shapes(1, 3, 4))
    size = tuple(draw(st.integers(1, d)) for d in shape)
    begin = np.asarray([draw(st.integers(-1, d)) for d in shape], np.int32)
    return Case(lambda x, b: apply_op("dynamic_slice", [x, b], size=size), (any_values(draw, shape), begin),
                note=f"size={size}")


@st.composite
def dynamic_update_slice_cases(draw: Any) -> Case:
    """In-range starts (out-of-range ones: ``test_conventions``)."""
    shape = draw(shapes(1, 3, 4))
    size = tuple(draw(st.integers(1, d)) for d in shape)
    begin = np.asarray([draw(st.integers(0, d - n)) for d, n in zip(shape, size)], np.int32)
    def fn(x: Any, u: Any, b: Any) -> Any:
        return apply_op("dynamic_update_slice", [x, u, b])

    return Case(fn, (any_values(draw, shape), any_values(draw, size), begin), (0, 1), note=f"size={size}")


@st.composite
def window_geometry(draw: Any) -> tuple[tuple[int, ...], dict[str, Any]]:
    """An input shape ``[N, *S, C]`` with 1 or 2 spatial axes and a window over it that leaves at
    least one output position (strides, dilations and paddings drawn per axis)."""
    spatial = draw(st.integers(1, 2))
    window, strides, dilations, pads, sizes = [], [], [], [], []
    for _ in range(spatial):
        k, r, s = draw(st.integers(1, 3)), draw(st.integers(1, 2)), draw(st.integers(1, 2))
        lo, hi = draw(st.integers(0, 2)), draw(st.integers(0, 2))
        size = draw(st.integers(max(1, (k - 1) * r + 1 - lo - hi), 5))
        window.append(k), strides.append(s), dilations.append(r), pads.append((lo, hi)), sizes.append(size)
    shape = (draw(st.integers(1, 2)), *sizes, draw(st.integers(1, 2)))
    return shape, {"window": tuple(window), "strides": tuple(strides), "dilations": tuple(dilations),
                   "pads": tuple(pads)}


@st.composite
def extract_patches_cases(draw: Any) -> Case:
    shape, geometry = draw(window_geometry())
    fill = draw(st.sampled_from([0.0, -2.5]))
    return Case(lambda x: apply_op("extract_patches", [x], fill=fill, **geometry), (any_values(draw, shape),),
                note=f"{geometry} fill={fill}")


@st.composite
def patches_transpose_cases(draw: Any) -> Case:
    shape, geometry = draw(window_geometry())
    patches = apply_op("extract_patches", [tf.zeros(shape, tf.float32)], **geometry).shape.as_list()
    return Case(lambda p: apply_op("patches_transpose", [p], spatial=shape[1:-1], **geometry),
                (any_values(draw, tuple(patches)),), note=f"{geometry} spatial={shape[1:-1]}")


@st.composite
def dynamic_update_slice_add_cases(draw: Any) -> Case:
    """Starts anywhere, out of range included (they clamp as dynamic_update_slice's)."""
    shape = draw(shapes(1, 3, 4))
    size = tuple(draw(st.integers(1, d)) for d in shape)
    begin = np.asarray([draw(st.integers(-1, d)) for d in shape], np.int32)

    def fn(x: Any, u: Any, b: Any) -> Any:
        return apply_op("dynamic_update_slice_add", [x, u, b])

    return Case(fn, (any_values(draw, shape), any_values(draw, size), begin), (0, 1), note=f"size={size}")


@st.composite
def select_cases(draw: Any) -> Case:
    sc, sx, sy = draw(hnp.mutually_broadcastable_shapes(num_shapes=3, max_dims=3, max_side=3)).input_shapes
    cond = draw(hnp.arrays(np.bool_, sc))
    return Case(lambda c, x, y: tf.where(c, x, y), (cond, any_values(draw, sx), any_values(draw, sy)), (1, 2))


@st.composite
def mod_cases(draw: Any) -> Case:
    """floormod away from its jumps (x / y near an integer)."""
    sx, sy = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=3)).input_shapes
    y = draw(array(sy, st.sampled_from([-2.5, -1.5, -0.75, 0.75, 1.5, 2.5])))
    x = draw(array(sx, values(-6, 6)))
    q = x / y
    x = np.where(np.abs(q - np.round(q)) < 0.05, x + 0.3 * np.abs(y).min(), x)
    return Case(tf.math.floormod, (x, y), (0, 1))


@st.composite
def extremum_cases(draw: Any, reduce: Callable[..., Any]) -> Case:
    shape = draw(shapes(1))
    axes, keepdims = axes_of(draw, len(shape)), draw(st.booleans())
    return Case(lambda x: reduce(x, axis=axes or None, keepdims=keepdims), (distinct(draw, shape),),
                note=f"axis={axes or None} keepdims={keepdims}")


@st.composite
def softmax_cases(draw: Any, fn: Callable[..., Any]) -> Case:
    shape = draw(shapes(1))
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    return Case(lambda x: fn(x, axis=axis), (any_values(draw, shape),), note=f"axis={axis}")


def _cast_chain(x: Any) -> Any:
    """float → float16 → float, and a float → int → float path that cuts the gradient. The row's values
    and step keep ``x ± h`` exactly representable in float16 and away from integers, so the finite
    difference is exact."""
    return tf.cast(tf.cast(x, tf.float16) * 3.0, x.dtype) + tf.cast(tf.cast(x, tf.int32), x.dtype)


# ----------------------------------------------------------------------------------------------
# The table

NONZERO = values(-3, 3, avoid=[0.0])
POSITIVE = values(0.1, 4)
AWAY_FROM_JUMPS = grid(-12, 12, 0.25, 0.125)  # never within 0.125 of an integer or a half

ROWS: list[Row] = [
    # unary element-wise
    unary("neg", lambda x: -x, values(-3, 3)),
    unary("abs", tf.abs, NONZERO),
    unary("exp", tf.exp, values(-3, 3)),
    unary("expm1", tf.math.expm1, values(-3, 3)),
    unary("log", tf.math.log, POSITIVE),
    unary("log1p", tf.math.log1p, values(-0.9, 4)),
    unary("sqrt", tf.sqrt, POSITIVE),
    unary("rsqrt", tf.math.rsqrt, POSITIVE),
    unary("square", tf.square, values(-3, 3)),
    unary("reciprocal", tf.math.reciprocal, values(-3, 3, avoid=[0.0], margin=0.3)),
    unary("tanh", tf.tanh, values(-3, 3)),
    unary("sigmoid", tf.sigmoid, values(-5, 5)),
    unary("relu", tf.nn.relu, NONZERO),
    unary("relu6", tf.nn.relu6, values(-2, 8, avoid=[0.0, 6.0])),
    unary("elu", tf.nn.elu, NONZERO),
    unary("gelu", tf.nn.gelu, values(-4, 4)),
    unary("gelu_tanh", lambda x: tf.nn.gelu(x, approximate=True), values(-4, 4), ("gelu",)),
    unary("softplus", tf.nn.softplus, values(-6, 6)),
    unary("sin", tf.sin, values(-4, 4)),
    unary("cos", tf.cos, values(-4, 4)),
    unary("erf", tf.math.erf, values(-2.5, 2.5)),
    unary("sign", tf.sign, NONZERO),
    unary("floor", tf.floor, AWAY_FROM_JUMPS, none=(0,), jit=False),
    unary("ceil", tf.math.ceil, AWAY_FROM_JUMPS, none=(0,), jit=False),
    unary("round", tf.round, AWAY_FROM_JUMPS, none=(0,), jit=False),
    unary("cast", _cast_chain, grid(-20, 20, 1 / 8, 1 / 16), h=1 / 32, tol=1e-3),  # the cotangent rounds to f16
    unary("identity", tf.identity, values(-3, 3)),
    unary("stop_gradient", tf.stop_gradient, values(-3, 3), none=(0,), cut=True, jit=False),
    # binary element-wise, with broadcasting
    binary("add", tf.add, values(-3, 3), values(-3, 3)),
    binary("sub", tf.subtract, values(-3, 3), values(-3, 3)),
    binary("mul", tf.multiply, values(-3, 3), values(-3, 3)),
    binary("div", tf.divide, values(-3, 3), values(-3, 3, avoid=[0.0], margin=0.5)),
    binary("pow", tf.pow, values(0.2, 3), values(-2, 2)),
    binary("pow_negative_base", tf.pow, values(-3, -0.2), st.sampled_from([-2.0, -1.0, 0.0, 1.0, 2.0, 3.0]),
           ("pow",), wrt=(0,)),
    binary("maximum", tf.maximum, grid(-8, 8, 0.25), grid(-8, 8, 0.25, 0.125)),
    binary("minimum", tf.minimum, grid(-8, 8, 0.25), grid(-8, 8, 0.25, 0.125)),
    binary("squared_difference", tf.math.squared_difference, values(-3, 3), values(-3, 3)),
    binary("floordiv", tf.math.floordiv, AWAY_FROM_JUMPS, st.just(1.0), none=(0, 1), jit=False),
    binary("truncdiv", tf.truncatediv, AWAY_FROM_JUMPS, st.just(1.0), none=(0, 1), jit=False),
    Row("mod", ("mod",), mod_cases()),
    Row("select", ("select",), select_cases()),
    # reductions and scans
    reduction("reduce_sum", tf.reduce_sum, any_values),
    reduction("reduce_mean", tf.reduce_mean, any_values, ("reduce_sum", "div")),
    reduction("reduce_prod", tf.reduce_prod, prod_values),
    Row("reduce_max", ("reduce_max",), extremum_cases(tf.reduce_max)),
    Row("reduce_min", ("reduce_min",), extremum_cases(tf.reduce_min)),
    Row("cumsum", ("cumsum",), cumsum_cases()),
    Row("softmax", ("reduce_max", "exp", "div"), softmax_cases(tf.nn.softmax)),
    Row("log_softmax", ("reduce_max", "log"), softmax_cases(tf.nn.log_softmax)),
    # matmul and movement
    Row("matmul", ("matmul",), matmul_cases()),
    Row("reshape", ("reshape",), reshape_cases()),
    Row("broadcast_to", ("broadcast_to",), broadcast_cases()),
    Row("transpose", ("transpose",), transpose_cases()),
    Row("slice", ("slice",), slice_cases()),
    Row("reverse", ("slice",), reverse_cases()),
    Row("concat", ("concat",), concat_cases()),
    Row("split", ("split",), split_cases()),
    Row("tile", ("tile",), tile_cases()),
    Row("pad", ("pad",), pad_cases()),
    Row("gather", ("gather",), gather_cases()),
    Row("unsorted_segment_sum", ("unsorted_segment_sum",), segment_cases()),
    Row("dynamic_slice", ("dynamic_slice",), dynamic_slice_cases()),
    Row("dynamic_update_slice", ("dynamic_update_slice",), dynamic_update_slice_cases()),
    Row("dynamic_update_slice_add", ("dynamic_update_slice_add",), dynamic_update_slice_add_cases()),
    Row("extract_patches", ("extract_patches",), extract_patches_cases()),
    Row("patches_transpose", ("patches_transpose",), patches_transpose_cases()),
]
ROW_BY_NAME = {r.name: r for r in ROWS}


def ops_with_rows() -> set[str]:
    return {op for r in ROWS for op in r.ops}


# ----------------------------------------------------------------------------------------------
# Running a case


def tensors(args: Sequence[np.ndarray]) -> list[Any]:
    return [tf.constant(a) for a in args]


def outputs_of(result: Any) -> list[Any]:
    return list(result) if isinstance(result, (tuple, list)) else [result]


def cotangents_for(outs: Sequence[Any], seed: int = 0) -> list[np.ndarray]:
    """Fixed pseudo-random output cotangents (so each check is a general vector-Jacobian product)."""
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1.0, 1.0, tuple(o.shape.as_list())) for o in outs]


def tape_gradients(case: Case, args: Sequence[np.ndarray], cts: Sequence[np.ndarray] | None = None) -> list[Any]:
    """``GradientTape`` gradients of ``case.fn`` at ``args`` w.r.t. ``case.wrt`` (eager), as NumPy or None."""
    xs = tensors(args)
    with tf.GradientTape() as tape:
        for i in case.wrt:
            tape.watch(xs[i])
        outs = outputs_of(case.fn(*xs))
    dtype = next(a.dtype for a in args if a.dtype.kind == "f")
    weights = [tf.constant(c.astype(dtype)) for c in (cts if cts is not None else cotangents_for(outs))]
    grads = tape.gradient(outs, [xs[i] for i in case.wrt], output_gradients=weights)
    return [None if g is None else g.numpy() for g in grads]


def weighted_output(case: Case, args: Sequence[np.ndarray], cts: Sequence[np.ndarray]) -> float:
    """``sum_k sum(out_k * ct_k)``, run eagerly with the NumPy references."""
    outs = outputs_of(case.fn(*tensors(args)))
    return float(sum(np.sum(o.numpy() * c) for o, c in zip(outs, cts)))


def numeric_gradients(case: Case, args: Sequence[np.ndarray], cts: Sequence[np.ndarray], h: float) -> list[np.ndarray]:
    """Central finite differences of :func:`weighted_output` w.r.t. each differentiated argument."""
    grads = []
    for i in case.wrt:
        g = np.zeros_like(args[i])
        for j in np.ndindex(*args[i].shape):
            shifted = [a.copy() for a in args]
            shifted[i][j] += h
            up = weighted_output(case, shifted, cts)
            shifted[i][j] -= 2 * h
            g[j] = (up - weighted_output(case, shifted, cts)) / (2 * h)
        grads.append(g)
    return grads


def compiled_gradients(case: Case, args: Sequence[np.ndarray], cts: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The same gradients computed inside ``tf.function(jit_compile=True)`` (forward and backward in
    one compiled program)."""
    weights = [c.astype(np.float32) for c in cts]

    def grad_fn(*xs: Any) -> Any:
        with tf.GradientTape() as tape:
            for i in case.wrt:
                tape.watch(xs[i])
            outs = outputs_of(case.fn(*xs))
        return tape.gradient(outs, [xs[i] for i in case.wrt], output_gradients=[tf.constant(w) for w in weights])

    grads = tf.function(grad_fn, jit_compile=True)(*tensors(args))
    return [g.numpy() for g in grads]


def as_float32(args: Sequence[np.ndarray]) -> tuple[np.ndarray, ...]:
    return tuple(a.astype(np.float32) if a.dtype.kind == "f" else a for a in args)


def differentiable_ops() -> set[str]:
    """Registry ops that must have a rule and a row: everything not listed as non-differentiable."""
    from popjit.ops import all_ops

    return set(all_ops()) - NOT_DIFFERENTIABLE - OWNED_ELSEWHERE


def is_float(dtype: Any) -> bool:
    return dtypes.as_dtype(dtype).is_floating


def finite_difference(f: Callable[[np.ndarray], float], at: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    """Central differences of a scalar float64 function."""
    at = at.astype(np.float64)
    grad = np.zeros_like(at)
    for idx in np.ndindex(at.shape):
        step = np.zeros_like(at)
        step[idx] = eps
        grad[idx] = (f(at + step) - f(at - step)) / (2 * eps)
    return grad
