"""How the native engine calls its callees (codelets and library kernels).

A callee is ``int64 callee(arguments...)``: a buffer argument is a *pointer* to Numba's array
structure for it, which the engine fills once per buffer in its entry block; every other argument
(int64, float64, bool) is passed by value. Generated codelets written as LLVM IR
(:mod:`popjit.codegen.direct`) take their buffers that way themselves; functions compiled by
Numba's pipeline, which take the structures by value, are called through a small entry point
(:func:`pointer_entry`) that loads them.

why pointers: by value, each buffer is the structure's seven machine words at every call site.
The engine is compiled without optimisation (:attr:`popjit.codegen.machine.Part.optimize`), which
copies them word by word: the Keras CNN's engine was 66 KB of machine code and 0.13 s of code
emission that way, against 35 KB and 0.04 s with pointers.
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir
from numba.core import types

_I32 = ir.IntType(32)
#: The field of Numba's array structure holding the data pointer.
DATA_FIELD = 4


def parameter_type(context: Any, numba_type: Any) -> ir.Type:
    """The LLVM type a callee receives an argument of ``numba_type`` as."""
    value_type = context.get_value_type(numba_type)
    return value_type.as_pointer() if isinstance(numba_type, types.Array) else value_type


def callee_type(context: Any, argument_types: tuple) -> ir.FunctionType:
    """``int64 (parameters...)`` of a callee taking ``argument_types``."""
    return ir.FunctionType(ir.IntType(64), [parameter_type(context, t) for t in argument_types])


def array_data(builder: ir.IRBuilder, pointer: ir.Value) -> ir.Value:
    """The data pointer of the array structure ``pointer`` points to."""
    return builder.load(builder.gep(pointer, [_I32(0), _I32(DATA_FIELD)]))


def pointer_entry(context: Any, module: ir.Module, symbol: str, target: str, argument_types: tuple) -> None:
    """Define ``symbol`` in ``module``: a callee taking ``argument_types`` as the engine passes them,
    which loads the array structures and calls ``target`` (a function taking them by value)."""
    by_value = ir.FunctionType(ir.IntType(64), [context.get_value_type(t) for t in argument_types])
    callee = ir.Function(module, by_value, target)
    entry = ir.Function(module, callee_type(context, argument_types), symbol)
    builder = ir.IRBuilder(entry.append_basic_block())
    values = [builder.load(a) if isinstance(t, types.Array) else a for a, t in zip(entry.args, argument_types)]
    builder.ret(builder.call(callee, values))
