"""Where and how code runs right now, per thread: the device scope and the distribution strategy.

``tf.device`` (:mod:`popjit.frontend.device`) and ``ipu.scopes.ipu_scope`` push device names here;
``IPUStrategy.scope()`` (:mod:`popjit.ipu.ipu_strategy`) pushes the strategy. The frontend, ``tf.data``
and Keras read this module, so none of them imports the ``ipu`` package to ask what is active.

A strategy here is any object with the :class:`Strategy` methods; the ``ipu`` layer supplies them.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any, Protocol

from popjit.runtime.device import CPU, canonical

_state = threading.local()


class Strategy(Protocol):
    """What the layers below ``ipu`` may ask of the active distribution strategy."""

    @property
    def ipu_device(self) -> str:
        """The canonical name of the strategy's IPU device (variables created in its scope live there)."""
        ...

    @property
    def enable_dataset_iterators(self) -> bool:
        """Whether ``iter(dataset)`` inside the scope gives an infeed iterator."""
        ...

    def dataset_iterator(self, dataset: Any) -> Any:
        """The infeed iterator ``iter(dataset)`` gives inside the scope."""
        ...

    def scope(self) -> contextlib.AbstractContextManager[Any]:
        """Enter the strategy's scope (again)."""
        ...


def _stack(name: str) -> list[Any]:
    stack = getattr(_state, name, None)
    if stack is None:
        stack = []
        setattr(_state, name, stack)
    return stack


# -- devices -----------------------------------------------------------------------------------------


def current_device() -> str:
    """The canonical name of the innermost device scope on this thread (the host CPU outside any)."""
    stack = _stack("devices")
    return stack[-1] if stack else CPU


@contextlib.contextmanager
def device_scope(name: str | None) -> Iterator[None]:
    """Run the body on device ``name`` (``None``: stay on the current device)."""
    stack = _stack("devices")
    stack.append(canonical(name) if name else current_device())
    try:
        yield
    finally:
        stack.pop()


# -- strategies --------------------------------------------------------------------------------------


def current_strategy() -> Strategy | None:
    """The strategy of the innermost ``strategy.scope()`` on this thread, if any."""
    stack = _stack("strategies")
    return stack[-1] if stack else None


@contextlib.contextmanager
def strategy_scope(strategy: Strategy) -> Iterator[None]:
    """Make ``strategy`` the current one for the body."""
    stack = _stack("strategies")
    stack.append(strategy)
    try:
        yield
    finally:
        stack.pop()


def variable_device() -> str:
    """Where a variable created now lives: the active strategy's IPU device, else the current device."""
    strategy = current_strategy()
    return strategy.ipu_device if strategy is not None else current_device()
