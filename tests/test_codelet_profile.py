"""The developer's profiler (``benchmarks/codelet_profile.py``) names popjit's machine code for perf:
its map lists every function of the program libraries loaded, the engine's and the codelets' entry
points included, as perf reads JIT maps (``start size name``, hexadecimal, non-overlapping), each unit
of machine code with the engine's kernels calling it. perf itself is not run here."""

from __future__ import annotations

import itertools
import os
import re

import numpy as np

import popjit.tensorflow as tf
from benchmarks import codelet_profile


def test__the_perf_map_names_every_entry_point_of_a_loaded_program(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("POPJIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(codelet_profile, "_LIBRARIES", [])
    codelet_profile._record_loaded_libraries()

    @tf.function(jit_compile=True)
    def step(x):
        return tf.reduce_sum(tf.tanh(x) * 2.0)

    x = np.linspace(0, 1, 4096, dtype=np.float32)
    np.testing.assert_allclose(step(x).numpy(), (np.tanh(x.astype(np.float64)) * 2).sum(), rtol=1e-5)
    path = tmp_path / "perf.map"
    count = codelet_profile.write_perf_map(path)
    rows = [line.split(" ", 2) for line in path.read_text().splitlines()]
    assert count == len(rows) > 0
    spans = sorted((int(start, 16), int(size, 16), name) for start, size, name in rows)
    assert all(a + size <= b for (a, size, _), (b, _, _) in itertools.pairwise(spans)), "entries overlap"
    starts = {start for start, _, _ in spans}
    (_, library), = codelet_profile._LIBRARIES
    assert library.engine in starts
    assert set(library.addresses) <= starts
    engine = step.get_concrete_function(x).executable("/device:CPU:0").as_text("engine")
    kernels = set(re.findall(r"# (k\d+_\w+)", engine))
    named = [name for _, _, name in spans if name.startswith("popjit.unit.")]
    assert kernels and all(any(f"({k}" in name or f" {k}" in name for name in named) for k in kernels), named


def test__the_profiled_pool_is_pinned_unless_the_user_pinned_it(monkeypatch) -> None:
    from popjit.kernels.threads import available_cores

    monkeypatch.delenv("POPJIT_NUM_THREADS", raising=False)
    codelet_profile.pin_threads()
    assert os.environ["POPJIT_NUM_THREADS"] == str(available_cores())
    monkeypatch.setenv("POPJIT_NUM_THREADS", "7")
    codelet_profile.pin_threads()
    assert os.environ["POPJIT_NUM_THREADS"] == "7"
