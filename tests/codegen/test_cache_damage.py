"""A damaged or unusable cache never stops a program: each kind of file popjit writes (generated
modules, program libraries, units, executables, Numba's index and data files for the kernel library), damaged in
each way (truncated, emptied, overwritten with noise, swapped with another entry's), is warned
about once with its name, rebuilt, and the program prints the right result. Real directories,
fresh processes."""

from __future__ import annotations

import itertools
import os
import random
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.helpers import run_program

pytestmark = pytest.mark.slow

PROGRAM = textwrap.dedent("""
    import warnings
    warnings.simplefilter("always")
    import numpy as np
    import popjit.tensorflow as tf
    from popjit import ipu

    cfg = ipu.config.IPUConfig()
    cfg.auto_select_ipus = 1
    cfg.configure_ipu_system()

    @tf.function(jit_compile=True)
    def f(x):
        for _ in tf.range(5):
            x = tf.tanh(x) * 1.5 + 0.25
        return tf.reduce_max(x, axis=0, keepdims=True) + x

    @tf.function(jit_compile=True)
    def g(x):
        return tf.exp(x) - x

    strategy = ipu.ipu_strategy.IPUStrategy()
    with strategy.scope():
        x = np.linspace(-1, 1, 8, dtype=np.float32)
        print("result", repr(strategy.run(f, args=(x,)).numpy().tolist()),
              repr(strategy.run(g, args=(x,)).numpy().tolist()))
""")

#: Every kind of file, as a glob under the cache's generation directory.
KINDS = {
    "generated module": "popjit_gen/*.py",
    "program library": "programs/*.lib",
    "unit": "units/*.unit",
    "unit group": "units/*.group",
    "executable": "executables/*.exe",
    "index of a kernel": "numba/kernels_*/*.nbi",
    "data of a kernel": "numba/kernels_*/*.nbc",
}


def run(cache: Path, home: Path) -> subprocess.CompletedProcess:
    return run_program(PROGRAM, cache, HOME=str(home))


def result(out: subprocess.CompletedProcess) -> str:
    (line,) = [ln for ln in out.stdout.splitlines() if ln.startswith("result ")]
    return line


def warned_files(out: subprocess.CompletedProcess) -> list[str]:
    return re.findall(r"CacheWarning: popjit's cache entry (\S+)", out.stderr)


def damage(files: list[Path], how: str, rnd: random.Random) -> None:
    contents = [f.read_bytes() for f in files]
    for k, f in enumerate(files):
        if how == "truncated":
            f.write_bytes(contents[k][:10])
        elif how == "emptied":
            f.write_bytes(b"")
        elif how == "noise":
            f.write_bytes(bytes(rnd.getrandbits(8) for _ in range(300)))
        elif how == "swapped":  # another entry's (valid) file of the same kind
            f.write_bytes(contents[(k + 1) % len(files)])


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> tuple[str, Path]:
    """The program's output with an undamaged cache (and a home directory that must stay empty)."""
    home = tmp_path_factory.mktemp("home")
    return result(run(tmp_path_factory.mktemp("clean") / "cache", home)), home


@pytest.mark.parametrize("how", ["truncated", "emptied", "noise", "swapped"])
def test__every_kind_of_file_damaged__warned_rebuilt_and_the_result_is_right(tmp_path, clean, how):
    expected, home = clean
    cache = tmp_path / "cache"
    assert result(run(cache, home)) == expected
    (generation,) = cache.glob("gen-*")
    files = {kind: sorted(generation.glob(pattern)) for kind, pattern in KINDS.items()}
    assert all(len(f) >= 2 for f in files.values()), {k: len(v) for k, v in files.items()}
    rnd = random.Random(how)
    for group in files.values():
        damage(group, how, rnd)
    damaged = {str(f) for f in itertools.chain(*files.values())}

    first = run(cache, home)
    assert result(first) == expected
    warned = warned_files(first)
    assert warned, first.stderr[-2000:]
    assert len(warned) == len(set(warned)), "each damaged entry is reported once"
    for name in warned:
        assert name in damaged or any(d.startswith(name.removesuffix(".nbi")) for d in damaged), name
    assert any(re.search(r"popjit_gen/\w+\.py$", name) for name in warned), "a damaged module is named"
    assert "Traceback" not in first.stderr

    second = run(cache, home)
    assert result(second) == expected
    assert warned_files(second) == [], "the first run repaired what it used"
    assert list(home.iterdir()) == []


def test__an_unusable_cache_directory__one_warning_and_compiling_in_memory(tmp_path, clean):
    expected, home = clean
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    out = run(blocker / "cache", home)
    assert result(out) == expected
    assert len(re.findall(r"CacheWarning: popjit cannot write its cache directory", out.stderr)) == 1
    assert "compiling in memory" in out.stderr
    assert list(home.iterdir()) == [], "nothing falls back to a cache in the home directory"
    assert blocker.read_text() == "not a directory"


def test__several_processes_filling_one_empty_cache_at_once(tmp_path, clean):
    expected, home = clean
    cache = tmp_path / "cache"
    env = {**os.environ, "POPJIT_CACHE_DIR": str(cache), "HOME": str(home)}
    procs = [subprocess.Popen([sys.executable, "-c", PROGRAM], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env) for _ in range(4)]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (stdout, stderr) in zip(procs, outs):
        assert p.returncode == 0, stderr[-2000:]
        assert expected in stdout.splitlines()
        assert "CacheWarning" not in stderr
    assert result(run(cache, home)) == expected
