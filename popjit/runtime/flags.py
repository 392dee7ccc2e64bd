"""``TF_POPLAR_FLAGS`` (first version)."""

from __future__ import annotations

import os
from types import SimpleNamespace


def poplar_flags() -> SimpleNamespace:
    raw = os.environ.get("TF_POPLAR_FLAGS", "")
    return SimpleNamespace(use_ipu_model="--use_ipu_model" in raw.split())
