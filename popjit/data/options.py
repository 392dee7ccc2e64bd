"""``tf.data.Options``: accepted and remembered; popjit's pipeline does not depend on them."""

from __future__ import annotations

import enum
from typing import Any


class AutoShardPolicy(enum.IntEnum):
    """``tf.data.experimental.AutoShardPolicy`` (one host, so sharding never happens)."""

    OFF = -1
    AUTO = 0
    FILE = 1
    DATA = 2
    HINT = 3


class _Group:
    """A fixed set of named options; setting an unknown one is an error, as in TensorFlow."""

    _defaults: dict[str, Any] = {}

    def __init__(self) -> None:
        for name, default in self._defaults.items():
            object.__setattr__(self, name, default() if isinstance(default, type) else default)

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in self._defaults:
            raise AttributeError(f"Cannot set the property {name} on {type(self).__name__}.")
        object.__setattr__(self, name, value)

    def __repr__(self) -> str:
        body = ", ".join(f"{k}={getattr(self, k)!r}" for k in self._defaults)
        return f"{type(self).__name__}({body})"


class DistributeOptions(_Group):
    _defaults = {"auto_shard_policy": AutoShardPolicy.AUTO, "num_devices": None}


class OptimizationOptions(_Group):
    _defaults = {"apply_default_optimizations": None, "map_parallelization": None, "parallel_batch": None,
                 "noop_elimination": None, "map_and_batch_fusion": None, "shuffle_and_repeat_fusion": None,
                 "autotune": None}


class ThreadingOptions(_Group):
    _defaults = {"max_intra_op_parallelism": None, "private_threadpool_size": None}


class Options(_Group):
    """``tf.data.Options``."""

    _defaults = {"deterministic": None, "experimental_deterministic": None, "experimental_slack": None,
                 "experimental_external_state_policy": None, "experimental_distribute": DistributeOptions,
                 "experimental_optimization": OptimizationOptions, "threading": ThreadingOptions,
                 "experimental_threading": ThreadingOptions}

    def merge(self, options: Options) -> Options:
        """These options with the ones set in ``options`` taking precedence."""
        out = Options()
        for k in self._defaults:
            mine, theirs = getattr(self, k), getattr(options, k)
            object.__setattr__(out, k, theirs if theirs is not None else mine)
        return out
