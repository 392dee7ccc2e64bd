"""``popjit poprun``: its command line (in this process), then real instances started through MPI (MPICH's
``mpiexec`` from the test extras): what each instance sees, the collectives between them against NumPy,
PopDistStrategy across instances, the output prefixes, and how a failing or killed instance stops the
others. The subprocess timeouts are only safety nets: every run must end on its own."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from popjit import poprun

pytest.importorskip("mpi4py", reason="the MPI tests need the test extras (mpi4py, mpich)")

SAFETY_NET = 180  # seconds; a run that needs it has hung


def _main(capsys, *argv: str) -> tuple[int, str]:
    status = poprun.main(list(argv), prog="poprun")
    return status, capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--num-instances", "2", "--num-replicas", "3", "train.py"],
     "--num-replicas (3) must be a multiple of --num-instances (2): the replicas are divided evenly among the "
     "instances"),
    (["--num-instances", "2"], "the following arguments are required: PROGRAM"),
    (["--num-instances", "0", "x.py"], "--num-instances must be at least 1, not 0"),
    (["--num-instances", "3", "--num-replicas", "3", "-H", "a,b", "x.py"],
     "--num-instances (3) must be a multiple of the number of hosts (2)"),
    (["--num-instances", "2", "--num-replicas", "2", "--only-output-from-instance", "2", "x.py"],
     "--only-output-from-instance 2 is not an instance (0 to 1)"),
    (["--vipu-partition", "p1", "x.py"],
     "--vipu-partition is not supported by popjit: popjit's virtual IPUs need no V-IPU server or partition"),
    (["--numa-aware", "1", "x.py"], "--numa-aware is not supported by popjit"),
    (["--print-topology=maybe", "x.py"], "--print-topology: expected yes or no, not 'maybe'"),
    (["--no-such-option", "x.py"], "unrecognized arguments: --no-such-option"),
])
def test__bad_arguments__exit_2_naming_the_problem(capsys, argv, message):
    status, err = _main(capsys, *argv)
    assert status == poprun.USAGE_ERROR
    assert err.startswith("usage: poprun [options] PROGRAM [ARGS ...]\npoprun: error: ")
    assert message in err


def test__the_program__starts_at_the_first_word_that_is_not_an_option():
    launch = poprun.parse(["--num-instances", "4", "--num-replicas=8", "--print-topology", "-H", "a,b",
                           "--offline-mode", "python3", "train.py", "--num-instances", "9"])
    assert (launch.num_instances, launch.num_replicas, launch.local_replicas, launch.hosts) == (4, 8, 2, ("a", "b"))
    assert launch.print_topology and launch.program == ("python3", "train.py", "--num-instances", "9")
    assert poprun.parse(["--print-topology", "no", "--", "-weird.py"]).program == ("-weird.py",)


def test__instances_run_python_programs_under_popjit_run():
    run = [sys.executable, "-m", "popjit", "run"]
    assert poprun.instance_command(["python3", "-m", "pkg.train"]) == [*run, "-m", "pkg.train"]
    assert poprun.instance_command(["train.py", "--x"]) == [*run, "train.py", "--x"]
    assert poprun.instance_command(["/bin/env"]) == ["/bin/env"]


def test__mpiexec_command__one_relay_per_instance_spread_over_the_hosts():
    launch = poprun.parse(["--num-instances", "4", "--num-replicas", "4", "-H", "h0,h1", "--mpi-global-args",
                           "-launcher ssh", "--only-output-from-instance", "0", "train.py"])
    cmd = poprun.mpiexec_command(launch, "/x/mpiexec", "/tmp/s")
    assert cmd[:7] == ["/x/mpiexec", "-launcher", "ssh", "-n", "4", "-hosts", "h0:2,h1:2"]
    assert cmd[7:14] == [sys.executable, "-m", "popjit.poprun", "--status-dir", "/tmp/s",
                         "--only-output-from-instance", "0"]
    assert cmd[14:] == ["--", sys.executable, "-m", "popjit", "run", "train.py"]


def test__instance_environment__graphcores_variables():
    launch = poprun.parse(["--num-instances", "2", "--num-replicas", "4", "--ipus-per-replica", "2",
                           "--executable-cache-path", "/tmp/c", "x.py"])
    env = poprun.instance_environment(launch, {"TF_POPLAR_FLAGS": "--use_ipu_model", "POPDIST_INSTANCE_INDEX": "7"})
    assert {k: v for k, v in env.items() if k.startswith("POPDIST")} == {
        "POPDIST_NUM_INSTANCES": "2", "POPDIST_NUM_TOTAL_REPLICAS": "4", "POPDIST_NUM_LOCAL_REPLICAS": "2",
        "POPDIST_NUM_IPUS_PER_REPLICA": "2", "POPDIST_UNIFORM_REPLICAS_PER_INSTANCE": "1"}
    assert env["TF_POPLAR_FLAGS"] == "--use_ipu_model --executable_cache_path=/tmp/c"


def test__topology__table():
    launch = poprun.parse(["--num-instances", "2", "--num-replicas", "4", "x.py"])
    assert poprun.topology(launch).splitlines() == [
        " ===============================",
        "|        poprun topology        |",
        "|===============================|",
        "| hosts     |     localhost     |",
        "|-----------|-------------------|",
        "| instances |    0    |    1    |",
        "|-----------|-------------------|",
        "| replicas  | 0  | 1  | 2  | 3  |",
        " -------------------------------",
    ]


def test__without_an_mpi_launcher__says_how_to_install_one(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    monkeypatch.setattr(sys, "executable", str(tmp_path / "bin" / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    status, err = _main(capsys, "--num-instances", "2", "--num-replicas", "2", "x.py")
    assert status == poprun.USAGE_ERROR
    assert "no MPI launcher (mpiexec) found" in err and "pip install 'popjit[distributed]'" in err


# -- real instances ------------------------------------------------------------------------------------


def _poprun(tmp_path: Path, source: str, *options: str, args: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """``popjit poprun OPTIONS python script.py ARGS`` with ``source`` as the script."""
    script = tmp_path / "script.py"
    script.write_text(source)
    return subprocess.run([sys.executable, "-m", "popjit", "poprun", *options, "python", str(script), *args],
                          capture_output=True, text=True, timeout=SAFETY_NET, cwd=tmp_path)


def _lines(stream: str, index: int, name: str = "stdout") -> list[str]:
    prefix = f"[1,{index}]<{name}>:"
    return [line[len(prefix):] for line in stream.splitlines() if line.startswith(prefix)]


def _json(out: subprocess.CompletedProcess, index: int) -> dict:
    (line,) = [line for line in _lines(out.stdout, index) if line.startswith("{")]
    return json.loads(line)


LAYOUT = """
import json, os, sys
import popdist
print(json.dumps({"env": {k: v for k, v in os.environ.items() if k.startswith("POPDIST_")},
                  "popdist": [popdist.isPopdistEnvSet(), popdist.getNumInstances(), popdist.getInstanceIndex(),
                              popdist.getNumTotalReplicas(), popdist.getNumLocalReplicas(),
                              popdist.getNumIpusPerReplica(), popdist.getReplicaIndexOffset()],
                  "argv": sys.argv[1:]}))
print("line one\\nline two", file=sys.stderr)
sys.stdout.write("no newline at the end")
"""


def test__each_instance__sees_its_share_of_the_replicas_and_its_output_is_prefixed(tmp_path):
    out = _poprun(tmp_path, LAYOUT, "--num-instances", "2", "--num-replicas", "4", args=("--lr", "0.1"))
    assert out.returncode == 0, out.stderr
    for index in (0, 1):
        seen = _json(out, index)
        assert seen["popdist"] == [True, 2, index, 4, 2, 1, 2 * index]
        assert seen["argv"] == ["--lr", "0.1"]
        assert seen["env"] == {
            "POPDIST_NUM_INSTANCES": "2", "POPDIST_INSTANCE_INDEX": str(index), "POPDIST_NUM_TOTAL_REPLICAS": "4",
            "POPDIST_NUM_LOCAL_REPLICAS": "2", "POPDIST_NUM_IPUS_PER_REPLICA": "1",
            "POPDIST_REPLICA_INDEX_OFFSET": str(2 * index), "POPDIST_LOCAL_INSTANCE_INDEX": str(index),
            "POPDIST_UNIFORM_REPLICAS_PER_INSTANCE": "1"}
        assert _lines(out.stderr, index, "stderr") == ["line one", "line two"]
        assert _lines(out.stdout, index)[-1] == "no newline at the end"
    assert all(line.startswith(("[1,0]<stdout>:", "[1,1]<stdout>:")) for line in out.stdout.splitlines())


COLLECTIVES = """
import json, threading
import numpy as np
import popdist, popdist.tensorflow
import tensorflow as tf
from tensorflow.python import ipu
from tensorflow.python.ipu import distributed as hvd
from tensorflow.python.ipu.distributed import popdist_strategy
from popjit.runtime.instances import world

config = ipu.config.IPUConfig()
popdist.tensorflow.set_ipu_config(config, ipus_per_replica=1)
config.configure_ipu_system()
strategy = popdist_strategy.PopDistStrategy()
w, i = world(), popdist.getInstanceIndex()
x = (np.arange(6, dtype=np.float32).reshape(2, 3) - 2) * (i + 1) + i / 4
out = {}

def collectives():  # from a thread that is not the main one, as the replica threads call them
    out["sum32"] = w.allreduce_sum(x).tolist()
    out["sum16"] = w.allreduce_sum(x.astype(np.float16)).astype(np.float32).tolist()
    out["sumi32"] = w.allreduce_sum(np.array([i + 1, -7 * i], np.int32)).tolist()
    out["gather"] = w.allgather(x[0]).tolist()
    out["gather_bool"] = w.allgather(np.array([i == 1, True])).tolist()
    out["bcast"] = w.broadcast(np.full(3, i + 5, np.int32), root=1).tolist()
    w.barrier()

thread = threading.Thread(target=collectives)
thread.start()
thread.join()

@tf.function(jit_compile=True)
def step(v):
    return tf.reduce_sum(v * v)

with strategy.scope():
    loss = strategy.run(step, args=(x,))
    out["loss"] = float(loss)
    out["reduce_sum"] = float(strategy.reduce("SUM", loss))
    out["reduce_mean"] = strategy.reduce("MEAN", tf.constant(x)).numpy().tolist()
    out["reduce_mean_axis"] = strategy.reduce("MEAN", tf.constant(x), axis=1).numpy().tolist()
    out["broadcast_to"] = strategy.broadcast_to(tf.constant(x), "/device:CPU:0").numpy().tolist()
    out["hvd_average"] = hvd.allreduce(tf.constant(x)).numpy().tolist()
    out["hvd_gather"] = hvd.allgather(tf.constant(x)).numpy().tolist()
    out["replicas"] = strategy.num_replicas_in_sync
    out["initial"] = tf.Variable(np.full(3, i + 1.0, np.float32)).numpy().tolist()  # each its own value...
out["outside"] = tf.Variable(np.full(2, i + 1.0, np.float32)).numpy().tolist()
print(json.dumps(out))
"""


@pytest.mark.slow
def test__collectives_and_popdist_strategy_across_two_instances__match_numpy(tmp_path):
    out = _poprun(tmp_path, COLLECTIVES, "--num-instances", "2", "--num-replicas", "2")
    assert out.returncode == 0, out.stderr
    xs = [(np.arange(6, dtype=np.float32).reshape(2, 3) - 2) * (i + 1) + i / 4 for i in (0, 1)]
    total, mean = xs[0] + xs[1], (xs[0] + xs[1]) / 2
    for index in (0, 1):
        got = _json(out, index)
        np.testing.assert_allclose(got["sum32"], total, rtol=1e-6)
        np.testing.assert_allclose(got["sum16"], (xs[0].astype(np.float16).astype(np.float32)
                                                  + xs[1].astype(np.float16)).astype(np.float16), rtol=1e-3)
        assert got["sumi32"] == [3, -7]
        np.testing.assert_array_equal(got["gather"], np.stack([xs[0][0], xs[1][0]]))
        assert got["gather_bool"] == [[False, True], [True, True]]
        assert got["bcast"] == [6, 6, 6]
        np.testing.assert_allclose(got["loss"], float((xs[index] ** 2).sum()), rtol=1e-6)
        np.testing.assert_allclose(got["reduce_sum"], float((xs[0] ** 2).sum() + (xs[1] ** 2).sum()), rtol=1e-6)
        np.testing.assert_allclose(got["reduce_mean"], mean, rtol=1e-6)
        np.testing.assert_allclose(got["reduce_mean_axis"], (xs[0].mean(1) + xs[1].mean(1)) / 2, rtol=1e-6)
        np.testing.assert_array_equal(got["broadcast_to"], xs[0])
        np.testing.assert_allclose(got["hvd_average"], mean, rtol=1e-6)
        np.testing.assert_array_equal(got["hvd_gather"], np.concatenate(xs))
        assert got["replicas"] == 2
        assert got["initial"] == [1.0, 1.0, 1.0]  # ...but instance 0's in the strategy's scope, as Graphcore's
        assert got["outside"] == [index + 1.0] * 2


FAILING = """
import os, signal, sys, time
import numpy as np
from popjit.runtime.instances import world

w = world()
w.barrier()
print("started", flush=True)
if w.index == 1:
    time.sleep(0.5)  # instance 0 is waiting in the allreduce below by now (it needs instance 1 to finish)
    how = sys.argv[1]
    if how == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if how == "raise":
        raise ValueError("instance 1 gives up")
    if how == "exit":
        sys.exit(3)
    w.allreduce_sum(np.zeros(4, np.float32))
w.allreduce_sum(np.zeros(3, np.float32))
print("never printed", flush=True)
"""


@pytest.mark.parametrize("how, status, says", [
    ("kill", 128 + 9, "instance 1 failed first: killed by signal 9 (SIGKILL); the other instances were stopped; "
                      "exit status 137"),
    ("raise", 1, "instance 1 failed first: exit status 1; the other instances were stopped; exit status 1"),
    ("exit", 3, "instance 1 failed first: exit status 3; the other instances were stopped; exit status 3"),
])
def test__a_failing_instance__stops_the_others_with_its_status(tmp_path, how, status, says):
    out = _poprun(tmp_path, FAILING, "--num-instances", "2", "--num-replicas", "2", args=(how,))
    assert out.returncode == status, out.stderr
    assert f"popjit poprun: {says}" in out.stderr
    assert _lines(out.stdout, 0) == _lines(out.stdout, 1) == ["started"]
    errors = _lines(out.stderr, 1, "stderr")
    if how == "kill":
        assert errors == ["poprun: instance 1 was killed by signal 9 (SIGKILL)"]
    else:
        reason = "uncaught ValueError" if how == "raise" else "exit status 3"
        assert errors[-1] == f"popjit: instance 1 of 2 failed ({reason}); stopping every instance of the program"
    if how == "raise":
        assert errors[0] == "Traceback (most recent call last):"
        assert errors[1].startswith(f'  File "{tmp_path / "script.py"}", line ')
        assert "ValueError: instance 1 gives up" in errors


def test__instances_passing_different_arrays__all_raise_the_same_error(tmp_path):
    out = _poprun(tmp_path, FAILING, "--num-instances", "2", "--num-replicas", "2", args=("shape",))
    assert out.returncode == 1, out.stderr
    message = ("ValueError: allreduce_sum: every instance must pass an array of the same shape and dtype, but "
               "instance 0 float32 (3,), instance 1 float32 (4,)")
    assert message in _lines(out.stderr, 0, "stderr") or message in _lines(out.stderr, 1, "stderr")
    assert re.search(r"popjit poprun: instance [01] failed first: exit status 1", out.stderr)


def test__plain_mpiexec_launch__a_failing_instance_aborts_the_others(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(FAILING)
    mpiexec = poprun.find_mpiexec()
    out = subprocess.run([mpiexec, "-n", "2", sys.executable, "-m", "popjit", "run", str(script), "raise"],
                         capture_output=True, text=True, timeout=SAFETY_NET, cwd=tmp_path,
                         env={k: v for k, v in os.environ.items() if not k.startswith("POPDIST_")})
    assert out.returncode == 1, out.stderr
    assert out.stdout.count("started") == 2 and "never printed" not in out.stdout
    assert "popjit: instance 1 of 2 failed (uncaught ValueError); stopping every instance of the program" in out.stderr


DATA_PARALLEL = """
import json
import numpy as np
import popdist, popdist.tensorflow
import tensorflow as tf
from tensorflow.python import ipu

cfg = ipu.config.IPUConfig()
if popdist.isPopdistEnvSet():
    popdist.tensorflow.set_ipu_config(cfg, ipus_per_replica=1)
else:
    cfg.auto_select_ipus = 2
cfg.configure_ipu_system()
rng = np.random.default_rng(0)
x = rng.standard_normal((16, 3)).astype(np.float32)
dataset = tf.data.Dataset.from_tensor_slices(x).batch(2, drop_remainder=True)
if popdist.isPopdistEnvSet():  # instance k reads what replica k of one instance would: batches k, k + 2, ...
    dataset = dataset.shard(popdist.getNumInstances(), popdist.getInstanceIndex())
infeed = ipu.ipu_infeed_queue.IPUInfeedQueue(dataset)
outfeed = ipu.ipu_outfeed_queue.IPUOutfeedQueue()
strategy = ipu.ipu_strategy.IPUStrategy()
with strategy.scope():
    w = tf.Variable(np.ones((3, 1), np.float32))

    def step(xb):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((xb @ w) ** 2)
        w.assign_sub(0.1 * ipu.cross_replica_ops.cross_replica_mean(tape.gradient(loss, w)))
        outfeed.enqueue(ipu.replication_ops.replication_index())

    @tf.function(jit_compile=True)
    def train():
        ipu.loops.repeat(4, step, infeed_queue=infeed)

    strategy.run(train)
print(json.dumps({"w": w.numpy().ravel().tolist(), "replicas": outfeed.dequeue().tolist()}))
"""


@pytest.mark.slow
def test__two_instances_of_one_replica__train_as_one_instance_of_two_replicas(tmp_path):
    spread = _poprun(tmp_path, DATA_PARALLEL, "--num-instances", "2", "--num-replicas", "2")
    assert spread.returncode == 0, spread.stderr
    script = tmp_path / "script.py"
    alone = subprocess.run([sys.executable, "-m", "popjit", "run", str(script)], capture_output=True, text=True,
                           timeout=SAFETY_NET, cwd=tmp_path)
    assert alone.returncode == 0, alone.stderr
    one = json.loads(next(line for line in alone.stdout.splitlines() if line.startswith("{")))
    first, second = _json(spread, 0), _json(spread, 1)
    np.testing.assert_allclose(first["w"], one["w"], rtol=1e-6)
    np.testing.assert_allclose(second["w"], one["w"], rtol=1e-6)
    assert one["replicas"] == [[0, 1]] * 4  # one instance: [steps, replicas]
    assert first["replicas"] == [0] * 4 and second["replicas"] == [1] * 4  # each instance: its global replica


CHECKPOINTS = """
import os, sys
import numpy as np
import popdist, popdist.tensorflow
import tensorflow as tf
from tensorflow.python import ipu
from tensorflow.python.ipu.distributed import popdist_strategy

config = ipu.config.IPUConfig()
popdist.tensorflow.set_ipu_config(config, ipus_per_replica=1)
config.configure_ipu_system()
strategy = popdist_strategy.PopDistStrategy()
where = os.path.join(sys.argv[1], f"instance{popdist.getInstanceIndex()}", "weights.h5")
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(1)])
    model.compile(tf.keras.optimizers.SGD(0.1), "mse", steps_per_execution=2)
    model.fit(np.ones((8, 3), np.float32), np.ones((8, 1), np.float32), batch_size=2, epochs=1, verbose=0,
              callbacks=[tf.keras.callbacks.ModelCheckpoint(where, save_weights_only=True)])
"""


@pytest.mark.slow
def test__model_checkpoint__is_written_by_instance_0_only(tmp_path):
    out = _poprun(tmp_path, CHECKPOINTS, "--num-instances", "2", "--num-replicas", "2", args=(str(tmp_path / "ckpt"),))
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "ckpt" / "instance0" / "weights.h5").is_file()
    assert not (tmp_path / "ckpt" / "instance1").exists()  # as TensorFlow's chief worker, instance 0 writes
