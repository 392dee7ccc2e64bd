"""``popjit check``: the names a program uses, read from real files (never run), classified against
popjit's own modules, and the one table (popjit/support.py) that the errors, the check and
docs/limitations.md share."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import popjit.tensorflow as tf
from popjit import check, runner
from popjit.errors import UnimplementedError
from popjit.support import (
    Entry,
    Status,
    entries,
    graphcore_name,
    lookup,
    multi_ipu_message,
    spellings,
    stub_name,
    unimplemented_message,
)
from tests.test_run import clean_env

ROOT = Path(__file__).resolve().parent.parent
SEEDS = Path("/work/shared/seeds")
S, M, NA = Status.SUPPORTED, Status.MISSING, Status.NOT_APPLICABLE


def write(path: Path, source: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(source).lstrip("\n"))
    return path


def popjit_check(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """``python -m popjit check ARGS`` in ``cwd``."""
    return subprocess.run([sys.executable, "-m", "popjit", "check", *args], capture_output=True, text=True,
                          timeout=300, cwd=cwd, env={**clean_env(cwd), "COLUMNS": "200"})  # rows on one line each


MAIN = """
    import numpy as np
    import tensorflow as tf
    import tensorflow.compat.v1 as tf1
    from tensorflow.python import ipu
    from tensorflow.python.ipu.scopes import ipu_scope, partials_type
    from tensorflow import keras
    from keras.layers import Dense as D
    import ipu_tensorflow_addons.keras.layers as ipu_layers
    import helpers
    import models

    cfg = ipu.config.IPUConfig()
    cfg.auto_select_ipus = 1
    with ipu_scope("/device:IPU:0"), ipu.scopes.ipu_jit_scope(0):
        x = tf.nn.relu(tf.constant([1.0]))
        y = tf.strings.split(x)
    p = tf1.placeholder(tf.float32, [2])
    m = keras.Sequential([D(2), ipu_layers.Dropout(0.5)])
    stage = ipu.keras.optimizers.CrossReplicaOptimizer
    with partials_type(np.float16):
        pass
    ipu.within_replica_ops.pipeline(None)
    ipu.optimizers.CrossReplicaGradientAccumulationOptimizer
"""
HELPERS = """
    import tensorflow as tf
    from tools import plotting


    def f(x):
        return tf.signal.stft(x)
"""

#: name -> (status, first use, number of uses) for MAIN with its helper module and local package.
EXPECTED = {
    "ipu": (S, "main.py:4", 1),
    "ipu.config.IPUConfig": (S, "main.py:12", 1),
    "ipu.keras.optimizers.CrossReplicaOptimizer": (M, "main.py:19", 1),
    "ipu.optimizers.CrossReplicaGradientAccumulationOptimizer": (M, "main.py:23", 1),
    "ipu.within_replica_ops.pipeline": (M, "main.py:22", 1),
    "ipu.scopes.ipu_jit_scope": (NA, "main.py:14", 1),
    "ipu.scopes.ipu_scope": (S, "main.py:5", 2),
    "ipu.scopes.partials_type": (M, "main.py:5", 2),
    "ipu_tensorflow_addons.keras.layers": (S, "main.py:8", 1),
    "ipu_tensorflow_addons.keras.layers.Dropout": (S, "main.py:18", 1),
    "keras.layers.Dense": (S, "main.py:7", 2),
    "tf": (S, "main.py:2", 3),
    "tf.compat.v1": (S, "main.py:3", 1),
    "tf.compat.v1.placeholder": (S, "main.py:17", 1),
    "tf.constant": (S, "main.py:15", 1),
    "tf.float32": (S, "main.py:17", 1),
    "tf.keras": (S, "main.py:6", 1),
    "tf.keras.Sequential": (S, "main.py:18", 1),
    "tf.keras.layers": (S, "models/layers.py:1", 1),
    "tf.keras.layers.Conv2D": (S, "models/layers.py:2", 1),
    "tf.nn.relu": (S, "main.py:15", 1),
    "tf.signal.stft": (M, "helpers.py:6", 1),
    "tf.sparse.to_dense": (M, "tools/plotting.py:2", 1),
    "tf.strings.split": (M, "main.py:16", 1),
}


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A script with every kind of import, a helper module beside it (which imports a module of a
    namespace package) and a local package (whose ``__init__`` imports a module of it relatively); the
    current directory is the project's."""
    write(tmp_path / "main.py", MAIN)
    write(tmp_path / "helpers.py", HELPERS)
    write(tmp_path / "models" / "__init__.py", "from .layers import conv\n")
    write(tmp_path / "models" / "layers.py", "from tensorflow.keras import layers\nconv = layers.Conv2D(4, 3)\n")
    write(tmp_path / "tools" / "plotting.py", "import tensorflow as tf\ntf.sparse.to_dense\n")  # a namespace package
    write(tmp_path / "unrelated.py", "import tensorflow as tf\ntf.einsum\n")  # not imported: not read
    monkeypatch.chdir(tmp_path)
    return tmp_path


def table(report: check.Report) -> dict[str, tuple[Status, str, int]]:
    return {f.name: (f.verdict.status, str(f.locations[0]), len(f.locations)) for f in report.findings}


# -- reading and classifying -------------------------------------------------------------------------


def test__check__finds_each_name_with_its_status_and_lines(project):
    report = check.check(["main.py"])
    assert table(report) == EXPECTED
    assert report.files == ["main.py", "helpers.py", "models/__init__.py", "tools/plotting.py", "models/layers.py"]
    assert report.exit_status == check.MISSING
    assert report.summary() == ("24 TensorFlow names in 5 files: 16 supported, 7 not yet supported, "
                                "1 not applicable on a CPU")


def test__check__gives_the_reasons_popjit_raises(project):
    verdicts = {f.name: f.verdict for f in check.check(["main.py"]).findings}
    several = multi_ipu_message("ipu.within_replica_ops.pipeline")
    assert verdicts["ipu.within_replica_ops.pipeline"].reason == several
    assert verdicts["ipu.keras.optimizers.CrossReplicaOptimizer"].reason == \
        multi_ipu_message("ipu.keras.optimizers.CrossReplicaOptimizer")
    accumulating = "ipu.optimizers.CrossReplicaGradientAccumulationOptimizer"
    assert verdicts[accumulating].reason == multi_ipu_message(accumulating)
    assert verdicts["ipu.scopes.partials_type"].reason.startswith(
        "ipu.scopes.partials_type is not implemented by popjit yet: popjit does not model a per-operation type")
    assert verdicts["tf.strings.split"].reason.startswith("tf.strings is not implemented by popjit. See docs/")
    assert verdicts["ipu.scopes.ipu_jit_scope"].reason == lookup("ipu.scopes.ipu_jit_scope").reason
    assert verdicts["tf.constant"].reason == ""
    with pytest.raises(UnimplementedError) as info:
        tf.strings.split  # noqa: B018
    assert str(info.value).startswith(verdicts["tf.strings.split"].reason)


def test__check__line_numbers_point_at_the_name(project):
    report = check.check(["main.py"])
    for f in report.findings:
        for loc in f.locations:
            line = (project / loc.file).read_text().splitlines()[loc.line - 1]
            assert f.name.rpartition(".")[2] in line or f.name.split(".")[0] in ("tf", "keras"), (f.name, line)


def test__reader__follows_rebinding_in_source_order(tmp_path, monkeypatch):
    """A later import of the same local name wins from its line on; attributes of objects and the
    module of a star import are as documented."""
    write(tmp_path / "s.py", """
        import tensorflow as tf
        tf.ones
        import tensorflow.compat.v1 as tf
        tf.ones
        from tensorflow.keras.layers import *
        model = tf.keras.Sequential()
        model.fit
        import tensorflow.compat.v1
        tensorflow.compat.v1.Session
        import keras
        keras.layers.Flatten
    """)
    monkeypatch.chdir(tmp_path)
    found = {f.name: [loc.line for loc in f.locations] for f in check.check(["s.py"]).findings}
    assert found == {"tf": [1], "tf.ones": [2], "tf.compat.v1": [3, 8], "tf.compat.v1.ones": [4],
                     "tf.keras.layers": [5], "tf.compat.v1.keras.Sequential": [6], "tf.compat.v1.Session": [9],
                     "keras": [10], "keras.layers.Flatten": [11]}


@pytest.mark.parametrize("dotted, name", [
    ("tensorflow.python.ipu.loops.repeat", "ipu.loops.repeat"),
    ("tensorflow.python.ipu", "ipu"),
    ("tensorflow.nn", "tf.nn"),
    ("keras.layers.Dense", "keras.layers.Dense"),
    ("ipu_tensorflow_addons.keras", "ipu_tensorflow_addons.keras"),
])
def test__graphcore_name__is_how_the_table_spells_a_module_path(dotted, name):
    assert graphcore_name(dotted) == name


def test__classify__missing_module_under_ipu_and_alias_spellings():
    assert check.classify("tensorflow.python.ipu.ops.within_replica_ops").reason == \
        multi_ipu_message("ipu.ops.within_replica_ops")
    assert check.classify("tensorflow.compat.v2.nn.relu").status is S
    assert check.classify("tensorflow.python.keras.layers.Dense").status is S
    assert check.classify("keras.ipu.PipelineStage").status is S
    assert check.classify("tensorflow.python.ipu.keras.optimizers.CrossReplicaOptimizer").status is M
    assert check.classify("tensorflow.compiler.plugin.poplar.nonexistent_module").status is M


# -- the command line ---------------------------------------------------------------------------------


def test__cli__table_and_exit_status(project):
    r = popjit_check(["main.py"], project)
    assert r.returncode == 1, r.stderr
    row = next(line for line in r.stdout.splitlines() if "ipu.scopes.partials_type" in line)
    assert re.search(r"ipu\.scopes\.partials_type\s+│ not yet supported\s+│ main\.py:5\s+│\s+2 │", row), row
    assert "24 TensorFlow names in 5 files: 16 supported, 7 not yet supported, 1 not applicable on a CPU" in r.stdout
    assert "tf.signal.stft: tf.signal is not implemented by popjit" in r.stdout


def test__cli__json_schema(project):
    r = popjit_check(["main.py", "--json"], project)
    assert r.returncode == 1, r.stderr
    out = json.loads(r.stdout)
    assert set(out) == {"version", "files", "exit_status", "summary", "names", "errors"}
    assert (out["version"], out["exit_status"], out["errors"]) == (check.SCHEMA_VERSION, 1, [])
    assert out["summary"] == {"supported": 16, "missing": 7, "not_applicable": 1}
    by_name = {n["name"]: n for n in out["names"]}
    assert {name: (n["status"], n["count"]) for name, n in by_name.items()} == \
        {name: (check.JSON_STATUS[s], count) for name, (s, _, count) in EXPECTED.items()}
    assert by_name["ipu.scopes.partials_type"] == {
        "name": "ipu.scopes.partials_type", "module": "tensorflow.python.ipu.scopes.partials_type",
        "status": "missing", "reason": unimplemented_message("ipu.scopes.partials_type"), "count": 2,
        "locations": [{"file": "main.py", "line": 5}, {"file": "main.py", "line": 20}]}


def test__cli__all_supported_is_status_0_and_a_directory_reads_every_file(tmp_path):
    write(tmp_path / "app" / "a.py", "import tensorflow as tf\nx = tf.constant(1.0)\n")
    write(tmp_path / "app" / "sub" / "b.py", "from tensorflow.python import ipu\nipu.utils.set_gcl_options\n")
    write(tmp_path / "app" / ".hidden" / "c.py", "import tensorflow as tf\ntf.einsum\n")
    r = popjit_check(["app", "--json"], tmp_path)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["files"] == ["app/a.py", "app/sub/b.py"]
    assert {n["name"]: n["status"] for n in out["names"]} == {
        "tf": "supported", "tf.constant": "supported", "ipu": "supported",
        "ipu.utils.set_gcl_options": "not_applicable"}


def test__cli__unreadable_input_is_status_2_with_file_and_line(tmp_path):
    write(tmp_path / "good.py", "import tensorflow as tf\ntf.constant\n")
    write(tmp_path / "bad.py", "import tensorflow as tf\n\ndef f(:\n    pass\n")
    r = popjit_check(["good.py", "bad.py", "missing.py"], tmp_path)
    assert r.returncode == 2
    assert "popjit check: error: bad.py:3: SyntaxError: " in r.stderr
    assert "popjit check: error: missing.py: No such file or directory" in r.stderr
    assert "2 TensorFlow names in 1 file: 2 supported" in r.stdout  # what could be read is still reported


# -- the one table ------------------------------------------------------------------------------------


def _dotted(name: str) -> str:
    """Graphcore's spelling back to the module path: ``ipu.x`` -> ``tensorflow.python.ipu.x``."""
    for short, long in (("ipu.", "tensorflow.python.ipu."), ("tf.", "tensorflow.")):
        if name.startswith(short):
            return long + name[len(short):]
    return name


def _raised_by(name: str) -> tuple[UnimplementedError, str]:
    """The error popjit raises where a program uses ``name``, and the name that error is about (a stub's
    own name, which may be spelled otherwise)."""
    if name.startswith(("keras.Model.", "keras.Sequential.")):  # a method: used on a model, which names it so
        name = "tf.keras.Model." + name.rpartition(".")[2]
        obj = tf.keras.Sequential()
        parts = [name.rpartition(".")[2]]
    else:
        parts = _dotted(name).split(".")
        obj, k = check.popjit_module(parts)
        parts = parts[k:]
    try:
        for part in parts:
            obj = getattr(obj, part)
    except UnimplementedError as e:
        return e, name
    stub = stub_name(obj)
    assert stub, f"{name} exists in popjit and is no stub: take its entry out of popjit/support.py"
    try:
        obj() if callable(obj) else obj.anything  # a stub class, function, module or namespace stand-in
    except UnimplementedError as e:
        return e, stub
    raise AssertionError(f"{name} raised nothing")


def _spelled(status: Status) -> list[tuple[Entry, str]]:
    return [(e, n) for e in entries(status) for n in (e.name, *e.spellings)]


@pytest.mark.parametrize("entry, name", _spelled(M), ids=lambda x: x if isinstance(x, str) else "")
def test__table__missing_entry_is_the_error_popjit_raises(entry, name):
    error, about = _raised_by(name)
    assert entry.message(about) in str(error) or entry.message(f"{about}.anything") in str(error)
    assert check.classify(_dotted(name)).status is M


@pytest.mark.parametrize("entry, name", _spelled(NA), ids=lambda x: x if isinstance(x, str) else "")
def test__table__not_applicable_entry_is_accepted(entry, name):
    assert entry.reason
    assert check.classify(_dotted(name)) == check.Verdict(NA, entry.reason)  # it exists, and is no stub


def test__table__every_stub_in_popjit_has_an_entry():
    import popjit.ipu.keras  # noqa: F401  (so its stub classes are among the loaded modules)

    stubs = {stub_name(v) for m in list(sys.modules.values()) if getattr(m, "__name__", "").startswith("popjit.")
             for v in list(vars(m).values()) if stub_name(v)}
    assert {"ipu.scopes.partials_type", "ipu.scopes.outside_compilation_scope"} <= stubs
    assert [s for s in sorted(stubs) if lookup(s) is None or lookup(s).status is not M] == []


def test__table__gives_popjit_runs_missing_module_error():
    """``import tensorflow.python.ipu.within_replica_ops`` under ``popjit run``: the finder's error (called
    here directly, not installed) carries the table's reason; a module the table does not list, the
    generic text."""
    finder = runner.TensorFlowFinder()
    with pytest.raises(ModuleNotFoundError) as info:
        finder.find_spec("tensorflow.python.ipu.within_replica_ops")
    assert str(info.value) == ("No module named 'tensorflow.python.ipu.within_replica_ops': "
                               + multi_ipu_message("ipu.within_replica_ops"))
    with pytest.raises(ModuleNotFoundError, match=r"popjit does not provide tensorflow\.contrib"):
        finder.find_spec("tensorflow.contrib")


def test__lookup__covers_names_below_and_both_keras_spellings():
    assert lookup("ipu.within_replica_ops.pipeline").name == "ipu.within_replica_ops"
    assert lookup("ipu.ops.within_replica_ops").name == "ipu.within_replica_ops"
    assert spellings("tf.keras.ipu.PipelineStage") == ("tf.keras.ipu.PipelineStage", "keras.ipu.PipelineStage")
    assert lookup("tf.keras.ipu.PipelineStage") is None  # supported: not in the table
    assert lookup("ipu.within_replica_opsx") is None
    assert unimplemented_message("tf.nn.top_k").startswith("tf.nn.top_k is not implemented by popjit. See")


# -- real programs ------------------------------------------------------------------------------------


def seed_scripts(text: str) -> list[str]:
    """The numbered listings of a seed document (`` 1import numpy as np``...) as Python sources, each
    line at its listed number (the listings leave out blank lines)."""
    scripts, lines = [], {}
    for raw in text.splitlines():
        m = re.match(r"^ ?(\d+)(.*)$", raw)
        number = int(m.group(1)) if m else 0
        if m and ((number == 1 and m.group(2).startswith(("import", "from"))) or (lines and number > max(lines))):
            if number == 1 and lines:
                scripts.append(lines)
                lines = {}
            lines[number] = m.group(2)
        elif lines:
            scripts.append(lines)
            lines = {}
    if lines:
        scripts.append(lines)
    return ["\n".join(s.get(i, "") for i in range(1, max(s) + 1)) + "\n" for s in scripts]


@pytest.mark.skipif(not SEEDS.is_dir(), reason="the seed documents are not on this machine")
def test__check__over_the_seed_scripts(tmp_path, monkeypatch):
    written = 0
    for doc in sorted(SEEDS.glob("*.txt")):
        for k, source in enumerate(seed_scripts(doc.read_text())):
            try:
                compile(source, "seed", "exec")
            except SyntaxError:  # a listing whose seed dropped lines it needs
                continue
            write(tmp_path / "seeds" / f"{doc.stem[:3]}_{k}.py", source)
            written += 1
    assert written >= 5
    monkeypatch.chdir(tmp_path)
    report = check.check(["seeds"])
    assert report.exit_status in (check.OK, check.MISSING) and len(report.files) == written
    statuses = {f.name: f.verdict.status for f in report.findings}
    for name in ("ipu.config.IPUConfig", "ipu.ipu_strategy.IPUStrategy", "tf.matmul", "tf.compat.v1.placeholder",
                 "ipu.scopes.ipu_scope", "tf.compat.v1.Session", "tf.constant"):
        assert statuses[name] is S, name
    for f in report.findings:
        assert (f.verdict.status is S) == (f.verdict.reason == ""), f


def test__check__over_the_examples(monkeypatch):
    monkeypatch.chdir(ROOT)
    report = check.check(["examples"])
    assert report.problems == [] and len(report.files) >= 6
    statuses = {f.name: f.verdict.status for f in report.findings}
    for name in ("tf.keras.layers.Conv2D", "ipu.ipu_strategy.IPUStrategy", "tf.compat.v1.Session",
                 "ipu.ipu_compiler.compile", "tf.keras.layers.MultiHeadAttention"):
        assert statuses[name] is S, name
