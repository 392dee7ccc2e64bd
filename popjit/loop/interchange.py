"""Which ``Repeat`` loops the engine may run chunk by chunk (loop interchange), and in what chunks.

A loop such as ``repeat 20: x[i] = f(x[i], a[0])`` streams all of ``x`` through memory once per
iteration: 32 MB of traffic per iteration for 2^22 float32, which on a shared machine is the
slowest and least steady part of the run. When every element of the loop's state depends only on
the same element of that state, the loop over iterations and the codelets' loop over elements can
be swapped: each thread takes a chunk of elements small enough to stay in its cache and runs every
iteration on it (:mod:`popjit.codegen.native`). Each element still goes through exactly the same
operations in the same order, so the results are bit for bit those of the loop as written; only
the order in which different elements are visited changes.

That holds for a body made only of element-wise kernels over one domain where every buffer the
body writes is stored, and loaded, at the domain's own flat index (``i0 * n1 + i1`` ...), and no
loop-written buffer is visible to anyone should the run stop half way (Ctrl-C, which now stops
between chunks instead of between iterations): the body writes only results and temporaries.
"""

from __future__ import annotations

import math

from popjit.ir.loop import ILin, IVar, Kernel, Repeat

CHUNK_BYTES = 1 << 17
"""The bytes of loop-varying buffer data a chunk covers: well inside a core's L2 (256 KiB and up on
current x86-64 and AArch64 cores), with room for the other thread's chunk where L2 is shared."""


def interchangeable(loop: Repeat) -> bool:
    """Whether ``loop``'s iterations may run chunk by chunk (see the module docstring); the engine
    also requires every call of the body to be split over threads, trap-free and not rounding
    stochastically."""
    kernels = [k for k in loop.body if isinstance(k, Kernel) and k.reduce is None]
    if not kernels or len(kernels) != len(loop.body):
        return False
    domain = kernels[0].domain
    if not domain or any(k.domain != domain for k in kernels):
        return False
    written = {b for k in kernels for b in k.writes()}
    if any(b.kind not in ("out", "temp") for b in written):
        return False
    identity = _flat_identity(domain)
    return all(_indices_of(k, written) <= {identity} for k in kernels)


def chunk_rows(loop: Repeat) -> int:
    """Iterations of the body's outermost loop per chunk: :data:`CHUNK_BYTES` of the buffers the body
    reads or writes at loop-varying indices (at least one row). For an :func:`interchangeable` loop."""
    kernels = [k for k in loop.body if isinstance(k, Kernel)]
    row = math.prod(kernels[0].domain[1:])
    varying = {ld.buf for k in kernels for ld in k.loads() if ld.index.terms}
    varying |= {b for k in kernels for b in k.writes()}
    row_bytes = row * sum(b.dtype.np.itemsize for b in varying)
    return max(1, CHUNK_BYTES // max(1, row_bytes))


Form = tuple[frozenset, int]
"""An index as (its terms, its constant), the terms of size-1 axes left out (their variable is always 0)."""


def _flat_identity(domain: tuple[int, ...]) -> Form:
    """``i0 * (n1 n2 ...) + i1 * (n2 ...) + ...``: the flat index of a row-major domain."""
    terms = {(IVar(f"i{j}"), math.prod(domain[j + 1:])) for j, n in enumerate(domain) if n != 1}
    return frozenset(terms), 0


def _normal(index: ILin, domain: tuple[int, ...]) -> Form:
    """``index`` as a :data:`Form`."""
    size_one = {IVar(f"i{j}") for j, n in enumerate(domain) if n == 1}
    return frozenset(t for t in index.terms if t[0] not in size_one), index.const


def _indices_of(k: Kernel, buffers: set) -> set[Form]:
    """The indices (normalised) at which ``k`` stores into or loads from any of ``buffers``."""
    stored = {_normal(s.index, k.domain) for s in k.stores}
    return stored | {_normal(ld.index, k.domain) for ld in k.loads() if ld.buf in buffers}


