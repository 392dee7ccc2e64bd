"""Units: each generated codelet and library kernel a program calls is kept per machine (in the object
it was compiled into with others, its group) and shared by every program that calls it with the same
argument types. A new program calling codelets compiled before compiles only its engine and its new
codelets; a later process finds them on disk. Real compiles, real cache files, fresh processes."""

from __future__ import annotations

import logging
import re
import shutil
import textwrap
from pathlib import Path

import numpy as np
import pytest

import popjit.tensorflow as tf
from popjit.codegen.library import GROUP_MAGIC, UNIT_MAGIC, _entry_unit
from popjit.kernels.gemm import GEMM_BLOCK_ENTRY, PACK_ENTRY
from tests.helpers import run_program

CODELETS = re.compile(r"machine code of '[^']+' in [\d.]+ s \((\d+) codelets? compiled, (\d+) from the cache")


def _codelet_counts(caplog: pytest.LogCaptureFixture) -> list[tuple[int, int]]:
    """(compiled, from the cache) of each machine-code phase logged."""
    found = [CODELETS.search(r.getMessage()) for r in caplog.records if r.name == "popjit"]
    return [(int(m[1]), int(m[2])) for m in found if m]


def _softplus_rows(x, w):
    h = tf.nn.softplus(tf.matmul(x, w) * 0.75 - 0.125)
    return h - tf.reduce_max(h, axis=1, keepdims=True)


def _reference(x: np.ndarray, w: np.ndarray, times: int) -> np.ndarray:
    x = x.astype(np.float64)
    for _ in range(times):
        h = np.logaddexp(0.0, (x @ w) * 0.75 - 0.125)
        x = h - h.max(1, keepdims=True)
    return x


def test__a_new_program_calling_the_same_codelets__compiles_only_its_new_ones(caplog):
    once = tf.function(_softplus_rows, jit_compile=True)

    @tf.function(jit_compile=True)
    def three_times(x, w):
        for _ in tf.range(3):
            x = _softplus_rows(x, w)
        return x

    rng = np.random.default_rng(5)
    x = rng.standard_normal((6, 7)).astype(np.float32)
    w = rng.standard_normal((7, 7)).astype(np.float32) * 0.5
    with caplog.at_level(logging.INFO, logger="popjit"):
        np.testing.assert_allclose(once(x, w).numpy(), _reference(x, w, 1), rtol=2e-5, atol=2e-5)
        np.testing.assert_allclose(three_times(x, w).numpy(), _reference(x, w, 3), rtol=2e-5, atol=2e-5)
    (first_compiled, first_cached), (compiled, cached) = _codelet_counts(caplog)
    # the first program may find units of other tests; the second, another engine (a loop around the same
    # body, and a copy to carry x), finds every codelet of the first and compiles what is new
    assert cached >= first_compiled + first_cached >= 3, (first_compiled, first_cached, cached)
    assert compiled <= 1, compiled


PROGRAM = textwrap.dedent("""
    import numpy as np
    import popjit.tensorflow as tf

    def body(x):
        y = tf.sigmoid(x) * x - tf.reduce_mean(x, axis=1, keepdims=True)
        return y * tf.reduce_sum(tf.square(y), axis=0)

    @tf.function(jit_compile=True)
    def f(x):
        for _ in tf.range(TIMES - 1):
            x = body(x)
        return body(x)

    x = np.linspace(-2, 2, 24, dtype=np.float32).reshape(4, 6)
    print("result", repr(f(x).numpy().tolist()))
""")


def _reference_of(times: int) -> np.ndarray:
    x = np.linspace(-2, 2, 24, dtype=np.float32).reshape(4, 6).astype(np.float64)
    for _ in range(times):
        y = x / (1 + np.exp(-x)) - x.mean(1, keepdims=True)
        x = y * (y * y).sum(0)
    return x


def _run(cache: Path, times: int) -> tuple[int, int]:
    """Run the program (``body`` ``times`` times) in a fresh process: its (compiled, from the cache)."""
    out = run_program(PROGRAM.replace("TIMES", str(times)), cache, POPJIT_LOG="info")
    (line,) = [ln for ln in out.stdout.splitlines() if ln.startswith("result ")]
    np.testing.assert_allclose(eval(line.removeprefix("result ")), _reference_of(times), rtol=1e-5, atol=1e-5)
    (counts,) = [(int(m[1]), int(m[2])) for m in CODELETS.finditer(out.stderr)]
    return counts


@pytest.mark.slow
def test__a_later_process__loads_the_units_from_disk_and_compiles_only_what_is_new(tmp_path):
    cache = tmp_path / "cache"
    compiled, cached = _run(cache, 1)
    assert compiled >= 2 and cached == 0, (compiled, cached)
    (generation,) = cache.glob("gen-*")
    units = sorted((generation / "units").glob("*.unit"))
    groups = sorted((generation / "units").glob("*.group"))
    assert len(units) == compiled, "one file per unit, naming its group"
    assert all(UNIT_MAGIC.encode() in u.read_bytes()[:64] for u in units)
    assert 1 <= len(groups) <= len(units), "the units compiled together are one object"
    assert all(GROUP_MAGIC.encode() in g.read_bytes()[:64] for g in groups)

    # a new program (its engine loops) in a new process: none of its codelets compiled
    assert _run(cache, 3) == (0, compiled)
    # without the program libraries and executables, from the units alone
    for kept in ("programs", "executables"):
        shutil.rmtree(generation / kept)
    assert _run(cache, 1) == (0, compiled)
    # without the units, everything again
    for kept in ("units", "programs", "executables"):
        shutil.rmtree(generation / kept)
    assert _run(cache, 1) == (compiled, 0)


OWN_GEMM = textwrap.dedent("""
    import numpy as np
    import popjit.tensorflow as tf

    f = tf.function(lambda a, b: tf.nn.relu(tf.matmul(a, b)), jit_compile=True)
    rng = np.random.default_rng(2)
    a = rng.standard_normal((ROWS, 300)).astype(np.float32)
    b = rng.standard_normal((300, 200)).astype(np.float32)
    np.testing.assert_allclose(f(a, b).numpy(), np.maximum(a.astype(np.float64) @ b, 0), rtol=1e-4, atol=1e-4)
    print("ok")
""")


@pytest.mark.slow
def test__own_gemm_units__load_in_a_later_process(tmp_path):
    """popjit's own gemm allocates its packed panels with Numba's run-time (NRT): a later process that
    loads it from the cache, as the same program or as a unit of a new one, must register NRT's symbols
    first (it aborted in LLVM with 'Symbol not found: NRT_Free')."""
    cache, env = tmp_path / "cache", {"POPJIT_MATMUL": "popjit", "NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    for rows in (64, 64, 96):  # compiled; the program loaded; a new program whose units are loaded
        out = run_program(OWN_GEMM.replace("ROWS", str(rows)), cache, check=False, **env)
        assert out.returncode == 0 and out.stdout.split() == ["ok"], (rows, out.stderr[-2000:])


#: A wide product and a tall one: both of the own gemm's packed drivers.
TALL_AND_WIDE = textwrap.dedent("""
    import numpy as np
    import popjit.tensorflow as tf

    f = tf.function(lambda a, b, e: (tf.nn.relu(tf.matmul(a, b)), tf.matmul(e, b)), jit_compile=True)
    rng = np.random.default_rng(2)
    a = rng.standard_normal((64, 300)).astype(np.float32)
    b = rng.standard_normal((300, 200)).astype(np.float32)
    e = rng.standard_normal((1024, 300)).astype(np.float32)
    wide, tall = f(a, b, e)
    np.testing.assert_allclose(wide.numpy(), np.maximum(a.astype(np.float64) @ b, 0), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(tall.numpy(), e.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
    print("ok")
""")


@pytest.mark.slow
def test__library_kernels__are_the_machines_kernel_library_which_a_new_program_links_as_it_is(tmp_path):
    """Each library kernel is a group of its own, kept in ``kernels/`` apart from the codelets' units: a
    new program (the codelets' units gone too, as in the benchmark's cold first call) links the kernels
    compiled before and compiles only its codelets. Both packed drivers call ``gemm_block`` through its
    entry point, a unit of its own and the only copy of it; it and the packing kernels call ``_pack`` through
    its own."""
    cache, env = tmp_path / "cache", {"POPJIT_MATMUL": "popjit", "NUMBA_CACHE_DIR": str(tmp_path / "numba"),
                                      "POPJIT_LOG": "info"}

    def counts() -> tuple[int, int]:
        out = run_program(TALL_AND_WIDE, cache, **env)
        assert out.stdout.split() == ["ok"], out.stderr[-2000:]
        (found,) = [(int(m[1]), int(m[2])) for m in CODELETS.finditer(out.stderr)]
        return found

    compiled, cached = counts()
    (generation,) = cache.glob("gen-*")
    kernels, codelets = (sorted((generation / d).glob("*.unit")) for d in ("kernels", "units"))
    assert len(list((generation / "kernels").glob("*.group"))) == len(kernels), "a group each"
    entries = {f"{_entry_unit(prefix + 'float32')[0]}.unit" for prefix in (GEMM_BLOCK_ENTRY, PACK_ENTRY)}
    assert entries <= {k.name for k in kernels}, "gemm_block's and _pack's entry points are units of their own"
    callees = [k for k in kernels if k.name not in entries]
    assert callees and codelets and cached == 0 and compiled == len(callees) + len(codelets)
    symbol = (GEMM_BLOCK_ENTRY + "float32").encode()
    groups = [g.read_bytes() for g in (generation / "kernels").glob("*.group")]
    copies = [g for g in groups if g.count(b"gemm_block") > g.count(symbol)]
    assert len(copies) == 1, "one copy of gemm_block for both drivers: the entry point"
    packing = [g for g in groups if (PACK_ENTRY + "float32").encode() in g]
    assert len(packing) >= 3, "gemm_block and the packing kernels call _pack's entry point, besides its own group"
    for program_files in ("units", "programs", "executables"):
        shutil.rmtree(generation / program_files)
    assert counts() == (len(codelets), len(callees))


@pytest.mark.slow
def test__the_own_gemms_first_use__compiles_no_kernel_through_its_dispatcher(tmp_path):
    """On an empty cache the own gemm's kernels are compiled by Numba's pipeline into the kernel library only:
    ``_pack``, called by ``gemm_block`` and the packing kernels through its entry point, is never typed through
    its dispatcher, whose machine code nothing ran (1.1 s of the first use when each caller typed it)."""
    probe = TALL_AND_WIDE + textwrap.dedent("""
        from popjit.kernels import gemm
        print(sorted(k.py_func.__name__ for k in (gemm._pack, gemm.gemm_block, gemm.pack_a_panels, gemm.pack_b_panels)
                     if k.overloads))
    """)
    out = run_program(probe, tmp_path / "cache", POPJIT_MATMUL="popjit", NUMBA_CACHE_DIR=str(tmp_path / "numba"))
    assert out.stdout.split() == ["ok", "[]"], out.stdout + out.stderr[-2000:]


IMPLICIT_CONV = textwrap.dedent("""
    import numpy as np
    import popjit.tensorflow as tf

    f = tf.function(lambda x, w: tf.nn.conv2d(x, w, 1, "VALID") * SCALE, jit_compile=True)
    rng = np.random.default_rng(4)
    x = rng.standard_normal((4, 9, 9, 8)).astype(np.float32)
    w = rng.standard_normal((3, 3, 8, 16)).astype(np.float32)
    windows = np.lib.stride_tricks.sliding_window_view(x.astype(np.float64), (3, 3), axis=(1, 2))
    expected = np.tensordot(windows, w, axes=([3, 4, 5], [2, 0, 1])) * SCALE
    np.testing.assert_allclose(f(x, w).numpy(), expected, rtol=1e-4, atol=1e-4)
    print("ok")
""")


@pytest.mark.slow
def test__an_implicit_products_codelet_is_a_unit_which_another_program_loads(tmp_path):
    """The codelet of a product computing a convolution's patches is compiled by Numba's pipeline (2-3 s),
    into a unit: a different program with the same convolution (in a later process) loads it, compiling
    only its own new codelets. (As the program's own, it was compiled again for every program.)"""
    cache, env = tmp_path / "cache", {"POPJIT_MATMUL": "popjit", "POPJIT_LOG": "info"}
    counts = []
    for scale in ("1.0", "0.5"):
        out = run_program(IMPLICIT_CONV.replace("SCALE", scale), cache, check=False, **env)
        assert out.returncode == 0 and out.stdout.split() == ["ok"], (scale, out.stderr[-2000:])
        assert "through Numba" not in out.stderr, "kept as a unit, not the program's own"
        counts.append([(int(m[1]), int(m[2])) for m in CODELETS.finditer(out.stderr)])
    (generation,) = cache.glob("gen-*")
    assert len([p for p in (generation / "popjit_gen").glob("g_*.py") if "kg.call_gemm_block" in p.read_text()]) == 1
    (first,), (second,) = counts
    assert first[0] >= 2 and second[1] >= 2 and second[0] < first[0], counts


@pytest.mark.slow
def test__an_implicit_products_codelet_calls_the_kernel_librarys_gemm_block(tmp_path):
    """A computed product's codelet calls ``gemm_block`` through its entry point in the kernel library, as
    the own gemm's drivers do: the machine holds one copy of it (a copy linked into each caller was
    1.3 s of LLVM time for every convolution a machine first met). A later process loads the entry point
    before the codelet, and compiles it again when the kernel library has lost it."""
    cache, env = tmp_path / "cache", {"POPJIT_MATMUL": "popjit", "NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    entry = (GEMM_BLOCK_ENTRY + "float32").encode()

    def run() -> None:
        out = run_program(IMPLICIT_CONV.replace("SCALE", "1.0"), cache, check=False, **env)
        assert out.returncode == 0 and out.stdout.split() == ["ok"], out.stderr[-2000:]

    def groups(kept: str) -> list[bytes]:
        return [g.read_bytes() for g in (generation / kept).glob("*.group")]

    run()
    (generation,) = cache.glob("gen-*")
    assert len([g for g in groups("units") if entry in g]) == 1, "the codelet calls the entry point"
    copies = [g for g in groups("units") + groups("kernels") if g.count(b"gemm_block") > g.count(entry)]
    assert len(copies) == 1 and copies[0] in groups("kernels"), "gemm_block compiled once, behind its entry point"
    shutil.rmtree(generation / "kernels")
    run()  # the program and its units from the cache, the entry point compiled again
    assert [g for g in groups("kernels") if entry in g]
