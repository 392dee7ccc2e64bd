"""The bits of a floating-point trap mask, as codelets and the engine report them (no Numba here, so
the runtime can name traps without compiling anything)."""

#: Invalid operation (a NaN from non-NaN operands), division by zero, overflow.
INV, DIV0, OFLO = 1, 2, 4
