"""The compile service: graph IR in, :class:`Executable` out.

    compiler.py     the one place that decides the order of passes and stages
    cache.py        executables kept in memory by graph fingerprint and target
    executable.py   a compiled program: its IRs, its schedule, its native engine

Below it: graph and loop passes, the schedule, codegen. Above it: the runtime (devices, host
feeds, eager ops), which asks this layer for executables and runs them.
"""

from popjit.pipeline.cache import compile_cached  # noqa: F401
from popjit.pipeline.compiler import compile_graph, lower_graph, optimize_graph  # noqa: F401
from popjit.pipeline.executable import Executable  # noqa: F401
