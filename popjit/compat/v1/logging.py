"""``tf.compat.v1.logging``: TensorFlow 1's logging functions, on the ``popjit`` logger."""

from __future__ import annotations

import logging as _logging
from typing import Any

DEBUG = _logging.DEBUG
INFO = _logging.INFO
WARN = WARNING = _logging.WARNING
ERROR = _logging.ERROR
FATAL = _logging.FATAL

_log = _logging.getLogger("popjit")


def set_verbosity(v: int) -> None:
    """Show messages at level ``v`` and above (popjit's own included)."""
    _log.setLevel(v)


def get_verbosity() -> int:
    """The current level of the ``popjit`` logger."""
    return _log.getEffectiveLevel()


def log(level: int, msg: Any, *args: Any, **kwargs: Any) -> None:
    """Log ``msg % args`` at ``level``."""
    _log.log(level, msg, *args, **kwargs)


def debug(msg: Any, *args: Any, **kwargs: Any) -> None:
    """Log at DEBUG."""
    _log.debug(msg, *args, **kwargs)


def info(msg: Any, *args: Any, **kwargs: Any) -> None:
    """Log at INFO."""
    _log.info(msg, *args, **kwargs)


def warning(msg: Any, *args: Any, **kwargs: Any) -> None:
    """Log at WARNING."""
    _log.warning(msg, *args, **kwargs)


warn = warning


def error(msg: Any, *args: Any, **kwargs: Any) -> None:
    """Log at ERROR."""
    _log.error(msg, *args, **kwargs)


def fatal(msg: Any, *args: Any, **kwargs: Any) -> None:
    """Log at FATAL (CRITICAL)."""
    _log.critical(msg, *args, **kwargs)
