"""The docs stay true to the code: the generated reference is current, and the examples run."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _run(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "POPJIT_CACHE_DIR": os.environ.get("POPJIT_CACHE_DIR", str(tmp_path / "cache"))}
    return subprocess.run(args, capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)


def test__reference__is_generated_from_the_current_code():
    sys.path.insert(0, str(ROOT / "docs"))
    try:
        import make_reference
    finally:
        sys.path.pop(0)
    assert (ROOT / "docs" / "reference.md").read_text() == make_reference.reference(), \
        "docs/reference.md is stale: run `python docs/make_reference.py`"


def test__limitations__generated_section_is_popjit_support_table():
    sys.path.insert(0, str(ROOT / "docs"))
    try:
        import make_limitations
    finally:
        sys.path.pop(0)
    text = (ROOT / "docs" / "limitations.md").read_text()
    assert text == make_limitations.limitations(text), \
        "docs/limitations.md's generated section is stale: run `python docs/make_limitations.py`"
    assert "`ipu.within_replica_ops` (`ipu.ops.within_replica_ops`)" in make_limitations.section()


def test__tour__runs_every_stage(tmp_path):
    r = _run([sys.executable, str(ROOT / "docs" / "tour.py")], tmp_path)
    assert r.returncode == 0, r.stderr
    for stage in ("1. trace", "2. graph passes", "3. lower", "4. schedule", "5. codegen", "6. run"):
        assert stage in r.stdout
    assert r.stdout.count(": True") == 3, r.stdout[-400:]


def test__readme_example__runs(tmp_path):
    readme = (ROOT / "README.md").read_text()
    (code,) = re.findall(r"```python\n(.*?)```", readme, re.S)
    script = tmp_path / "example.py"
    script.write_text(code + "\nimport numpy as _np\nprint('shape', tuple(y.shape), _np.all(_np.isfinite(y)))\n")
    r = _run([sys.executable, str(script)], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "shape (1048576,) True" in r.stdout


def test__readme__first_screen_has_the_two_commands():
    first_screen = (ROOT / "README.md").read_text().splitlines()[:15]
    text = "\n".join(first_screen)
    assert "pip install . && popjit demo" in text
    ci = (ROOT / ".ci" / "run").read_text()
    test_command = re.search(r'pip install "\.\[test\]" && (.+?)\s+#', text).group(1)
    assert test_command.strip() in ci, f"`.ci/run` must run the README's test command: {test_command}"


def test__pipeline_doc__lists_the_layers_the_layer_test_enforces():
    from tests.test_layers import LAYERS

    text = (ROOT / "docs" / "pipeline.md").read_text()
    section = text.split("## Layers", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1:3] for line in section.splitlines() if line.startswith("| ")][1:]
    documented = [(name.strip(), tuple(re.findall(r"`([\w.]+)`", units))) for name, units in rows]
    enforced = [(name, tuple(u if u == "popjit" else u.removeprefix("popjit.") for u in units))
                for name, units in LAYERS]
    assert documented == enforced
