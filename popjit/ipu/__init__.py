"""Graphcore's IPU API under its own module names: ``from popjit import ipu``,
``from popjit.tensorflow.python import ipu``, or, in a script run by ``popjit run``,
``from tensorflow.python import ipu``.

Submodules are imported on first use (``ipu.loops``, ``ipu.ipu_outfeed_queue``...): any module
added to this package is reachable as an attribute without being listed here.
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

from popjit.errors import UnimplementedAPIError, missing_api
from popjit.ipu import config, ipu_strategy, scopes, utils  # noqa: F401


def __getattr__(name: str) -> ModuleType:
    if not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        return importlib.import_module(f"{__name__}.{name}")
    if name.startswith("__"):
        raise AttributeError(name)
    # e.g. ipu.pipelining_ops: Graphcore's module, not popjit's yet (or a misspelt name)
    raise UnimplementedAPIError(f"module 'ipu' has no attribute '{name}': {missing_api('ipu', name)}")
