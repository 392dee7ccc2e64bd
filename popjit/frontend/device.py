"""``tf.device`` scopes and device-name parsing."""

from __future__ import annotations

import contextlib
import functools
import re
import threading
from collections.abc import Iterator

CPU = "/job:localhost/replica:0/task:0/device:CPU:0"
_IPU_RE = re.compile(r"(?:^|/)device:IPU:(\d+)$", re.IGNORECASE)
_state = threading.local()


def canonical(name: str | None) -> str:
    """``'/device:IPU:0'`` → ``'/job:localhost/replica:0/task:0/device:IPU:0'``; ``'cpu'`` → CPU:0."""
    if not name:
        return CPU
    n = name.strip()
    low = n.lower()
    if low in ("cpu", "/cpu:0", "cpu:0", "/device:cpu:0"):
        return CPU
    m = re.search(r"device:(cpu|ipu|gpu|xla_cpu):(\d+)", n, re.IGNORECASE)
    if m:
        return f"/job:localhost/replica:0/task:0/device:{m.group(1).upper()}:{m.group(2)}"
    m = re.fullmatch(r"/?(cpu|ipu|gpu):(\d+)", low)
    if m:
        return f"/job:localhost/replica:0/task:0/device:{m.group(1).upper()}:{m.group(2)}"
    raise ValueError(f"Cannot parse device name {name!r}; use e.g. '/device:IPU:0' or '/device:CPU:0'.")


@functools.lru_cache(maxsize=256)
def ipu_ordinal(name: str) -> int | None:
    """The IPU number in a device name, or None for other devices."""
    m = _IPU_RE.search(name)
    return int(m.group(1)) if m else None


def is_ipu_device(name: str) -> bool:
    return ipu_ordinal(name) is not None


def current_device() -> str:
    stack = getattr(_state, "stack", None)
    return stack[-1] if stack else CPU


@contextlib.contextmanager
def device(name: str | None) -> Iterator[None]:
    """``with tf.device('/device:IPU:0'):`` — ops inside run (and variables live) on that device."""
    if not hasattr(_state, "stack"):
        _state.stack = []
    _state.stack.append(canonical(name) if name else current_device())
    try:
        yield
    finally:
        _state.stack.pop()
