"""``tf.name_scope``: a prefix for the names of what is built inside (``with tf.name_scope("layer1"):``).

popjit's ops have no names, so the scope names TF1's placeholders and ``tf.compat.v1.Variable`` s
built inside it (``layer1/x:0``), as TensorFlow names them; ``get_variable`` follows the variable
scope instead, as in TensorFlow.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator


class _Stack(threading.local):
    def __init__(self) -> None:
        self.names: list[str] = []


_stack = _Stack()


def current_name_scope() -> str:
    """The enclosing scopes' prefix, e.g. ``"outer/inner/"`` (empty outside any)."""
    return "".join(f"{n}/" for n in _stack.names)


@contextlib.contextmanager
def name_scope(name: str | None, default_name: str | None = None, values: object = None,
               skip_on_eager: bool = True) -> Iterator[str]:
    """Prefix names made inside with ``name`` (or ``default_name``); yields the full prefix.
    A name ending in ``/`` is absolute: it replaces the enclosing scopes."""
    chosen = name if name is not None else default_name
    if chosen is None:
        raise ValueError("name_scope needs a name (or a default_name).")
    saved = list(_stack.names)
    if chosen.endswith("/"):
        _stack.names = [part for part in chosen.rstrip("/").split("/") if part]
    elif chosen:
        _stack.names.append(chosen)
    try:
        yield current_name_scope()
    finally:
        _stack.names = saved


def scoped(name: str) -> str:
    """``name`` under the current name scope."""
    return current_name_scope() + name
