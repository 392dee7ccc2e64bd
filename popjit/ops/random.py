"""Random ops: counter-based (Philox-4x32-10), so each element is a pure function of its index.

``random_uniform(seed, counter)`` and ``random_normal(seed, counter)`` take the key as an int32
``[2]`` tensor and the call counter as an int32 scalar, and produce ``shape`` elements: element
``i`` is Philox at key ``seed`` and counter ``(i, counter, 0)``. They lower to one element-wise
``philox`` scalar op over the output's flat index, which fuses with whatever consumes it and
parallelises like any element-wise loop. The frontend (:mod:`popjit.frontend.random_ops`)
decides the key and the counter: stateless ops pass the user's seed and 0, stateful ops pass a
seed pair fixed when the op is created and a counter that advances on every call (a hidden
variable inside a compiled function).

The NumPy functions here are the bit-exact twin of :mod:`popjit.kernels.random` (uniform and
integer results are identical bit for bit; normal ones go through float64 ``log``/``cos`` and
agree after rounding to float32 except, very rarely, in the last bit).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from popjit import dtypes
from popjit.dtypes import DType
from popjit.errors import InvalidArgumentError
from popjit.ir.graph import Aval
from popjit.ir.lazy import Lazy
from popjit.ir.loop import Apply, Const, IndexValue, as_index, flat_index, row_major_strides
from popjit.ir.opdef import OTHER, REGISTRY, SOURCE, ElementCost, OpDef, register
from popjit.ops.elementwise import no_gradient

_M32 = np.uint64(0xFFFFFFFF)
_MUL = (np.uint64(0xD2511F53), np.uint64(0xCD9E8D57))
_WEYL = (np.uint64(0x9E3779B9), np.uint64(0xBB67AE85))
_S32 = np.uint64(32)

UNIFORM_DTYPES = (dtypes.float16, dtypes.float32, dtypes.float64, dtypes.int32, dtypes.int64)
NORMAL_DTYPES = (dtypes.float16, dtypes.float32, dtypes.float64)

# ----------------------------------------------------------------------------------------------
# The generator in NumPy (bit-exact twin of popjit.kernels.random)


def _u32(x: Any) -> np.ndarray:
    return (np.asarray(x).astype(np.int64) & np.int64(0xFFFFFFFF)).astype(np.uint64)


def philox(k0: Any, k1: Any, flat: Any, call: Any, lane: Any = 0) -> tuple[np.ndarray, np.ndarray]:
    """Words 0 and 1 of Philox-4x32-10 (uint64 arrays below 2**32), broadcasting the arguments."""
    key0, key1 = _u32(k0), _u32(k1)
    f = np.asarray(flat).astype(np.int64)
    c0, c1, c2, c3 = np.broadcast_arrays(_u32(f), _u32(f >> 32), _u32(call), _u32(lane))
    c0, c1, c2, c3 = (c.copy() for c in (c0, c1, c2, c3))
    for _ in range(10):
        p0 = _MUL[0] * c0
        p1 = _MUL[1] * c2
        c0, c1, c2, c3 = (p1 >> _S32) ^ c1 ^ key0, p1 & _M32, (p0 >> _S32) ^ c3 ^ key1, p0 & _M32
        key0 = (key0 + _WEYL[0]) & _M32
        key1 = (key1 + _WEYL[1]) & _M32
    return c0, c1


def _box_muller(x0: np.ndarray, x1: np.ndarray) -> np.ndarray:
    u1 = (x0.astype(np.float64) + 0.5) * 2.0**-32
    u2 = x1.astype(np.float64) * 2.0**-32
    return np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)


def uniform_bits_to_float(x0: np.ndarray, x1: np.ndarray, dtype: DType) -> np.ndarray:
    """Philox words → floats in [0, 1) with as many random bits as ``dtype`` holds."""
    if dtype == dtypes.float64:
        bits = ((x0 << np.uint64(21)) | (x1 >> np.uint64(11))) & np.uint64((1 << 53) - 1)
        return bits.astype(np.float64) * 2.0**-53
    if dtype == dtypes.float16:
        return ((x0 >> np.uint64(21)).astype(np.float64) * 2.0**-11).astype(np.float16)
    return ((x0 >> np.uint64(8)).astype(np.float64) * 2.0**-24).astype(np.float32)


def sample(dist: str, k0: Any, k1: Any, flat: Any, call: Any, dtype: DType, lo: int = 0, span: int = 1) -> np.ndarray:
    """Elements of a random tensor: ``dist`` is ``uniform``, ``int``, ``normal`` or ``truncated``."""
    x0, x1 = philox(k0, k1, flat, call)
    if dist == "uniform":
        return uniform_bits_to_float(x0, x1, dtype).astype(dtype.np)
    if dist == "int":
        return (np.int64(lo) + (x0 % np.uint64(span)).astype(np.int64)).astype(dtype.np)
    z = _box_muller(x0, x1)
    if dist == "truncated":
        lane = 0
        bad = np.abs(z) > 2.0
        while np.any(bad):
            lane += 1
            y0, y1 = philox(k0, k1, flat, call, lane)
            z = np.where(bad, _box_muller(y0, y1), z)
            bad = bad & (np.abs(z) > 2.0)
    return z.astype(dtype.np)


# ----------------------------------------------------------------------------------------------
# The scalar op generated codelets call: philox(k0, k1, flat, call[, lo, span])


def _philox_infer(*avals: Aval, dist: str, dtype: DType) -> Aval:
    return Aval(avals[2].shape, dtype)


def _philox_ref(k0: np.ndarray, k1: np.ndarray, flat: np.ndarray, call: np.ndarray, *extra: np.ndarray,
                dist: str, dtype: DType) -> np.ndarray:
    lo, span = (int(np.ravel(e)[0]) for e in extra) if extra else (0, 1)
    return sample(dist, k0, k1, flat, call, dtype, lo, span)


_FLOAT_FN = {"float16": "uniform_f16", "float32": "uniform_f32", "float64": "uniform_f64"}


def _philox_scalar(args: list[str], in_dtype: DType, dist: str, dtype: DType) -> str:
    if dist == "uniform":
        return f"kr.{_FLOAT_FN[dtype.name]}({', '.join(args)})"
    if dist == "int":
        return f"kr.uniform_int({', '.join(args)})"
    return f"kr.{'normal' if dist == 'normal' else 'truncated_normal'}({', '.join(args)})"


# Philox-4x32-10 is 20 32x32→64-bit multiplies and ~40 ALU ops per element; the IPU's integer
# pipeline does one per cycle. (est: no published poplibs figure for this vertex.)
_PHILOX_COST = ElementCost(float=(64, 1, False), half=(64, 1, False), int=(64, 1, False), flops=0)
# Kind OTHER, not element-wise: it only ever appears inside loop IR (never as a graph node), so
# graph passes and the element-wise op tables leave it alone.
register(OpDef("philox", OTHER, _philox_infer, _philox_ref, None, _philox_scalar, _PHILOX_COST,
               doc="scalar Philox-4x32-10 sample at (key, flat index, call); used by the random ops' lowering"))

# ----------------------------------------------------------------------------------------------
# Graph ops


def _check_key(seed: Aval, counter: Aval, op: str) -> None:
    if seed.shape != (2,) or not seed.dtype.is_integer:
        raise InvalidArgumentError(f"seed must have shape [2] and an integer dtype, not {seed} [Op:{op}]")
    if counter.shape != () or not counter.dtype.is_integer:
        raise InvalidArgumentError(f"the call counter must be an integer scalar, not {counter} [Op:{op}]")


def _shape_of(shape: Any, op: str) -> tuple[int, ...]:
    shape = tuple(int(d) for d in shape)
    if any(d < 0 for d in shape):
        raise InvalidArgumentError(f"Dimension -1 must be >= 0 in shape {list(shape)} [Op:{op}]")
    return shape


def _uniform_infer(seed: Aval, counter: Aval, shape: tuple[int, ...], dtype: DType, lo: int = 0,
                   span: int = 0) -> Aval:
    _check_key(seed, counter, "RandomUniform")
    if dtype not in UNIFORM_DTYPES:
        raise InvalidArgumentError(f"random uniform does not support {dtype.name}; use one of "
                                   f"{', '.join(d.name for d in UNIFORM_DTYPES)} [Op:RandomUniform]")
    if dtype.is_integer and not 0 < span <= 2**32:
        raise InvalidArgumentError(f"Need minval < maxval (and maxval - minval <= 2**32): got range {span} "
                                   "[Op:RandomUniformInt]")
    return Aval(_shape_of(shape, "RandomUniform"), dtype)


def _normal_infer(seed: Aval, counter: Aval, shape: tuple[int, ...], dtype: DType, truncated: bool = False) -> Aval:
    _check_key(seed, counter, "RandomStandardNormal")
    if dtype not in NORMAL_DTYPES:
        raise InvalidArgumentError(f"random normal does not support {dtype.name}; use one of "
                                   f"{', '.join(d.name for d in NORMAL_DTYPES)} [Op:RandomStandardNormal]")
    return Aval(_shape_of(shape, "RandomStandardNormal"), dtype)


def _uniform_ref(seed: np.ndarray, counter: np.ndarray, shape: tuple[int, ...], dtype: DType, lo: int = 0,
                 span: int = 0) -> np.ndarray:
    flat = np.arange(int(np.prod(shape, dtype=np.int64)), dtype=np.int64)
    dist = "int" if dtype.is_integer else "uniform"
    return sample(dist, seed[0], seed[1], flat, counter, dtype, lo, span).reshape(shape)


def _normal_ref(seed: np.ndarray, counter: np.ndarray, shape: tuple[int, ...], dtype: DType,
                truncated: bool = False) -> np.ndarray:
    flat = np.arange(int(np.prod(shape, dtype=np.int64)), dtype=np.int64)
    dist = "truncated" if truncated else "normal"
    return sample(dist, seed[0], seed[1], flat, counter, dtype).reshape(shape)


def _lower_random(dist_of: Any) -> Any:
    def lower(ctx: Any, node: Any, args: list[Lazy]) -> list[Lazy]:
        seed, counter = args
        aval = node.outputs[0].aval
        attrs = node.attrs
        dist = dist_of(attrs)
        strides = row_major_strides(aval.shape)
        extra: tuple[Const, ...] = ()
        if dist == "int":
            extra = (Const(int(attrs["lo"]), dtypes.int64), Const(int(attrs["span"]), dtypes.int64))
        frozen = (("dist", dist), ("dtype", aval.dtype))

        def build(idx: tuple) -> Any:
            k0 = seed.build((as_index(0),))
            k1 = seed.build((as_index(1),))
            flat = IndexValue(flat_index(idx, strides), dtypes.int64)
            return Apply("philox", (k0, k1, flat, counter.build(()), *extra), aval.dtype, frozen)

        return [Lazy(aval.shape, aval.dtype, build, None, (node.op,))]

    return lower


register(OpDef("random_uniform", SOURCE, _uniform_infer, _uniform_ref,
               _lower_random(lambda a: "int" if a["dtype"].is_integer else "uniform"), cost=_PHILOX_COST,
               doc="uniform [0, 1) floats, or integers in [lo, lo + span), from Philox at (seed, counter)"))
register(OpDef("random_normal", SOURCE, _normal_infer, _normal_ref,
               _lower_random(lambda a: "truncated" if a.get("truncated") else "normal"), cost=_PHILOX_COST,
               doc="standard normal (Box-Muller; truncated to |x| <= 2 by retrying) from Philox at (seed, counter)"))


# Gradient rules: no gradient flows through randomness (TF's NotDifferentiable); the inputs are keys and counters.
for _name in ('philox', 'random_uniform', 'random_normal'):
    REGISTRY[_name].vjp = no_gradient
