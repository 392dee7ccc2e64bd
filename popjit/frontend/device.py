"""``tf.device`` scopes (the stack itself lives in :mod:`popjit.context`, names in :mod:`popjit.runtime.device`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from popjit import context


@contextlib.contextmanager
def device(name: str | None) -> Iterator[None]:
    """``with tf.device('/device:IPU:0'):`` — ops inside run (and variables live) on that device."""
    with context.device_scope(name):
        yield
