"""The package list in pyproject.toml matches the source tree, so `pip install .` ships everything."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _source_packages() -> set[str]:
    found = {"popjit.kernels"}
    for init in (ROOT / "popjit").rglob("__init__.py"):
        rel = init.parent.relative_to(ROOT)
        found.add(".".join(rel.parts))
    return found


def test__pyproject_packages__match_the_source_tree():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert set(config["packages"]) == _source_packages()
    assert config["package-dir"]["popjit.kernels"] == "kernels"
    assert (ROOT / "kernels" / "__init__.py").is_file()
