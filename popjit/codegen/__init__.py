"""Code generation: loop-IR kernels to size-independent Numba codelets, programs to one engine
function, and their compilation with an on-disk cache."""
