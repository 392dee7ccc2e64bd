"""The copy codelet: ``dst[:] = src`` for flat buffers of one dtype.

A plain loop (LLVM turns it into a vectorised copy) instead of NumPy slice assignment, whose
shape check makes Numba compile an error-message formatter: a second of every cold compile.
"""

from __future__ import annotations

import numpy as np

from .jit import codelet


@codelet
def copy(dst: np.ndarray, src: np.ndarray) -> int:
    for i in range(src.size):
        dst[i] = src[i]
    return 0
