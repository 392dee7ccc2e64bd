"""Autograph: rewriting Python control flow on tensors into graph loops and conditionals.

(First version: functions are traced as written; Python control flow on tensors is converted
by the AST rewrite in the next step.)
"""

from __future__ import annotations

from collections.abc import Callable


def convert(fn: Callable) -> Callable:
    return fn
