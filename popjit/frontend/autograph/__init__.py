"""Autograph: Python control flow on tensors becomes graph loops and conditionals.

:func:`convert` parses a function's source, rewrites its ``for``, ``while``, ``if``, ``and``,
``or``, ``not``, conditional expressions and calls into calls of the runtime functions this
package exports (converted code reaches them as ``ag__.<name>``, ``ag__`` being this package),
and compiles the result with the original file name and line numbers, so a tracing error names
the user's line. Each rewritten statement decides at trace time, from the values it sees, what it
becomes:

=========================================  ==================================================
Python                                     while tracing
=========================================  ==================================================
``for i in tf.range(a, b, d)``             one ``while`` node; ``trip_count`` when a, b, d are
                                           known while tracing
``for i in range(n)``                      the same if ``n`` is a tensor; a Python (unrolled)
                                           loop if it is a Python int
``for x in t`` (``t`` a tensor)            a counted loop over dim 0 that gathers ``t[i]``
``for x in <Python iterable>``             a Python loop
``while <cond>:``                          a ``while`` node if ``cond`` is a tensor, else Python
                                           (iterations before it first is a tensor, as in
                                           ``while True: … break``, stay unrolled)
``if``/``elif``/``else``, ``a if p else b``  an ``if`` node if the predicate is a tensor, else
                                           Python
``and``/``or``/``not`` on tensors          ``logical_and``/``logical_or``/``logical_not``
``break``/``continue`` in a loop           boolean flags the loop carries
``return`` in the function's last ``if``   an ``if`` node whose branches return the value
calls of user functions and methods        converted the same way (once per code object)
=========================================  ==================================================

**Loop-carried state** is the set of Python locals a loop body (or branch) assigns that are live
afterwards or in the next iteration (a liveness analysis over the function). Each loop body
becomes a nested ``def`` that declares those names ``nonlocal``; ``get_state``/``set_state``
closures read and write them. Tensors, Python numbers (converted to tensors, as TensorFlow does)
and structures of them are carried; other objects (models, optimizers, iterators, unmodified
lists) pass through untouched, and replacing one in a graph loop is an error. A name first
assigned inside a graph loop or in one branch of a graph conditional and used after it is an
error naming the variable and the line.

**Not supported** on tensors (each raises :class:`UnsupportedControlFlowError` naming the
statement and line, and works unchanged on Python values): ``return`` inside a loop, or inside an
``if`` that is not the last statement of the function (an early ``return`` whose ``if`` always
returns is fine: what follows becomes its ``else``); ``yield``/``await``/``global``/``nonlocal``
inside a converted statement; ``:=`` in a ``while`` condition; a ``break`` on a tensor in a loop
over a Python iterable. ``print()`` stays Python's ``print``: inside a traced function it prints
the symbolic tensor once, while tracing. Python objects mutated inside a graph loop
(``list.append``) are mutated once, while tracing. Functions that popjit itself calls back (the
bodies given to ``tf.while_loop``/``tf.cond``, ``strategy.run``) are converted only if the caller
converts them (:func:`convert`).

``to_code(fn)`` returns the converted source; ``POPJIT_DEBUG>=2`` prints it at each conversion.
Functions without source (REPL lambdas, builtins, C functions), generators, lambdas and library
code (popjit, the standard library, site-packages) are never converted.

The modules: :mod:`.calls` (which callables are converted, the caches, ``convert``/``to_code``/
``converted_call``), :mod:`.transform` (source to converted code; passes 3 and 4), :mod:`.lowering`
(pass 1), :mod:`.analysis` (bound and read names, liveness: pass 2), :mod:`.nodes` (building
generated AST), :mod:`.runtime` and :mod:`.statements` (what converted code calls), :mod:`.errors`.
"""

from __future__ import annotations

from popjit.frontend.autograph.calls import (  # noqa: F401  (for_iterable: in the `ag__` namespace)
    convert,
    converted_call,
    do_not_convert,
    for_iterable,
    to_code,
)
from popjit.frontend.autograph.errors import LoopVariableError, UnsupportedControlFlowError
from popjit.frontend.autograph.runtime import (  # noqa: F401  (the `ag__` namespace converted code calls)
    Undefined,
    and_,
    ld,
    not_,
    not_any,
    or_,
    python_condition,
    python_iterable,
)
from popjit.frontend.autograph.statements import for_stmt, if_exp, if_stmt, while_stmt  # noqa: F401

__all__ = [
    "LoopVariableError",
    "Undefined",
    "UnsupportedControlFlowError",
    "convert",
    "converted_call",
    "do_not_convert",
    "to_code",
]
