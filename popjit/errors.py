"""``tf.errors``-style exception classes.

Every error a user can trigger is one of these (or a ``TypeError``/``ValueError`` where
TensorFlow and Graphcore's SDK raise those), with a message that says what went wrong, where in
the user's code, and what to do.
"""

from __future__ import annotations

import dis
import functools
import sys
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

from popjit.support import (  # noqa: F401  (missing_api_message and multi_ipu_message re-exported)
    mark_stub,
    missing_api_message,
    multi_ipu_message,
    unimplemented_message,
)

_F = TypeVar("_F", bound=Callable[..., Any])

OK = 0
CANCELLED = 1
UNKNOWN = 2
INVALID_ARGUMENT = 3
DEADLINE_EXCEEDED = 4
NOT_FOUND = 5
ALREADY_EXISTS = 6
PERMISSION_DENIED = 7
RESOURCE_EXHAUSTED = 8
FAILED_PRECONDITION = 9
ABORTED = 10
OUT_OF_RANGE = 11
UNIMPLEMENTED = 12
INTERNAL = 13
UNAVAILABLE = 14
DATA_LOSS = 15
UNAUTHENTICATED = 16


class OpError(Exception):
    """Base class of the TensorFlow runtime errors.

    Accepts ``OpError(message)`` or TensorFlow's ``OpError(node_def, op, message)``.
    """

    error_code = UNKNOWN

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if len(args) >= 3:
            node_def, op, message = args[:3]
        else:
            node_def, op = kwargs.get("node_def"), kwargs.get("op")
            message = args[0] if args else kwargs.get("message", "")
        self.node_def = node_def
        self.op = op
        self.message = str(message)
        super().__init__(self.message)

    def __str__(self) -> str:
        return self.message


def _make(name: str, code: int, doc: str) -> type[OpError]:
    return type(name, (OpError,), {"error_code": code, "__doc__": doc})


CancelledError = _make("CancelledError", CANCELLED, "An operation was cancelled.")
UnknownError = _make("UnknownError", UNKNOWN, "An unknown error.")
InvalidArgumentError = _make("InvalidArgumentError", INVALID_ARGUMENT, "An argument was invalid.")
DeadlineExceededError = _make("DeadlineExceededError", DEADLINE_EXCEEDED, "A deadline expired.")
NotFoundError = _make("NotFoundError", NOT_FOUND, "A requested entity was not found.")
AlreadyExistsError = _make("AlreadyExistsError", ALREADY_EXISTS, "An entity already exists.")
PermissionDeniedError = _make("PermissionDeniedError", PERMISSION_DENIED, "Permission denied.")
ResourceExhaustedError = _make("ResourceExhaustedError", RESOURCE_EXHAUSTED, "A resource (tile memory) ran out.")
FailedPreconditionError = _make("FailedPreconditionError", FAILED_PRECONDITION, "The system cannot run this now.")
AbortedError = _make("AbortedError", ABORTED, "An operation was aborted.")
OutOfRangeError = _make("OutOfRangeError", OUT_OF_RANGE, "Iteration past the end, e.g. an exhausted dataset.")
UnimplementedError = _make("UnimplementedError", UNIMPLEMENTED, "An operation is not implemented.")
InternalError = _make("InternalError", INTERNAL, "An internal invariant broke.")
UnavailableError = _make("UnavailableError", UNAVAILABLE, "A service is unavailable.")
DataLossError = _make("DataLossError", DATA_LOSS, "Unrecoverable data loss.")
UnauthenticatedError = _make("UnauthenticatedError", UNAUTHENTICATED, "Not authenticated.")


class VerifyError(InternalError):  # type: ignore[misc, valid-type]
    """An IR failed its verifier: a compiler bug, not a user error."""


class UnimplementedAPIError(UnimplementedError, AttributeError):  # type: ignore[misc, valid-type]
    """A TensorFlow or Graphcore API name popjit does not provide (an AttributeError too, so
    ``hasattr`` and ``getattr(..., default)`` keep working)."""


class UnimplementedImportError(UnimplementedError, ImportError):  # type: ignore[misc, valid-type]
    """``from module import name`` of a name popjit does not provide: an ImportError, as Python raises
    for a missing name, that keeps popjit's message (Python replaces an AttributeError raised there
    with a bare "cannot import name")."""


class UnimplementedModuleError(UnimplementedError, ModuleNotFoundError):  # type: ignore[misc, valid-type]
    """``import module`` of a TensorFlow or Graphcore module popjit does not provide."""


_IMPORT_FROM = dis.opmap["IMPORT_FROM"]


def importing_name() -> bool:
    """True when the code asking for an attribute is a ``from module import name`` statement: the
    nearest frame outside popjit is executing ``IMPORT_FROM``."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__", "").partition(".")[0] == "popjit":
        frame = frame.f_back
    if frame is None:
        return False
    code = frame.f_code.co_code
    return 0 <= frame.f_lasti < len(code) and code[frame.f_lasti] == _IMPORT_FROM


def unimplemented_name(name: str, message: str, module: str | None = None) -> UnimplementedError:
    """The error for a missing API ``name``: an :class:`UnimplementedAPIError` (also an AttributeError;
    with ``module``, its text starts as Python's "module 'm' has no attribute 'name'"), or an
    :class:`UnimplementedImportError` when a ``from module import name`` statement asks."""
    if importing_name():
        return UnimplementedImportError(f"cannot import name '{name}': {message}")
    prefix = f"module '{module}' has no attribute '{name}': " if module else ""
    return UnimplementedAPIError(prefix + message)


def missing_api(module: str, name: str) -> UnimplementedError:
    """The error for ``module.name`` not existing in popjit (see :func:`unimplemented_name`), with the
    reason and advice :mod:`popjit.support`'s table gives for it, or :func:`missing_api_message`'s text."""
    return unimplemented_name(name, unimplemented_message(f"{module}.{name}"))


def missing_attributes(module: str) -> Callable[[str], NoReturn]:
    """A module-level ``__getattr__`` for the TensorFlow or Graphcore namespace ``module`` (as users
    write it, e.g. ``"tf.nn"``): a name popjit lacks raises :func:`missing_api`'s error."""

    def module_getattr(name: str) -> NoReturn:
        if name.startswith("__"):
            raise AttributeError(name)
        raise missing_api(module, name)

    return module_getattr


def unimplemented_stub(name: str) -> Callable[[_F], _F]:
    """Make the decorated function a stub for the API ``name``: calling it raises ``UnimplementedError``
    with the reason :mod:`popjit.support`'s table gives (its body never runs), and it carries the
    marker by which ``popjit check`` knows it is not supported yet."""

    def stub(function: _F) -> _F:
        @functools.wraps(function)
        def refuse(*args: Any, **kwargs: Any) -> NoReturn:
            raise UnimplementedError(unimplemented_message(name))

        return mark_stub(name)(refuse)

    return stub
