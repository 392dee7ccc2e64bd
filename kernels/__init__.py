"""popjit's codelet library: hand-written Numba codelets and scalar helpers.

Installed as ``popjit.kernels``. Generated codelets (fused element-wise loops, reductions) call the
scalar helpers in :mod:`popjit.kernels.math`; whole-tensor codelets such as matmul live in their
own modules. Every function here compiles with Numba in nopython mode and also runs as plain
Python when ``POPJIT_DISABLE_NUMBA=1``.
"""
