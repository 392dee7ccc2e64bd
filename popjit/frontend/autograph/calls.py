"""Which callables autograph converts, and the entry points that convert them: :func:`convert`,
:func:`to_code`, :func:`do_not_convert`, and ``converted_call``/``for_iterable``, through which
converted code makes every call.

Converted code is cached per code object, converted functions per function object. Only user code
is converted: functions defined outside popjit, the ``kernels`` package, the standard library and
site-packages, that are neither lambdas nor generators nor coroutines.
"""

from __future__ import annotations

import builtins
import functools
import inspect
import logging
import os
import sys
import sysconfig
import threading
import types
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import popjit
from popjit.frontend import array_ops
from popjit.frontend.autograph.nodes import _AG
from popjit.frontend.autograph.runtime import _is_graph_value, _Range
from popjit.frontend.autograph.transform import _Converted, _NotConvertible, _transform
from popjit.frontend.tracing import current_trace

log = logging.getLogger("popjit")

# ============================================================================================
# Public API
# ============================================================================================


def convert(fn: Callable) -> Callable:
    """``fn`` with its Python control flow on tensors rewritten into graph control flow.

    Functions, methods, ``functools.partial`` objects and callable objects of user classes are
    converted; anything that cannot be (no source, library code, lambdas) is returned unchanged.
    """
    return _target(fn)


def to_code(fn: Callable) -> str:
    """The source autograph generates for ``fn`` (a function, method or ``tf.function``)."""
    fn = getattr(fn, "python_function", fn)
    while isinstance(fn, (functools.partial, types.MethodType)):
        fn = fn.func if isinstance(fn, functools.partial) else fn.__func__
    if not isinstance(fn, types.FunctionType):
        raise ValueError(f"autograph converts Python functions, not {type(fn).__name__}")
    entry = _converted_code(fn)
    if isinstance(entry, str):
        raise ValueError(f"autograph cannot convert {fn.__qualname__}: {entry}")
    return entry.source


def do_not_convert(fn: Callable) -> Callable:
    """Decorator: autograph calls ``fn`` as written (``tf.autograph.experimental.do_not_convert``)."""
    fn.__pj_do_not_convert__ = True  # type: ignore[attr-defined]
    return fn


def converted_call(f: Any, args: tuple, kwargs: dict) -> Any:
    """Call ``f``, converting it first if it is user code (every call in converted code goes here)."""
    if f is builtins.range and current_trace() is not None and any(_is_graph_value(a) for a in args):
        return array_ops.range_(*args)
    return _target(f)(*args, **kwargs)


# ============================================================================================
# Which callables are converted, and the caches
# ============================================================================================


_CODE_CACHE: dict[types.CodeType, _Converted | str] = {}
#: Held while a function's code is converted. why: CPython 3.11's AST compiler is not thread-safe (two
#: threads converting at once raised "SystemError: AST constructor recursion depth mismatch", and the
#: thread that lost ran its function unconverted, a second program), and one conversion per code suffices.
_CONVERT_LOCK = threading.Lock()
_FUNCTION_CACHE: weakref.WeakKeyDictionary[Callable, Callable | None] = weakref.WeakKeyDictionary()
# why: `ag__` in converted code is the package, whose namespace re-exports the runtime (it is in
# sys.modules, perhaps still initialising, whenever this submodule is imported)
_AG_CELL = types.CellType(sys.modules[__package__])
_PKG_DIR = os.path.dirname(os.path.abspath(popjit.__file__))
_LIBRARY_PREFIXES = tuple(
    os.path.abspath(p) + os.sep
    for p in {_PKG_DIR, os.path.join(os.path.dirname(_PKG_DIR), "kernels"),
              sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"]}
)
_NON_CODE_FLAGS = (inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR
                   | inspect.CO_ITERABLE_COROUTINE)


def _target(f: Any) -> Any:
    """What to call instead of ``f``: its converted version, or ``f`` itself."""
    if isinstance(f, types.FunctionType):
        return _convert_function(f)
    if isinstance(f, types.MethodType):
        func = _target(f.__func__)
        return f if func is f.__func__ else types.MethodType(func, f.__self__)
    if isinstance(f, functools.partial):
        func = _target(f.func)
        return f if func is f.func else functools.partial(func, *f.args, **f.keywords)
    if isinstance(f, (type, types.BuiltinFunctionType, types.BuiltinMethodType)):
        return f
    call = type(f).__call__ if callable(f) else None
    if isinstance(call, types.FunctionType):
        converted = _convert_function(call)
        return f if converted is call else types.MethodType(converted, f)
    return f


def _convert_function(fn: types.FunctionType) -> Callable:
    try:
        cached = _FUNCTION_CACHE[fn]
        return fn if cached is None else cached
    except KeyError:
        pass
    converted = _instantiate(fn) if _wants_conversion(fn) else fn
    # why: storing fn itself as the value would keep the weak key alive forever
    _FUNCTION_CACHE[fn] = None if converted is fn else converted
    return converted


def _wants_conversion(fn: types.FunctionType) -> bool:
    if getattr(fn, "__pj_converted__", False) or getattr(fn, "__pj_do_not_convert__", False):
        return False
    code = fn.__code__
    return code.co_name != "<lambda>" and not code.co_flags & _NON_CODE_FLAGS and _is_user_file(code.co_filename)


def _is_user_file(filename: str) -> bool:
    if filename.startswith(("<popjit", "<frozen")):
        return False
    path = os.path.abspath(filename)
    parts = path.split(os.sep)
    return not path.startswith(_LIBRARY_PREFIXES) and "site-packages" not in parts and "dist-packages" not in parts


def _instantiate(fn: types.FunctionType) -> Callable:
    """A new function object running the converted code with ``fn``'s globals, closure and defaults."""
    entry = _converted_code(fn)
    if isinstance(entry, str):
        log.debug("autograph: %s runs as written: %s", fn.__qualname__, entry)
        return fn
    cells = dict(zip(fn.__code__.co_freevars, fn.__closure__ or ()))
    cells[_AG] = _AG_CELL
    new = types.FunctionType(entry.code, fn.__globals__, fn.__name__, fn.__defaults__,
                             tuple(cells[name] for name in entry.code.co_freevars))
    new.__kwdefaults__ = dict(fn.__kwdefaults__) if fn.__kwdefaults__ else None
    new.__dict__.update(fn.__dict__)
    new.__qualname__ = fn.__qualname__
    new.__module__ = fn.__module__
    new.__doc__ = fn.__doc__
    new.__annotations__ = fn.__annotations__
    new.__pj_converted__ = True  # type: ignore[attr-defined]
    return new


def _converted_code(fn: types.FunctionType) -> _Converted | str:
    """The converted code object for ``fn``'s code (cached), or why there is none."""
    code = fn.__code__
    entry = _CODE_CACHE.get(code)
    if entry is not None:
        return entry
    with _CONVERT_LOCK:
        entry = _CODE_CACHE.get(code)  # why: another thread may have converted it while this one waited
        if entry is None:
            try:
                entry = _transform(fn)
            except _NotConvertible as e:
                entry = str(e)
            except Exception as e:  # why: a converter bug must not stop the program; it runs as written
                log.warning("autograph could not convert %s (it runs as written): %r", fn.__qualname__, e)
                entry = f"internal error: {e!r}"
            _CODE_CACHE[code] = entry
    return entry

# ============================================================================================
# The iterable of a `for` whose header is a call
# ============================================================================================


_TF_RANGE_SIGNATURE = inspect.signature(array_ops.range_)


def for_iterable(func: Any, args: tuple, kwargs: dict) -> Any:
    """The iterable of a ``for`` whose header is a call: ``range``/``tf.range`` stay lazy while tracing."""
    tracing = current_trace() is not None
    if func is builtins.range and tracing and not kwargs and any(_is_graph_value(a) for a in args):
        start, limit, delta = _range_args(args)
        return _Range(start, limit, delta, None)
    if func is array_ops.range_ and tracing:
        bound = _TF_RANGE_SIGNATURE.bind(*args, **kwargs)
        bound.apply_defaults()
        a = bound.arguments
        start, limit = (0, a["start"]) if a["limit"] is None else (a["start"], a["limit"])
        return _Range(start, limit, a["delta"], a["dtype"])
    return converted_call(func, args, kwargs)


def _range_args(args: Sequence[Any]) -> tuple[Any, Any, Any]:
    """(start, limit, delta) from ``range``'s positional forms."""
    if len(args) == 1:
        return 0, args[0], 1
    return args[0], args[1], args[2] if len(args) > 2 else 1
