"""``POPLAR_ENGINE_OPTIONS`` autoReport end to end: real compiles under IPUStrategy and Keras write one
report directory per program, a program from the executable cache too, a bad value fails first."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import popjit.tensorflow as tf
from popjit.pipeline import cache, store
from popjit.profile import EngineOptionsError
from popjit.tensorflow.python import ipu

REPORT_DIR = re.compile(r"tf_report__\d{4}-\d\d-\d\d__\d\d-\d\d-\d\d\.\d{3}__(\d+)(__\d+)?")


def _reports(root: Path) -> list[tuple[dict, dict]]:
    """(frameworks.json, profile.json) of each report directory under ``root``, oldest first."""
    out = []
    for d in sorted(root.iterdir(), key=lambda p: p.stat().st_mtime):
        m = REPORT_DIR.fullmatch(d.name)
        assert m and int(m.group(1)) == os.getpid(), d.name
        out.append((json.loads((d / "frameworks.json").read_text()), json.loads((d / "profile.json").read_text())))
    return out


@pytest.fixture
def report_root(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "report"
    options = {"autoReport.all": "true", "autoReport.directory": str(root)}
    monkeypatch.setenv("POPLAR_ENGINE_OPTIONS", json.dumps(options))
    cache.clear()  # a program kept in memory by an earlier test compiles nothing, so writes no report
    return root


def _step(scale: float):
    @tf.function(jit_compile=True)
    def step(x):
        acc = tf.zeros_like(x)
        for _ in tf.range(4):
            acc = acc * 0.5 + x * scale
        return tf.reduce_sum(acc)

    return step


def test__strategy_run__writes_one_report_per_program(report_root):
    strategy = ipu.ipu_strategy.IPUStrategy()
    step = _step(3.0)
    x = np.ones(256, np.float32)
    with strategy.scope():
        strategy.run(step, args=(x,))
        strategy.run(step, args=(x,))  # the same program again: no new report
    ((frameworks, profile),) = _reports(report_root)
    exe = step.get_concrete_function(x).executable("/device:IPU:0")
    assert frameworks["cluster"] == profile["program"] == exe.schedule.name
    assert profile["total_cycles"] == exe.schedule.total_cycles
    (repeat,) = [n for n in profile["graph"]["program_tree"]["children"] if n["type"] == "Repeat"]
    assert repeat["count"] == 4
    assert len(profile["graph"]["compute_sets"]) == len(exe.schedule.steps)


def test__a_program_from_the_executable_cache__still_writes_its_profile(report_root, monkeypatch):
    loaded = []
    real_load = store.load
    monkeypatch.setattr(store, "load", lambda key: loaded.append(real_load(key)) or loaded[-1])
    step = _step(5.0)
    x = np.ones(128, np.float32)
    with tf.device("/device:IPU:0"):
        first = float(step(x))
        cache.clear()
        again = float(_step(5.0)(x))  # a new trace of the same program: loaded from the disk cache
    assert first == again
    assert loaded[-1] is not None, "the second compile came from the executable cache"
    (_, compiled), (_, cached) = _reports(report_root)
    for part in ("graph", "execution"):
        assert compiled[part] == cached[part]


def test__host_programs_write_no_report(report_root):
    tf.function(lambda x: x * 7.0)(np.ones(8, np.float32))
    assert not report_root.exists()


def test__graph_profile_only(tmp_path, monkeypatch):
    monkeypatch.setenv("POPLAR_ENGINE_OPTIONS", json.dumps({"autoReport.outputGraphProfile": "true"}))
    monkeypatch.chdir(tmp_path)  # Poplar's default directory: the current one
    cache.clear()
    with tf.device("/device:IPU:0"):
        _step(11.0)(np.ones(64, np.float32))
    ((_, profile),) = _reports(tmp_path)
    assert "graph" in profile and "execution" not in profile


def test__a_bad_option__fails_before_compiling_and_leaves_nothing_behind(tmp_path, monkeypatch):
    monkeypatch.setenv("POPLAR_ENGINE_OPTIONS", '{"autoReport.all":"true", "autoReport.outputFoo":"true"}')
    monkeypatch.chdir(tmp_path)
    cache.clear()
    step = _step(13.0)
    unknown = r"Unrecognised option 'autoReport\.outputFoo'"
    with tf.device("/device:IPU:0"), pytest.raises(EngineOptionsError, match=unknown):
        step(np.ones(64, np.float32))
    monkeypatch.delenv("POPLAR_ENGINE_OPTIONS")
    with tf.device("/device:IPU:0"):
        assert float(step(np.ones(64, np.float32))) == pytest.approx(64 * 13.0 * (1 + 0.5 + 0.25 + 0.125))
    assert list(tmp_path.iterdir()) == []


def test__out_of_memory_under_the_ipu_model__is_marked_in_the_report(report_root, monkeypatch, fresh_ipu_system):
    monkeypatch.setenv("TF_POPLAR_FLAGS", "--use_ipu_model")
    cfg = ipu.config.IPUConfig()
    cfg.auto_select_ipus = 1
    cfg.ipu_model.tiles_per_ipu = 8
    cfg.configure_ipu_system()
    fn = tf.function(lambda x: x + 1.0, jit_compile=True)
    with tf.device("/device:IPU:0"), pytest.warns(UserWarning, match="Out of memory on tile"):
        out = fn(np.zeros(1 << 22, np.float32))
    assert float(out[0]) == 1.0, "the IPU Model runs on after an out-of-memory"
    ((_, profile),) = _reports(report_root)
    mem = profile["graph"]["memory"]
    assert profile["target"]["ipu_model"] and profile["target"]["tiles"] == 8
    assert mem["oom_tiles"] == [t for t, n in enumerate(mem["total_by_tile"]) if n > 638_976] != []


def test__keras_fit__writes_the_training_programs_report(report_root):
    strategy = ipu.ipu_strategy.IPUStrategy()
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.layers.Dense(4, activation="relu"), tf.keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse", steps_per_execution=4)
        x, y = np.ones((32, 3), np.float32), np.ones((32, 1), np.float32)
        model.fit(x, y, batch_size=4, epochs=1, verbose=0)
    reports = _reports(report_root)
    assert reports
    trip_counts = [n.get("count") for _, p in reports for n in _walk(p["graph"]["program_tree"])]
    assert 4 in trip_counts, "steps_per_execution=4: the training loop runs 4 steps per execution"


def _walk(node: dict):
    yield node
    for c in node.get("children", ()):
        yield from _walk(c)


TF1_SCRIPT = """
import numpy as np
import tensorflow.compat.v1 as tf
from tensorflow.python.ipu import ipu_compiler
from tensorflow.python.ipu.config import IPUConfig
from tensorflow.python.ipu.scopes import ipu_scope

cfg = IPUConfig()
cfg.auto_select_ipus = 1
cfg.configure_ipu_system()
with tf.device("cpu"):
    pa, pb, pc = (tf.placeholder(np.float32, [2], name=n) for n in "abc")
with ipu_scope("/device:IPU:0"):
    out = ipu_compiler.compile(lambda a, b, c: (a + b) + (a + c), [pa, pb, pc])
with tf.Session() as sess:
    print(sess.run(out, feed_dict={pa: [1.0, 1.0], pb: [0.0, 1.0], pc: [1.0, 5.0]}))
"""


def test__tf1_session__writes_the_report_of_its_ipu_program(tmp_path):
    script = tmp_path / "tf1.py"
    script.write_text(TF1_SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "TF_POPLAR_FLAGS"}
    env["POPLAR_ENGINE_OPTIONS"] = json.dumps({"autoReport.all": "true", "autoReport.directory": "rep"})
    r = subprocess.run([sys.executable, "-m", "popjit", "run", str(script)], capture_output=True, text=True,
                       cwd=tmp_path, env=env, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "[array([3., 8.], dtype=float32)]" in r.stdout
    (report,) = (tmp_path / "rep").iterdir()
    profile = json.loads((report / "profile.json").read_text())
    assert json.loads((report / "frameworks.json").read_text())["cluster"] == profile["program"]
    (cs,) = profile["graph"]["compute_sets"]  # the three additions fuse into one compute set
    assert cs["kind"] == "elementwise" and cs["executions"] == 1
