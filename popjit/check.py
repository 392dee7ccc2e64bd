"""``popjit check PATH [PATH...] [--json]``: which TensorFlow, Keras and Graphcore names a program uses,
and whether popjit supports each, without running it.

    popjit check train.py                 a table: name, status, first use (file:line), number of uses
    popjit check train.py models/ --json  the same as one JSON object (:data:`SCHEMA_VERSION`)

**Reading.** Each file is parsed with :mod:`ast`, never imported. The names a program binds to
TensorFlow's modules are followed through the file in order: ``import tensorflow as tf``, ``import
tensorflow.compat.v1 as tf``, ``from tensorflow.python import ipu``, ``from tensorflow.python.ipu.scopes
import ipu_scope``, ``from tensorflow import keras``, ``import keras``, ``from keras.layers import Dense``,
``import ipu_tensorflow_addons`` (the packages ``popjit run`` maps: :data:`popjit.runner.ALIASES`). Each
import is a use of the name it imports, each attribute chain on such a name (``tf.keras.layers.Dense``,
``ipu.config.IPUConfig``) a use of the whole chain, and each later mention of a name imported with
``from ... import`` a use of it. Left out, on purpose: attributes of objects (``cfg.auto_select_ipus``,
``model.fit``), names re-bound by assignment, ``from m import *`` (the import itself is reported),
and modules imported by ``__import__``/``importlib``.

A module the program imports that is a ``.py`` file or a package directory beside the importing
file, or beside the script the scan started from, is read too (``import helpers``, ``from models
import cnn``, ``from . import layers``). A directory PATH means every ``.py`` file below it.

**Classifying.** A name is looked up in popjit's own modules as ``popjit run`` would find it (the
same alias table, :class:`popjit.runner.TensorFlowFinder`; nothing is installed in this process):
the longest module prefix is imported, then each further part is an attribute. It is

- *not yet supported* when popjit lacks it (the reason is the ``UnimplementedError`` popjit would
  raise) or when it is a stub that only raises (:func:`popjit.support.stub_name`);
- *not applicable on a CPU* when :mod:`popjit.support`'s table says so (popjit accepts these, and
  they change nothing on a CPU);
- *supported* otherwise.

Exit status: 0 when every name is supported or not applicable, 1 when one is not yet supported, 2
when a PATH cannot be read (missing, not Python, a syntax error: reported with its file and line).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import re
import sys
import tokenize
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from popjit.errors import UnimplementedError
from popjit.profile.report import output_console  # the console `popjit report` prints on
from popjit.runner import ALIASES, TensorFlowFinder
from popjit.support import Status, graphcore_name, lookup, stub_name, unimplemented_message

#: The version of the ``--json`` object; it changes when a field changes meaning or goes away.
SCHEMA_VERSION = 1
#: The top-level packages whose names are checked: those ``popjit run`` maps to popjit.
ROOTS = frozenset(alias.name.partition(".")[0] for alias in ALIASES)
#: How the JSON object spells each status.
JSON_STATUS = {Status.SUPPORTED: "supported", Status.MISSING: "missing", Status.NOT_APPLICABLE: "not_applicable"}
#: Exit statuses.
OK, MISSING, UNREADABLE = 0, 1, 2


@dataclass(frozen=True)
class Location:
    """A line of a file that uses a name."""

    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True)
class Problem:
    """A file that could not be read, with the line at fault when there is one."""

    file: str
    line: int | None
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.message}" if self.line else f"{self.file}: {self.message}"


# -- reading a file ----------------------------------------------------------------------------------


@dataclass
class LocalImport:
    """An import of a module that is not TensorFlow's: ``from <level dots><module> import <names>``."""

    module: str
    level: int = 0
    names: tuple[str, ...] = ()


class _Reader(ast.NodeVisitor):
    """Walks one module in source order, keeping which local names stand for TensorFlow's names."""

    def __init__(self) -> None:
        self.bound: dict[str, str] = {}  # a local name -> the dotted name it stands for ("tf" -> "tensorflow")
        self.imported_names: set[str] = set()  # local names bound by `from ... import name`
        self.uses: list[tuple[str, int]] = []
        self.local_imports: list[LocalImport] = []

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            top = alias.name.partition(".")[0]
            if top not in ROOTS:
                self.local_imports.append(LocalImport(alias.name))
                continue
            self.uses.append((alias.name, node.lineno))
            if alias.asname:
                self.bound[alias.asname] = alias.name
            else:  # `import tensorflow.compat.v1` binds `tensorflow`
                self.bound[top] = top
            self.imported_names.discard(alias.asname or top)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level or module.partition(".")[0] not in ROOTS:
            self.local_imports.append(LocalImport(module, node.level, tuple(a.name for a in node.names)))
            return
        for alias in node.names:
            if alias.name == "*":
                self.uses.append((module, node.lineno))
                continue
            full = f"{module}.{alias.name}"
            self.uses.append((full, node.lineno))
            self.bound[alias.asname or alias.name] = full
            self.imported_names.add(alias.asname or alias.name)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        parts: list[str] = []
        base: ast.expr = node
        while isinstance(base, ast.Attribute):
            parts.append(base.attr)
            base = base.value
        if isinstance(base, ast.Name) and base.id in self.bound:
            self.uses.append((".".join([self.bound[base.id], *reversed(parts)]), node.lineno))
        else:
            self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load) and node.id in self.imported_names:
            self.uses.append((self.bound[node.id], node.lineno))


def parse(path: Path) -> ast.Module:
    """The syntax tree of the Python file ``path`` (its coding cookie honoured); raises
    :class:`UnreadableError` naming the file and line when it is not Python."""
    try:
        with tokenize.open(path) as f:
            source = f.read()
        return ast.parse(source, filename=str(path))
    except SyntaxError as e:
        raise UnreadableError(Problem(shown(path), e.lineno, f"SyntaxError: {e.msg}")) from None
    except (OSError, UnicodeDecodeError) as e:
        raise UnreadableError(Problem(shown(path), None, f"cannot read it: {e}")) from None


class UnreadableError(Exception):
    """A file that is not readable Python."""

    def __init__(self, problem: Problem) -> None:
        super().__init__(str(problem))
        self.problem = problem


def shown(path: Path) -> str:
    """``path`` relative to the current directory when it is below it, else absolute."""
    resolved = path.resolve()
    try:
        return str(resolved.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(resolved)


# -- following local imports -------------------------------------------------------------------------


def _module_files(base: Path, parts: Sequence[str]) -> list[Path]:
    """The files ``import parts`` loads from ``base``: each package's ``__init__.py`` and the module."""
    files = []
    for k in range(1, len(parts) + 1):
        here = base.joinpath(*parts[:k])
        if (here / "__init__.py").is_file():
            files.append(here / "__init__.py")
        elif k == len(parts) and here.with_suffix(".py").is_file():
            files.append(here.with_suffix(".py"))
        elif k == len(parts) or not here.is_dir():  # a directory without __init__.py is a namespace package
            break
    return files


def local_files(importer: Path, imp: LocalImport, script_dir: Path) -> list[Path]:
    """The local files an import in ``importer`` loads (none for a module that is not beside it)."""
    parts = imp.module.split(".") if imp.module else []
    if imp.level:
        if imp.level - 1 >= len(importer.parents):  # above the file system's root: Python refuses it too
            return []
        bases = [importer.parents[imp.level - 1]]
    else:
        bases = list(dict.fromkeys([importer.parent, script_dir]))
    for base in bases:
        files = _module_files(base, parts) if parts else []
        package = base.joinpath(*parts)  # `from package import module` loads package/module.py too
        subs = [f for name in imp.names for f in _module_files(package, [name])] if package.is_dir() else []
        if files or subs:
            return files + subs
    return []


def _hidden(relative: Path) -> bool:
    """True for a file below a hidden directory or ``__pycache__``, which a directory PATH leaves out."""
    return any(part.startswith(".") or part == "__pycache__" for part in relative.parts)


def python_files(paths: Iterable[str]) -> tuple[list[Path], list[Problem]]:
    """The files the PATH arguments name (a directory: every ``.py`` below it), and those that do not exist."""
    files: list[Path] = []
    problems: list[Problem] = []
    for p in map(Path, paths):
        if p.is_dir():
            files += sorted(f for f in p.rglob("*.py") if not _hidden(f.relative_to(p)))
        elif p.is_file():
            files.append(p)
        else:
            problems.append(Problem(str(p), None, "No such file or directory"))
    return files, problems


@dataclass
class Scan:
    """What reading the files found: each name's uses, the files read and those that could not be."""

    uses: dict[str, list[Location]] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)


def scan(paths: Iterable[str]) -> Scan:
    """Read the files of ``paths`` and the local modules they import (each once)."""
    entries, problems = python_files(paths)
    result = Scan(problems=problems)
    queue = [(f, f.resolve().parent) for f in entries]
    seen: set[Path] = set()
    while queue:
        path, script_dir = queue.pop(0)
        if path.resolve() in seen:
            continue
        seen.add(path.resolve())
        try:
            tree = parse(path)
        except UnreadableError as e:
            result.problems.append(e.problem)
            continue
        result.files.append(shown(path))
        reader = _Reader()
        reader.visit(tree)
        for name, line in reader.uses:
            result.uses.setdefault(name, []).append(Location(shown(path), line))
        queue += [(f, script_dir) for imp in reader.local_imports for f in local_files(path.resolve(), imp, script_dir)]
    return result


# -- classifying a name ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Verdict:
    """How popjit stands with one name, and why (empty for a supported name)."""

    status: Status
    reason: str = ""


_FINDER = TensorFlowFinder()
_PYTHON_PREFIX = re.compile(r"^module '[^']*' has no attribute '[^']*': ")


def popjit_module(parts: Sequence[str]) -> tuple[ModuleType, int]:
    """popjit's module for the longest module prefix of ``parts``, and that prefix's length."""
    for k in range(len(parts), 0, -1):
        target = _FINDER.target_of(".".join(parts[:k]))
        if target is None:
            continue
        try:
            found = importlib.util.find_spec(target) is not None
        except (ImportError, ValueError):  # a parent that is a module, not a package
            found = False
        if found:
            return importlib.import_module(target), k
    raise ValueError(f"{'.'.join(parts)} is not below a module popjit run maps")


def _missing(name: str, error: Exception | None = None) -> Verdict:
    """Not yet supported: the table's reason for ``name``, else popjit's error text."""
    if lookup(name) is not None or error is None:
        return Verdict(Status.MISSING, unimplemented_message(name))
    return Verdict(Status.MISSING, _PYTHON_PREFIX.sub("", str(error)))


@cache
def classify(dotted: str) -> Verdict:
    """The verdict for the TensorFlow name ``dotted`` (``"tensorflow.compat.v1.placeholder"``)."""
    name = graphcore_name(dotted)
    parts = dotted.split(".")
    obj: Any
    obj, k = popjit_module(parts)
    for part in [None, *parts[k:]]:
        if part is not None:
            try:
                obj = getattr(obj, part)
            except (UnimplementedError, AttributeError, ImportError) as e:
                return _missing(name, e if isinstance(e, UnimplementedError) else None)
        stub = stub_name(obj)
        if stub is not None:
            return _missing(name if lookup(name) else stub)
    entry = lookup(name)
    if entry is not None and entry.status is Status.NOT_APPLICABLE:
        return Verdict(Status.NOT_APPLICABLE, entry.reason)
    return Verdict(Status.SUPPORTED)


# -- the report --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Finding:
    """One name the program uses: its verdict and every line using it."""

    name: str
    module: str
    verdict: Verdict
    locations: tuple[Location, ...]


_ORDER = {Status.MISSING: 0, Status.NOT_APPLICABLE: 1, Status.SUPPORTED: 2}


@dataclass
class Report:
    """The findings over all files (not yet supported first), and the files read or not."""

    findings: list[Finding]
    files: list[str]
    problems: list[Problem]

    @property
    def exit_status(self) -> int:
        """2 if a file could not be read, else 1 if a name is not yet supported, else 0."""
        if self.problems:
            return UNREADABLE
        return MISSING if any(f.verdict.status is Status.MISSING for f in self.findings) else OK

    def count(self, status: Status) -> int:
        """How many names have ``status``."""
        return sum(f.verdict.status is status for f in self.findings)

    def summary(self) -> str:
        """``"12 names in 2 files: 9 supported, 2 not yet supported, 1 not applicable on a CPU"``."""
        counts = ", ".join(f"{self.count(s)} {s.value}" for s in Status)
        files = f"{len(self.files)} file{'s' if len(self.files) != 1 else ''}"
        return f"{len(self.findings)} TensorFlow name{'s' if len(self.findings) != 1 else ''} in {files}: {counts}"

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` object (documented in docs/api.md, "Command line")."""
        return {
            "version": SCHEMA_VERSION,
            "files": self.files,
            "exit_status": self.exit_status,
            "summary": {JSON_STATUS[s]: self.count(s) for s in Status},
            "names": [{"name": f.name, "module": f.module, "status": JSON_STATUS[f.verdict.status],
                       "reason": f.verdict.reason, "count": len(f.locations),
                       "locations": [{"file": loc.file, "line": loc.line} for loc in f.locations]}
                      for f in self.findings],
            "errors": [{"file": p.file, "line": p.line, "message": p.message} for p in self.problems],
        }


def check(paths: Iterable[str]) -> Report:
    """Read ``paths`` (files or directories) and classify every TensorFlow, Keras and Graphcore name they use."""
    found = scan(paths)
    order = {file: k for k, file in enumerate(found.files)}  # the script first, then what it imports

    def in_reading_order(locations: list[Location]) -> tuple[Location, ...]:
        return tuple(sorted(set(locations), key=lambda loc: (order[loc.file], loc.line)))

    findings = [Finding(graphcore_name(name), name, classify(name), in_reading_order(locs))
                for name, locs in found.uses.items()]
    findings.sort(key=lambda f: (_ORDER[f.verdict.status], f.name))
    return Report(findings, found.files, found.problems)


# -- output ------------------------------------------------------------------------------------------

_STYLE = {Status.SUPPORTED: "green", Status.MISSING: "bold red", Status.NOT_APPLICABLE: "yellow"}


def print_report(report: Report, console: Console) -> None:
    """The table of names, the reasons of those not yet supported or not applicable, and the summary line."""
    table = Table(title="TensorFlow, Keras and Graphcore names used")
    for column in ("name", "status", "first use", "uses"):
        table.add_column(column, justify="right" if column == "uses" else "left", overflow="fold")
    for f in report.findings:
        table.add_row(f.name, f"[{_STYLE[f.verdict.status]}]{f.verdict.status.value}[/]", escape(str(f.locations[0])),
                      str(len(f.locations)))
    if report.findings:
        console.print(table)
    for f in report.findings:
        reason = f.verdict.reason
        if reason:  # an error text names the name already
            console.print(reason if reason.startswith(f.name) else f"{f.name}: {reason}", highlight=False,
                          markup=False)
    console.print(report.summary(), highlight=False)


def main(paths: Sequence[str], as_json: bool = False, console: Console | None = None) -> int:
    """``popjit check PATHS [--json]``: print the report; returns the exit status."""
    report = check(paths)
    for problem in report.problems:
        print(f"popjit check: error: {problem}", file=sys.stderr)
    if as_json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        print_report(report, console or output_console())
    return report.exit_status
