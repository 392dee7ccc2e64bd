"""Where in the user's code something happened.

Errors raised while tracing name the user's file and line, not popjit's. A frame belongs to
the user when its file is outside the popjit package (and outside the Python and NumPy
libraries that user code calls through).
"""

from __future__ import annotations

import linecache
import os
import sys
from dataclasses import dataclass
from typing import Any

_PKG_DIR = os.path.dirname(os.path.abspath(__file__))
_KERNELS_DIR = os.path.join(os.path.dirname(_PKG_DIR), "kernels")
_SKIP_PREFIXES = (_PKG_DIR + os.sep, _KERNELS_DIR + os.sep, os.path.dirname(os.__file__) + os.sep)


@dataclass(frozen=True)
class SourceLoc:
    """A file, line and function in user code."""

    file: str
    line: int
    function: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"

    def code(self) -> str:
        return linecache.getline(self.file, self.line).strip()

    def describe(self) -> str:
        code = self.code()
        return f'File "{self.file}", line {self.line}, in {self.function}' + (f"\n    {code}" if code else "")


def _is_library(filename: str) -> bool:
    if filename.startswith("<popjit"):
        return True
    return os.path.abspath(filename).startswith(_SKIP_PREFIXES) or ("site-packages" in filename and (
        f"{os.sep}numpy{os.sep}" in filename or f"{os.sep}numba{os.sep}" in filename
    ))


def user_location(skip: int = 1) -> SourceLoc | None:
    """The innermost stack frame in user code, or None if there is none."""
    frame = sys._getframe(skip)
    while frame is not None:
        fn = frame.f_code.co_filename
        if not _is_library(fn):
            return SourceLoc(fn, frame.f_lineno, _user_function_name(frame))
        frame = frame.f_back
    return None


def _user_function_name(frame: Any) -> str:
    """The user's name for the function running ``frame``: autograph runs loop and branch bodies as
    generated ``_pj_*`` functions, so for those it is the name of the function that contains them."""
    while frame is not None:
        name = frame.f_code.co_name
        if not name.startswith("_pj_") and not _is_library(frame.f_code.co_filename):
            return name
        frame = frame.f_back
    return "<autograph>"


def where(loc: SourceLoc | None = None) -> str:
    """A sentence fragment naming the user's code location, for error messages."""
    loc = loc or user_location(2)
    return f"\n  at {loc.describe()}" if loc else ""
