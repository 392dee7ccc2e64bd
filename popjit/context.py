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

import numpy as np

from popjit.runtime.device import CPU, canonical


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

    def dataset_iterator(self, dataset: Any, **options: Any) -> Any:
        """The infeed iterator ``iter(dataset)`` gives inside the scope (``options``: the infeed's, such as
        ``prefetch_depth``)."""
        ...

    def outfeed(self, mode: str, **options: Any) -> Any:
        """A new outfeed queue: ``mode`` ``"all"`` keeps every enqueued value, ``"last"`` the last one."""
        ...

    def run(self, fn: Any, args: Any = (), kwargs: Any = None) -> Any:
        """Run ``fn`` as one program on the strategy's IPU device."""
        ...

    def scope(self) -> contextlib.AbstractContextManager[Any]:
        """Enter the strategy's scope (again)."""
        ...

    def initial_value(self, value: np.ndarray) -> np.ndarray:
        """The initial value of a variable created in its scope, from the one this process computed."""
        ...


class ScopeStacks(threading.local):
    """Named stacks of scope values, one set per thread: what the enclosing ``with`` blocks pushed,
    innermost last."""

    def __init__(self) -> None:
        self._stacks: dict[str, list[Any]] = {}

    def items(self, name: str) -> list[Any]:
        """The stack ``name`` of this thread, outermost first."""
        return self._stacks.setdefault(name, [])

    def top(self, name: str, default: Any = None) -> Any:
        """The innermost value of stack ``name``, or ``default`` outside any scope."""
        stack = self.items(name)
        return stack[-1] if stack else default

    @contextlib.contextmanager
    def pushed(self, name: str, value: Any) -> Iterator[None]:
        """``value`` is on top of stack ``name`` for the body."""
        stack = self.items(name)
        stack.append(value)
        try:
            yield
        finally:
            stack.pop()


_scopes = ScopeStacks()


# -- devices -----------------------------------------------------------------------------------------


def current_device() -> str:
    """The canonical name of the innermost device scope on this thread (the host CPU outside any)."""
    return _scopes.top("devices", CPU)


def device_scope(name: str | None) -> contextlib.AbstractContextManager[None]:
    """Run the body on device ``name`` (``None``: stay on the current device)."""
    return _scopes.pushed("devices", canonical(name) if name else current_device())


# -- strategies --------------------------------------------------------------------------------------


def current_strategy() -> Strategy | None:
    """The strategy of the innermost ``strategy.scope()`` on this thread, if any."""
    return _scopes.top("strategies")


def strategy_scope(strategy: Strategy) -> contextlib.AbstractContextManager[None]:
    """Make ``strategy`` the current one for the body."""
    return _scopes.pushed("strategies", strategy)


def variable_device() -> str:
    """Where a variable created now lives: the active strategy's IPU device, else the current device."""
    strategy = current_strategy()
    return strategy.ipu_device if strategy is not None else current_device()
