"""Bit-level conversions as LLVM intrinsics (vectorisable), with NumPy fallbacks.

float16 tensors live in device memory as uint16 bit patterns because Numba has no float16
type; codelets widen them to float32 with :func:`f16_to_f32` and narrow with :func:`f32_to_f16`
(round to nearest even), which compile to single ``vcvtph2ps``/``vcvtps2ph`` instructions.

:func:`f32_bits`, :func:`f32_from_bits` and :func:`f64_bits` are plain bitcasts; the scalar math in
:mod:`popjit.kernels.math` uses them for exponent/mantissa extraction and 2^k scaling. All of them
compile to no instruction or one, so loops that use them still vectorise.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from popjit import config


def _py_f16_to_f32(x):
    return np.float32(np.uint16(x).view(np.float16))


def _py_f32_to_f16(x):
    return np.float16(np.float32(x)).view(np.uint16)


def _py_f32_from_bits(x):
    return np.int64(x).astype(np.int32).view(np.float32)  # low 32 bits, as the intrinsic


def _py_f32_bits(x):
    return np.float32(x).view(np.int32)


def _py_f64_bits(x):
    return np.float64(x).view(np.int64)


if config.get("DISABLE_NUMBA"):
    f16_to_f32 = _py_f16_to_f32
    f32_to_f16 = _py_f32_to_f16
    f32_from_bits = _py_f32_from_bits
    f32_bits = _py_f32_bits
    f64_bits = _py_f64_bits
else:
    from llvmlite import ir
    from numba import types
    from numba.extending import intrinsic

    def _unary_intrinsic(doc: str, sig: types.Signature, emit: Callable) -> Callable:
        """An intrinsic of fixed signature whose body is ``emit(builder, value)``."""

        def typer(typingctx, x):
            def codegen(context, builder, signature, args):
                return emit(builder, args[0])

            return sig, codegen

        typer.__doc__ = doc
        return intrinsic(typer)

    f16_to_f32 = _unary_intrinsic("uint16 bit pattern of a half → float32.", types.float32(types.uint16),
                                  lambda b, v: b.fpext(b.bitcast(v, ir.HalfType()), ir.FloatType()))
    f32_to_f16 = _unary_intrinsic("float32 → uint16 bit pattern of the nearest half.", types.uint16(types.float32),
                                  lambda b, v: b.bitcast(b.fptrunc(v, ir.HalfType()), ir.IntType(16)))
    f32_bits = _unary_intrinsic("The int32 bit pattern of a float32.", types.int32(types.float32),
                                lambda b, v: b.bitcast(v, ir.IntType(32)))
    f64_bits = _unary_intrinsic("The int64 bit pattern of a float64.", types.int64(types.float64),
                                lambda b, v: b.bitcast(v, ir.IntType(64)))

    @intrinsic
    def f32_from_bits(typingctx, x):
        """Reinterpret an int32 bit pattern as float32 (wider integers: their low 32 bits)."""
        if not isinstance(x, types.Integer):
            return None
        sig = types.float32(x)

        def codegen(context, builder, signature, args):
            v = args[0]
            if v.type.width > 32:
                v = builder.trunc(v, ir.IntType(32))
            elif v.type.width < 32:
                v = builder.sext(v, ir.IntType(32)) if signature.args[0].signed else builder.zext(v, ir.IntType(32))
            return builder.bitcast(v, ir.FloatType())

        return sig, codegen
