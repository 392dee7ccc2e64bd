"""Import aliases: make ``alias.x.y`` the very module ``target.x.y`` (no second copy is loaded)."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from importlib.machinery import ModuleSpec
from types import ModuleType


class _AliasLoader(importlib.abc.Loader):
    """Loads an alias by importing its target and returning that module object."""

    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        module = importlib.import_module(self.target)
        self.spec = module.__spec__  # the import system overwrites __spec__; exec_module puts it back
        return module

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run (the target is initialised already); restore the target's own ``__spec__``."""
        module.__spec__ = self.spec


class AliasFinder(importlib.abc.MetaPathFinder):
    """Resolves ``alias`` and ``alias.<sub>`` to ``target`` and ``target.<sub>``."""

    def __init__(self, alias: str, target: str) -> None:
        self.alias = alias
        self.target = target

    def target_of(self, fullname: str) -> str | None:
        if fullname == self.alias or fullname.startswith(self.alias + "."):
            return self.target + fullname[len(self.alias):]
        return None

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> ModuleSpec | None:
        real = self.target_of(fullname)
        if real is None or importlib.util.find_spec(real) is None:
            return None
        module = importlib.import_module(real)
        return importlib.util.spec_from_loader(fullname, _AliasLoader(real), is_package=hasattr(module, "__path__"))


def alias_package(alias: str, target: str) -> AliasFinder:
    """Install (once) a finder making ``alias`` and its submodules the modules of ``target``."""
    for finder in sys.meta_path:
        if isinstance(finder, AliasFinder) and finder.alias == alias:
            return finder
    finder = AliasFinder(alias, target)
    sys.meta_path.insert(0, finder)
    return finder
