"""The module-level ``__getattr__`` of Graphcore's packages (``ipu``, ``ipu.ops``): submodules load
on first use, Graphcore's other spellings of a module resolve to it, and a Graphcore module popjit
lacks raises ``UnimplementedError`` (an ``AttributeError``, or an ``ImportError`` for
``from ... import``) with advice where there is some."""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable, Mapping
from types import ModuleType

from popjit.errors import missing_api_message, multi_ipu_message, unimplemented_name

#: Graphcore's modules that only make sense over several IPUs.
MULTI_IPU_MODULES = frozenset({
    "all_to_all_op", "cross_replica_ops", "cross_replica_optimizer", "distributed", "horovod",
    "ipu_multi_worker_strategy", "pipelining_ops", "reduce_scatter_op", "replication_ops", "sharded_optimizer",
    "sharding", "within_replica_ops",
})


def package_getattr(package: str, spelled: str, aliases: Mapping[str, str] | None = None
                    ) -> Callable[[str], ModuleType]:
    """``__getattr__`` for the package ``package`` (users write it ``spelled``, e.g. ``"ipu.ops"``):
    its submodules, then ``aliases`` (name -> module path), then popjit's error for the name."""
    aliases = dict(aliases or {})

    def module_getattr(name: str) -> ModuleType:
        if not name.startswith("_") and importlib.util.find_spec(f"{package}.{name}") is not None:
            return importlib.import_module(f"{package}.{name}")
        if name in aliases:
            return importlib.import_module(aliases[name])
        if name.startswith("__"):
            raise AttributeError(name)
        text = multi_ipu_message(f"{spelled}.{name}") if name in MULTI_IPU_MODULES else \
            missing_api_message(spelled, name)
        raise unimplemented_name(name, text, spelled)

    return module_getattr
