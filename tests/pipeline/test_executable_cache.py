"""``TF_POPLAR_FLAGS=--executable_cache_path=DIR``, the device connection types and the recompilation log.

With the flag, each compiled program is one ``DIR/<key>.poplar_exec`` file holding everything it needs
to run, machine code included: a second process given only those files compiles nothing
("1 compile then 0", as Graphcore's executable_cache_test), even while eight processes fill the
directory at once; a damaged file is reported once and compiled again; a directory (or file) other
users can write is never read. ``DeviceConnectionType.PRE_COMPILE`` compiles and returns zeros without
running (pre_compile_test), ``NEVER`` raises Graphcore's "compilation only" error, ``ON_DEMAND``
attaches at the first run. Real processes, real files under tmp_path.
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
import subprocess
import sys
import textwrap
import uuid
import warnings
from pathlib import Path

import numpy as np
import pytest

import popjit.tensorflow as tf
from popjit import config, ipu
from popjit.errors import InvalidArgumentError
from popjit.kernels.jit import CacheWarning, keep_entry, read_entry
from popjit.pipeline import cache, store
from popjit.pipeline.compiler import compile_graph
from popjit.schedule.target import make_target
from tests.helpers import run_program

PROGRAM = textwrap.dedent("""
    import os
    import numpy as np
    import popjit.tensorflow as tf
    from popjit import ipu
    from popjit.pipeline import cache

    cfg = ipu.config.IPUConfig()
    cfg.auto_select_ipus = 1
    connection = os.environ.get("CONNECTION", "ALWAYS")
    cfg.device_connection.type = getattr(ipu.config.DeviceConnectionType, connection)
    if connection in ("PRE_COMPILE", "NEVER"):
        cfg.device_connection.version = "ipu2"
    cfg.configure_ipu_system()

    @tf.function(jit_compile=True)
    def f(x, w):
        return tf.reduce_sum(tf.tanh(tf.matmul(x, w)) + 0.5 * x, axis=1)

    x = np.linspace(-1, 1, 8 * 6, dtype=np.float32).reshape(8, 6)
    w = np.linspace(-0.1, 0.1, 36, dtype=np.float32).reshape(6, 6)
    strategy = ipu.ipu_strategy.IPUStrategy()
    with strategy.scope():
        print("result", strategy.run(f, args=(x, w)).numpy().tolist())
    print("compiled", cache.stats["compilations"] - cache.stats["loaded"])
""")


def expected() -> list[float]:
    x = np.linspace(-1, 1, 8 * 6, dtype=np.float32).reshape(8, 6)
    w = np.linspace(-0.1, 0.1, 36, dtype=np.float32).reshape(6, 6)
    return (np.tanh(x @ w) + 0.5 * x).sum(axis=1).tolist()


def env(executables: Path, code_cache: Path, **more: str) -> dict[str, str]:
    """A subprocess's environment: the flag, its own code cache, popjit's INFO log (TF_CPP_MIN_LOG_LEVEL=0)."""
    base = {k: v for k, v in os.environ.items() if k != "POPJIT_LOG"}
    return {**base, "TF_POPLAR_FLAGS": f"--executable_cache_path={executables}",
            "POPJIT_CACHE_DIR": str(code_cache), "TF_CPP_MIN_LOG_LEVEL": "0", **more}


def run(executables: Path, code_cache: Path, **more: str) -> subprocess.CompletedProcess:
    """PROGRAM in a fresh process (which must succeed) with ``--executable_cache_path=executables``."""
    return run_program(PROGRAM, code_cache, TF_POPLAR_FLAGS=f"--executable_cache_path={executables}",
                       TF_CPP_MIN_LOG_LEVEL="0", **more)


def printed(out: subprocess.CompletedProcess, what: str) -> str:
    (line,) = [ln for ln in out.stdout.splitlines() if ln.startswith(what + " ")]
    return line[len(what) + 1:]


def compiled(out: subprocess.CompletedProcess) -> int:
    return int(printed(out, "compiled"))


@pytest.fixture
def sources():
    """The hash of popjit's sources when the test starts (part of every program's key)."""
    return store.source_fingerprint.__wrapped__()


def loaded_whole(out: subprocess.CompletedProcess, sources: str) -> bool:
    """Whether ``out`` compiled nothing. why the skip: in a checkout being edited while the test runs,
    the sources' hash, and with it every key, changes between the processes."""
    if compiled(out) != 0 and store.source_fingerprint.__wrapped__() != sources:
        pytest.skip("popjit's sources changed while the test ran, and with them the programs' keys")
    return compiled(out) == 0


def result(out: subprocess.CompletedProcess) -> list[float]:
    return [float(v) for v in printed(out, "result").strip("[]").split(",")]


def kept_files(directory: Path) -> list[Path]:
    """The programs' files in ``directory``."""
    return sorted(directory.glob("*.poplar_exec"))


def only_programs_left(directory: Path) -> list[Path]:
    """Remove all but the programs' files from ``directory`` (the shared code cache ``gen-*``); those files."""
    for generation in directory.glob("gen-*"):
        shutil.rmtree(generation)
    return sorted(p for p in directory.rglob("*") if p.is_file())


@pytest.mark.slow
def test__one_poplar_exec_per_program__a_second_process_compiles_nothing__a_damaged_one_is_compiled_again(
        tmp_path, sources):
    executables = tmp_path / "not" / "yet" / "there"
    first = run(executables, tmp_path / "code1")
    assert compiled(first) == 1
    np.testing.assert_allclose(result(first), expected(), rtol=1e-5, atol=1e-6)
    (kept,) = kept_files(executables)
    assert len(kept.stem) == 32, kept
    assert "Compile cause for 'f': its first compile in this process" in first.stderr
    assert not (tmp_path / "code1").exists(), "with the flag, POPJIT_CACHE_DIR is not used"

    # only the program's file: everything comes from it (no codelet, no Numba kernel compiled)
    assert only_programs_left(executables) == [kept]
    second = run(executables, tmp_path / "code2")
    assert loaded_whole(second, sources)
    assert result(second) == result(first)
    assert "Finished phase: Loading executable of 'f'" in second.stderr
    assert "Starting phase: graphConstruction" not in second.stderr
    assert "(0 codelets compiled, " in second.stderr
    assert sorted(p for p in executables.rglob("*") if p.is_file()) == [kept], "nothing compiled, nothing cached"

    kept.write_bytes(kept.read_bytes()[: kept.stat().st_size // 2])  # truncated
    third = run(executables, tmp_path / "code1")
    assert third.stderr.count("could not be read") == 1, third.stderr
    assert compiled(third) == 1 and result(third) == result(first)
    fourth = run(executables, tmp_path / "code3")
    assert loaded_whole(fourth, sources) and result(fourth) == result(first), "the entry was written whole again"


@pytest.mark.slow
def test__eight_processes_filling_one_directory_at_once__leave_one_whole_entry(tmp_path, sources):
    executables, code = tmp_path / "exec", tmp_path / "code"
    cmd = [sys.executable, "-c", PROGRAM]
    procs = [subprocess.Popen(cmd, env=env(executables, code), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(8)]
    outs = [subprocess.CompletedProcess(cmd, p.wait(timeout=600), *p.communicate()) for p in procs]
    for out in outs:
        assert out.returncode == 0, out.stderr[-3000:]
        np.testing.assert_allclose(result(out), expected(), rtol=1e-5, atol=1e-6)
    assert len({tuple(result(out)) for out in outs}) == 1
    assert len(kept_files(executables)) == 1
    assert not list(executables.glob("*.tmp")), "no temporary file left behind"
    after = run(executables, tmp_path / "fresh")
    assert loaded_whole(after, sources) and result(after) == result(outs[0])


@pytest.mark.slow
def test__pre_compile_fills_the_cache_with_zeros_as_results__the_next_process_runs_it_without_compiling(
        tmp_path, sources):
    executables = tmp_path / "exec"
    pre = run(executables, tmp_path / "code1", CONNECTION="PRE_COMPILE")
    assert compiled(pre) == 1 and result(pre) == [0.0] * 8
    assert "attached to IPU" not in pre.stderr, "PRE_COMPILE never attaches"
    (kept,) = kept_files(executables)

    assert only_programs_left(executables) == [kept]
    real = run(executables, tmp_path / "code2")
    assert loaded_whole(real, sources)
    assert "(0 codelets compiled, " in real.stderr, "the machine code was compiled by the PRE_COMPILE process"
    np.testing.assert_allclose(result(real), expected(), rtol=1e-5, atol=1e-6)
    assert "Device /device:IPU:0 attached to IPU: 0" in real.stderr
    assert kept_files(executables) == [kept]


# -- trust -----------------------------------------------------------------------------------------------


def graph_of(fn, *args):
    return tf.function(fn).get_concrete_function(*args).graph


def test__a_directory_other_users_can_write__is_not_used(tmp_path, monkeypatch):
    executables = tmp_path / "shared"
    executables.mkdir()
    executables.chmod(0o777)
    monkeypatch.setenv("TF_POPLAR_FLAGS", f"--executable_cache_path={executables}")
    scale = float(uuid.uuid4().int % 1000) / 7.0  # a graph no other test compiled
    graph = graph_of(lambda x: x * scale, np.ones(4, np.float32))
    with pytest.warns(CacheWarning, match="every user can write to"):
        exe = compile_graph(graph, make_target())
    np.testing.assert_allclose(exe.run([np.ones(4, np.float32)], {}, rounding=np.zeros(3, np.int64))[0],
                               np.full(4, scale, np.float32))
    assert list(executables.iterdir()) == [], "nothing written there"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CacheWarning)
        again = compile_graph(graph, make_target())
    assert not again.loaded, "nothing read from there either"


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test__an_entry_another_user_owns__is_not_unpickled(tmp_path):
    path = tmp_path / "k.poplar_exec"
    keep_entry(path, "magic", "k", "payload")
    assert read_entry(path, "magic", "k") == ("payload",)
    os.chown(path, 54321, 54321)
    with pytest.warns(CacheWarning, match="belongs to another user"):
        assert read_entry(path, "magic", "k") is None
    assert path.exists(), "not ours to delete"


def test__an_entry_others_can_write__is_not_unpickled(tmp_path):
    path = tmp_path / "k.poplar_exec"
    keep_entry(path, "magic", "k", "payload")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600, "written for this user only"
    path.chmod(0o666)
    with pytest.warns(CacheWarning, match="others can write to it"):
        assert read_entry(path, "magic", "k") is None


# -- connection types (in this process) -------------------------------------------------------------------


def configure(connection: str, version: str = "ipu2", **more) -> None:
    cfg = ipu.config.IPUConfig()
    cfg.auto_select_ipus = 1
    cfg.device_connection.type = getattr(ipu.config.DeviceConnectionType, connection)
    if connection in ("PRE_COMPILE", "NEVER"):
        cfg.device_connection.version = version
    for name, value in more.items():
        setattr(cfg.ipu_model, name, value)
    cfg.configure_ipu_system()


@pytest.fixture
def connection(fresh_ipu_system):
    """Configure a connection type for one test; the default system comes back afterwards."""
    yield configure
    ipu.config.reset_ipu_configuration()


def feeds_and_step():
    """A step with a variable, an infeed read twice and an outfeed written twice (call it in a strategy's scope)."""
    data = np.arange(12, dtype=np.float32).reshape(4, 3)
    infeed = iter(tf.data.Dataset.from_tensor_slices(data))
    outfeed = ipu.ipu_outfeed_queue.IPUOutfeedQueue()
    v = tf.Variable(np.array([1.0, 2.0, 3.0], np.float32))

    @tf.function(jit_compile=True)
    def step(x):
        for _ in tf.range(2):
            v.assign_add(next(infeed))
            outfeed.enqueue(v * 2.0)
        return tf.reduce_sum(v * x), tf.cast(x, tf.int32)

    return data, infeed, outfeed, v, step


def test__pre_compile__returns_zeros__changes_no_variable__reads_no_infeed__then_runs_from_the_cache(
        connection, tmp_path, monkeypatch):
    monkeypatch.setenv("TF_POPLAR_FLAGS", f"--executable_cache_path={tmp_path}")
    connection("PRE_COMPILE")
    strategy = ipu.ipu_strategy.IPUStrategy()
    with strategy.scope():
        data, _, outfeed, v, step = feeds_and_step()
        total, ints = strategy.run(step, args=(np.full(3, 2.0, np.float32),))
    assert (total.dtype, total.shape, float(total.numpy())) == (tf.float32, (), 0.0)
    assert ints.dtype == tf.int32 and ints.numpy().tolist() == [0, 0, 0]
    assert v.numpy().tolist() == [1.0, 2.0, 3.0]
    fed = outfeed.dequeue()
    assert fed.shape == (2, 3) and not fed.any(), "the outfeed gets zeros of what one run writes"
    assert len(list(tmp_path.glob("*.poplar_exec"))) == 1

    connection("ALWAYS")  # a real device now: the program comes from the cache, the infeed from its start
    loaded = cache.stats["loaded"]
    with strategy.scope():
        total, ints = strategy.run(step, args=(np.full(3, 2.0, np.float32),))
    assert cache.stats["loaded"] == loaded + 1
    want = np.array([1.0, 2.0, 3.0]) + data[0] + data[1]
    np.testing.assert_allclose(v.numpy(), want)
    np.testing.assert_allclose(float(total.numpy()), (want * 2.0).sum(), rtol=1e-6)
    np.testing.assert_allclose(outfeed.dequeue(), 2.0 * np.stack([[1.0, 2.0, 3.0] + data[0], want]))


def test__pre_compile__compiles_for_the_version_it_names(connection):
    connection("PRE_COMPILE", version="ipu1")
    fn = tf.function(lambda x: x * 3.0, jit_compile=True)
    x = np.ones(5, np.float32)
    with ipu.ipu_strategy.IPUStrategy().scope() as strategy:
        assert strategy.run(fn, args=(x,)).numpy().tolist() == [0.0] * 5
    target = fn.get_concrete_function(x).executable("/device:IPU:0").target
    assert (target.version, target.tiles) == ("ipu1", 1216)


def test__never__compiles_then_raises_compilation_only__variables_intact(connection):
    connection("NEVER")
    strategy = ipu.ipu_strategy.IPUStrategy()
    with strategy.scope():
        _, _, _, v, step = feeds_and_step()
        with pytest.raises(InvalidArgumentError, match="configured for compilation only"):
            strategy.run(step, args=(np.full(3, 2.0, np.float32),))
    assert v.numpy().tolist() == [1.0, 2.0, 3.0]
    with tf.device("/device:IPU:0"), pytest.raises(InvalidArgumentError, match="compilation only"):
        tf.constant([1.0]) + 1.0
    with tf.device("/device:CPU:0"):
        assert (tf.constant([1.0]) + 1.0).numpy().tolist() == [2.0], "the host still runs"


def attach_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "popjit" and "attached to IPU" in r.getMessage()]


def test__always_attaches_at_configure__on_demand_at_the_first_run(connection, caplog):
    fn = tf.function(lambda x: x + 1.0, jit_compile=True)
    strategy = ipu.ipu_strategy.IPUStrategy()
    with caplog.at_level(logging.INFO, logger="popjit"):
        connection("ALWAYS")
        assert attach_lines(caplog) == ["Device /device:IPU:0 attached to IPU: 0"]
        caplog.clear()
        connection("ON_DEMAND")
        assert attach_lines(caplog) == []
        with strategy.scope():
            for _ in range(2):
                assert strategy.run(fn, args=(np.ones(2, np.float32),)).numpy().tolist() == [2.0, 2.0]
        assert attach_lines(caplog) == ["Device /device:IPU:0 attached to IPU: 0"], "once"


def test__keras_fit_and_predict_under_pre_compile__zeros_and_untouched_weights(connection, tmp_path, monkeypatch):
    monkeypatch.setenv("TF_POPLAR_FLAGS", f"--executable_cache_path={tmp_path}")
    connection("PRE_COMPILE")
    x = np.arange(24, dtype=np.float32).reshape(8, 3)
    y = np.ones((8, 2), np.float32)
    with ipu.ipu_strategy.IPUStrategy().scope():
        model = tf.keras.Sequential([tf.keras.layers.Dense(2, input_shape=(3,))])
        model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss="mse", metrics=["mae"])
        before = [w.copy() for w in model.get_weights()]
        history = model.fit(x, y, epochs=2, batch_size=4, verbose=0)
        predicted = model.predict(x, batch_size=4)
    assert history.history == {"loss": [0.0, 0.0], "mae": [0.0, 0.0]}
    assert all(np.array_equal(a, b) for a, b in zip(before, model.get_weights()))
    assert predicted.shape == (8, 2) and predicted.dtype == np.float32 and not predicted.any()
    assert len(list(tmp_path.glob("*.poplar_exec"))) == 2, "the train and predict programs"


# -- why a program compiles again ---------------------------------------------------------------------------


def compile_messages(caplog, name: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith(f"Compile cause for '{name}'")]


def test__a_recompilation_logs_its_cause(connection, caplog):
    scale = float(uuid.uuid4().int % 1000) / 7.0  # a program no other test compiled

    def rescale(x):
        return x * scale

    fn = tf.function(rescale, jit_compile=True)
    strategy = ipu.ipu_strategy.IPUStrategy()
    connection("ALWAYS")
    with caplog.at_level(logging.INFO, logger="popjit"), strategy.scope():
        strategy.run(fn, args=(np.ones(2, np.float32),))
        strategy.run(fn, args=(np.ones(3, np.float32),))
        connection("ALWAYS", tiles_per_ipu=64)
        strategy.run(fn, args=(np.ones(3, np.float32),))
    messages = compile_messages(caplog, "rescale")
    assert len(messages) == 3, messages
    assert "argument 0 changed from a f32[2] tensor to a f32[3] tensor" in caplog.text, "the retracing log"
    assert messages[1] == ("Compile cause for 'rescale': recompiling: its graph changed (new input shapes or "
                           "dtypes, new Python values traced in as constants, or a new trace)")
    assert messages[2] == "Compile cause for 'rescale': recompiling: the target IPU changed"


def test__the_log_level__from_popjit_log_or_tf_cpp_min_log_level(monkeypatch):
    monkeypatch.delenv("POPJIT_LOG", raising=False)
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "0")
    assert config.log_level() == logging.INFO
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "3")
    assert config.log_level() is None, "quietening TensorFlow's C++ log leaves popjit's alone"
    monkeypatch.setenv("POPJIT_LOG", "debug")
    assert config.log_level() == logging.DEBUG
    monkeypatch.setenv("POPJIT_LOG", "loud")
    with pytest.raises(ValueError, match="POPJIT_LOG='loud'"):
        config.log_level()
    logger = logging.getLogger("popjit")
    handlers, level = list(logger.handlers), logger.level
    try:
        config.configure_logging(logging.INFO)
        config.configure_logging(logging.WARNING)
        assert len(logger.handlers) == len(handlers) + (not any(getattr(h, "popjit_stderr", False)
                                                                 for h in handlers))
        assert logger.level == logging.WARNING
    finally:
        logger.handlers[:] = handlers
        logger.setLevel(level)


# -- popjit cache ----------------------------------------------------------------------------------------


def popjit_cache(args: list[str], executables: Path, code: Path) -> subprocess.CompletedProcess:
    out = subprocess.run([sys.executable, "-m", "popjit", "cache", *args], capture_output=True, text=True,
                         timeout=300, env=env(executables, code))
    assert out.returncode == 0, out.stderr
    return out


def test__popjit_cache_info_list_clear__cover_the_flag_directory(tmp_path):
    executables, code = tmp_path / "exec", tmp_path / "code"
    executables.mkdir()
    for key in ("a" * 32, "b" * 32):
        keep_entry(executables / f"{key}.poplar_exec", store.POPLAR_EXEC_MAGIC, key, "graph")
    (executables / "notes.txt").write_text("not popjit's")

    info = popjit_cache(["info"], executables, code).stdout
    assert f"code cache            {executables} (TF_POPLAR_FLAGS --executable_cache_path)" in info
    assert f"executables           {executables}\n" in info
    assert "programs              2, " in info
    assert "its optimised graph, loop program and engine source, and its machine code" in info
    for part in store.KEY_PARTS:
        assert f"{part}: " in info, part
    listed = popjit_cache(["list", "-v"], executables, code).stdout
    assert f"executable cache (TF_POPLAR_FLAGS --executable_cache_path): {executables}" in listed
    assert "2 programs (.poplar_exec)" in listed and f"{'a' * 32}.poplar_exec" in listed

    executables.chmod(0o777)
    assert "(not used: every user can write to" in popjit_cache(["info"], executables, code).stdout
    executables.chmod(0o755)
    cleared = popjit_cache(["clear"], executables, code).stdout
    assert "removed 2 programs (" in cleared
    assert [p.name for p in executables.iterdir()] == ["notes.txt"]


def test__targets_differing_only_in_a_figure_the_hash_leaves_out__are_different_cache_keys():
    """A target's hash reads a few of its fields (each run looks its executable up by target): targets that
    differ elsewhere hash alike but stay different keys, so each compiles its own executable."""
    from dataclasses import replace

    base = make_target()
    slower = replace(base, exchange_bytes_per_cycle=base.exchange_bytes_per_cycle * 2)
    assert hash(slower) == hash(base) and slower != base

    @tf.function(jit_compile=True)
    def f(x):
        return x * 3.0

    graph = f.get_concrete_function(np.ones(4, np.float32)).graph
    first = cache.compile_cached(graph, base)
    assert cache.compile_cached(graph, base) is first
    other = cache.compile_cached(graph, slower)
    assert other is not first and other.target == slower
