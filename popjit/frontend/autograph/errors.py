"""The errors autograph raises when Python control flow on a tensor cannot become graph control flow."""

from __future__ import annotations

from popjit.errors import InvalidArgumentError, UnimplementedError

__all__ = ["LoopVariableError", "UnsupportedControlFlowError"]


class UnsupportedControlFlowError(UnimplementedError, NotImplementedError):  # type: ignore[misc, valid-type]
    """A statement that autograph cannot turn into graph control flow on a tensor."""


class LoopVariableError(InvalidArgumentError, ValueError):  # type: ignore[misc, valid-type]
    """A loop-carried or branch-merged Python local that a graph loop or conditional cannot carry."""
