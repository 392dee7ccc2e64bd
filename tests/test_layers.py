"""popjit's layering: every module imports only its own layer and the layers below it, the
top-level units form no import cycle, an import inside a function says why, and every module
imports on its own in a fresh interpreter.

``LAYERS`` is the one table of the layers (``docs/pipeline.md`` lists the same, checked in
tests/test_docs.py). A unit is a subpackage of ``popjit`` or one of its top-level modules.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: Bottom to top. A module may import modules of its own layer and of the layers below.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("base", ("popjit", "popjit.errors", "popjit.dtypes", "popjit.config", "popjit.flags", "popjit.source",
              "popjit.aliases", "popjit.support", "popjit.ir")),
    ("ops", ("popjit.ops",)),
    ("autodiff", ("popjit.autodiff",)),
    ("graph passes", ("popjit.graph",)),
    ("loop lowering and passes", ("popjit.loop",)),
    ("schedule", ("popjit.schedule",)),
    ("profile", ("popjit.profile",)),
    ("kernels", ("popjit.kernels",)),
    ("codegen", ("popjit.codegen",)),
    ("pipeline", ("popjit.pipeline",)),
    ("runtime", ("popjit.runtime",)),
    ("context", ("popjit.context",)),
    ("frontend", ("popjit.frontend",)),
    ("data", ("popjit.data",)),
    ("train", ("popjit.train",)),
    ("keras", ("popjit.keras",)),
    ("compat", ("popjit.compat",)),
    ("popdist", ("popjit.popdist",)),
    ("ipu", ("popjit.ipu",)),
    ("tensorflow facade", ("popjit.tensorflow", "popjit.ipu_tensorflow_addons")),
    ("entry points", ("popjit.runner", "popjit.check", "popjit.demo", "popjit.poprun", "popjit.cli",
                      "popjit.__main__")),
]

#: Imports that go up a layer on purpose: (importer, imported) -> why.
UPWARD = {
    ("popjit", "popjit.ipu"): "the root package's short form `popjit.ipu`, loaded on first use",
    ("popjit", "popjit.frontend.function"): "the root package's short form `popjit.tf_function`, loaded on first use",
    ("popjit.popdist", "popjit.ipu.config"): "popdist.getDeviceId answers with the virtual device ids of the ipu "
                                             "package, loaded on first use",
    ("popjit.kernels.jit", "popjit.codegen.library"): "a kernel calling another's entry point has the code "
                                                     "library load it, loaded on first use",
}


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str
    line: int
    in_function: bool
    why: bool  # a comment saying why sits on the line or right above the import


def source_files() -> dict[str, Path]:
    """Every popjit module by dotted name (``kernels/`` installs as ``popjit.kernels``)."""
    out: dict[str, Path] = {}
    for base, package in ((ROOT / "popjit", "popjit"), (ROOT / "kernels", "popjit.kernels")):
        for path in sorted(base.rglob("*.py")):
            parts = list(path.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join([package, *parts])] = path
    return out


MODULES = source_files()


def _targets(module: str, is_package: bool, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The popjit modules an import statement loads (the module itself for ``from m import name``)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if node.level:
        base = module if is_package else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            base = base.rpartition(".")[0]
        stem = f"{base}.{node.module}" if node.module else base
    else:
        stem = node.module or ""
    subs = [f"{stem}.{a.name}" for a in node.names if f"{stem}.{a.name}" in MODULES]
    return subs or [stem]


def _has_why(lines: list[str], line: int) -> bool:
    """A ``# why`` comment on the import's line or in the comment block right above it (or above the
    first of several consecutive imports)."""
    if "# why" in lines[line - 1]:
        return True
    k = line - 2
    while k >= 0 and lines[k].strip().startswith(("import ", "from ")):
        k -= 1
    while k >= 0 and lines[k].strip().startswith("#"):
        if "why" in lines[k]:
            return True
        k -= 1
    return False


def imports_of(module: str, path: Path) -> list[Import]:
    text = path.read_text()
    lines = text.splitlines()
    out: list[Import] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                for target in _targets(module, path.name == "__init__.py", child):
                    if target == "popjit" or target.startswith("popjit."):
                        out.append(Import(module, target, child.lineno, in_function, _has_why(lines, child.lineno)))
            visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(ast.parse(text), False)
    return out


ALL_IMPORTS = [imp for name, path in MODULES.items() for imp in imports_of(name, path)]


def layer_of(module: str) -> int:
    """The index in ``LAYERS`` of the longest prefix naming ``module``'s unit."""
    best, best_len = -1, -1
    for k, (_, units) in enumerate(LAYERS):
        for unit in units:
            if (module == unit or module.startswith(unit + ".")) and len(unit) > best_len:
                best, best_len = k, len(unit)
    return best


def unit_of(module: str) -> str:
    """``popjit.<first part>`` (or ``popjit`` itself)."""
    return ".".join(module.split(".")[:2])


def test__every_module__belongs_to_a_layer():
    assert [m for m in MODULES if layer_of(m) < 0] == []


def test__imports__never_reach_a_higher_layer():
    upward = [
        f"{i.importer}:{i.line} ({LAYERS[layer_of(i.importer)][0]}) imports {i.imported} "
        f"({LAYERS[layer_of(i.imported)][0]})"
        for i in ALL_IMPORTS
        if layer_of(i.imported) > layer_of(i.importer) and (i.importer, i.imported) not in UPWARD
    ]
    assert upward == []


def test__units__form_no_import_cycle():
    graph: dict[str, set[str]] = {}
    for i in ALL_IMPORTS:
        a, b = unit_of(i.importer), unit_of(i.imported)
        if a != b and (i.importer, i.imported) not in UPWARD:
            graph.setdefault(a, set()).add(b)
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def dfs(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append(path[path.index(nxt):] + [nxt] if nxt in path else [node, nxt])
            elif nxt not in state:
                dfs(nxt, [*path, nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            dfs(node, [node])
    assert cycles == []


def test__imports_inside_functions__say_why():
    unexplained = [f"{i.importer}:{i.line} imports {i.imported}" for i in ALL_IMPORTS if i.in_function and not i.why]
    assert unexplained == []


def test__layer_check__sees_an_upward_import(tmp_path):
    """The checker itself: an ops module importing the frontend is caught, with its line."""
    path = tmp_path / "fake.py"
    path.write_text("import numpy\n\n\ndef f():\n    from popjit.frontend import tensor\n")
    (imp,) = imports_of("popjit.ops.fake", path)
    assert (imp.imported, imp.line, imp.in_function, imp.why) == ("popjit.frontend.tensor", 5, True, False)
    assert layer_of(imp.imported) > layer_of(imp.importer)


CHILD = textwrap.dedent("""
    import importlib, json, os, sys, traceback
    import numpy, numba, scipy  # third-party only: every popjit module below starts from nothing of popjit
    failures = {}
    for name in json.loads(sys.argv[1]):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            try:
                importlib.import_module(name)
                os._exit(0)
            except BaseException:
                os.write(w, traceback.format_exc().encode()[-2000:])
                os._exit(1)
        os.close(w)
        with os.fdopen(r, "rb") as f:
            err = f.read().decode()
        _, status = os.waitpid(pid, 0)
        if status:
            failures[name] = err or f"exit status {status}"
    print(json.dumps(failures))
""")


#: The import test's modules are shared out over this many tests (one interpreter each), so that test
#: runners with several workers spread them (together they take 1.5 minutes of a 2-core CI machine).
IMPORT_SHARDS = 4


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs fork")
@pytest.mark.parametrize("shard", range(IMPORT_SHARDS))
def test__every_module__imports_alone_in_a_fresh_interpreter(tmp_path, shard):
    names = [m for m in MODULES if m != "popjit.__main__"][shard::IMPORT_SHARDS]
    env = {"PATH": "/usr/bin:/bin", "POPJIT_CACHE_DIR": str(tmp_path / "cache"), "HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(names)], capture_output=True, text=True,
                         cwd=ROOT, env=env, timeout=600)
    assert out.returncode == 0, out.stderr
    failures = json.loads(out.stdout.strip().splitlines()[-1])
    assert failures == {}, "\n\n".join(f"{k}:\n{v}" for k, v in failures.items())
