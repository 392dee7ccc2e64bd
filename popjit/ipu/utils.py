"""``ipu.utils``."""

from __future__ import annotations


def running_on_ipu_model() -> bool:
    """True when ``--use_ipu_model`` is in ``TF_POPLAR_FLAGS``."""
    from popjit.runtime.flags import poplar_flags

    return bool(poplar_flags().use_ipu_model)
