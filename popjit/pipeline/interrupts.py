"""Ctrl-C during a native engine run.

An engine runs its loops in native code with the GIL released, so Python's own SIGINT handling
only raises ``KeyboardInterrupt`` once the engine returns, however long its loops are. Engines
therefore check a flag (a one-element int64 array passed to them) at the start of every loop
iteration and return early when it is set.

While the main thread runs an engine, :func:`watching` makes Python's C-level signal handler
also write each signal number to a pipe (``signal.set_wakeup_fd``); a daemon thread reading that
pipe sets the flag on SIGINT and hands the bytes on to the wakeup descriptor that was installed
before (an asyncio loop's, say). Python's handler still runs as usual once the engine has
returned, so the interrupt surfaces as the ordinary ``KeyboardInterrupt``. Engines run by other
threads get a flag nothing sets: as in Python, Ctrl-C interrupts the main thread.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator

import numpy as np

_FLAG = np.zeros(1, np.int64)
_lock = threading.Lock()
_pipe: tuple[int, int] | None = None
_previous_fd = -1


def _pump(read_fd: int) -> None:
    """Set the flag on SIGINT; hand every byte on to the previously installed wakeup descriptor."""
    while True:
        try:
            data = os.read(read_fd, 512)
        except OSError:
            return
        if signal.SIGINT in data:
            _FLAG[0] = 1
        if _previous_fd >= 0:
            with contextlib.suppress(OSError):
                os.write(_previous_fd, data)


def _ensure_pipe() -> int:
    global _pipe
    with _lock:
        if _pipe is None:
            read_fd, write_fd = os.pipe()
            os.set_blocking(write_fd, False)
            threading.Thread(target=_pump, args=(read_fd,), name="popjit-interrupts", daemon=True).start()
            _pipe = (read_fd, write_fd)
        return _pipe[1]


def _forget_pipe() -> None:
    """In a forked child the reader thread is gone: the next run starts a new one."""
    global _pipe
    _pipe = None


os.register_at_fork(after_in_child=_forget_pipe)


@contextlib.contextmanager
def watching() -> Iterator[np.ndarray]:
    """The flag an engine run inside this block should poll (set by Ctrl-C in the main thread)."""
    global _previous_fd
    if threading.current_thread() is not threading.main_thread():
        yield np.zeros(1, np.int64)
        return
    write_fd = _ensure_pipe()
    _FLAG[0] = 0
    try:
        previous = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    except ValueError:  # why: not the main interpreter; Python raises KeyboardInterrupt after the run as usual
        yield np.zeros(1, np.int64)
        return
    _previous_fd = previous
    try:
        yield _FLAG
    finally:
        signal.set_wakeup_fd(previous, warn_on_full_buffer=False)
        _previous_fd = -1
