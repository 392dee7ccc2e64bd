"""``tf.compat.v1``: TensorFlow 1's names from :mod:`popjit.compat.v1`, and every TF2 name as
``popjit.tensorflow``'s own object (``tf.compat.v1.constant is tf.constant``)."""

from __future__ import annotations

import importlib
from typing import Any

from popjit.compat.v1 import *  # noqa: F403
from popjit.errors import missing_api


def __getattr__(name: str) -> Any:
    """Every other name is TensorFlow 2's (popjit.tensorflow's) object of that name."""
    if name.startswith("__"):
        raise AttributeError(name)
    tf = importlib.import_module("popjit.tensorflow")  # lazily: popjit.tensorflow imports this module
    try:
        return getattr(tf, name)
    except AttributeError:
        raise missing_api("tf.compat.v1", name) from None


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(dir(importlib.import_module("popjit.tensorflow"))))
