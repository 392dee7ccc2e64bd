"""The module-level ``__getattr__`` of Graphcore's packages (``ipu``, ``ipu.ops``): submodules load
on first use, Graphcore's other spellings of a module resolve to it, and a Graphcore module popjit
lacks raises ``UnimplementedError`` (an ``AttributeError``, or an ``ImportError`` for
``from ... import``) with the advice :mod:`popjit.support`'s table has for it (e.g. the modules for
several IPUs)."""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable, Mapping
from types import ModuleType

from popjit.errors import unimplemented_name
from popjit.support import unimplemented_message


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
        raise unimplemented_name(name, unimplemented_message(f"{spelled}.{name}"), spelled)

    return module_getattr
