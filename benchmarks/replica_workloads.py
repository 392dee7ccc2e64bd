"""(g) Replication: W1 and the Keras CNN (K1) run as 1, 2 and 4 replicas (``cfg.auto_select_ipus = R``).

- W1: the MLP ``784-256-128-10`` on batches of 32, 100 SGD steps per execution fed by an infeed, the
  gradients averaged over the replicas with ``cross_replica_mean`` (data parallelism): a global batch
  of ``32 R`` per step. Checked against NumPy's float64 training on the concatenated batches.
- K1: the Keras CNN of :mod:`benchmarks.keras_workloads`, one epoch of 100 steps per replica
  (``steps_per_execution=100``), each replica on its own batches of 32. Checked: the loss fell.

Each row gives the samples per second on this host (all replicas together) and the samples per
second the IPU estimate gives (the program's estimated time per execution, collectives included),
with the scaling over one replica. popjit only: TensorFlow and JAX have no IPU replicas to compare.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from benchmarks import keras_workloads, workloads

REPLICAS = (1, 2, 4)
STEPS = 100
BATCH = 32


@dataclass
class ReplicaRow:
    """One workload at one replica count."""

    workload: str
    replicas: int
    host_samples_per_s: float
    ipu_samples_per_s: float
    check: str


def _configure(replicas: int) -> tuple[Any, Any]:
    import popjit.tensorflow as tf
    from popjit import ipu

    cfg = ipu.config.IPUConfig()
    cfg.auto_select_ipus = replicas
    cfg.configure_ipu_system()
    return tf, ipu


def _estimated_seconds(name: str) -> float:
    """The IPU estimate of one run of the program called ``name`` last run on ``/device:IPU:0``."""
    from popjit.runtime import device

    return device.get_device(0).last_program(name).schedule.seconds


def _best(call: Callable[[], Any], repeat: int) -> float:
    best = math.inf
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - start)
    return best


def w1_replicated(replicas: int, repeat: int = 3, steps: int = STEPS, batch: int = BATCH) -> ReplicaRow:
    """W1 as ``replicas`` replicas: host and estimated samples/s, checked against NumPy."""
    tf, ipu = _configure(replicas)
    xs, ys = workloads.train_data(steps * replicas, batch)
    init = workloads.train_init(256, 128)
    strategy = ipu.ipu_strategy.IPUStrategy()
    dataset = tf.data.Dataset.from_tensor_slices((xs.reshape(-1, xs.shape[-1]), ys.reshape(-1)))
    infeed = ipu.ipu_infeed_queue.IPUInfeedQueue(dataset.batch(batch, drop_remainder=True).repeat())
    with strategy.scope():
        variables = workloads.train_variables(tf, init)

        def step(x, y):
            w1, b1, w2, b2, w3, b3 = variables
            with tf.GradientTape() as tape:
                h = tf.nn.relu(tf.matmul(x, w1) + b1)
                h = tf.nn.relu(tf.matmul(h, w2) + b2)
                logits = tf.matmul(h, w3) + b3
                loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
            for v, g in zip(variables, tape.gradient(loss, variables)):
                v.assign_sub(workloads.TRAIN_LR * ipu.cross_replica_ops.cross_replica_mean(g))

        @tf.function(jit_compile=True)
        def w1_train():
            ipu.loops.repeat(steps, step, infeed_queue=infeed)

        strategy.run(w1_train)  # compile, and the check's run
        error = workloads.check_training(f"W1 x{replicas} replicas", variables, init,
                                         xs.reshape(steps, replicas * batch, -1), ys.reshape(steps, -1))
        seconds = _best(lambda: strategy.run(w1_train), repeat)
    samples = steps * batch * replicas
    return ReplicaRow(f"W1 MLP b{batch} x{steps}", replicas, samples / seconds,
                      samples / _estimated_seconds("w1_train"), f"max |w - NumPy| {error:.1e}")


def k1_replicated(replicas: int, repeat: int = 2, steps: int = STEPS, batch: int = BATCH) -> ReplicaRow:
    """K1's epoch as ``replicas`` replicas: host and estimated samples/s; the loss must fall."""
    tf, ipu = _configure(replicas)
    x, y = keras_workloads.keras_data(0, batch * steps * replicas)
    strategy = ipu.ipu_strategy.IPUStrategy()
    with strategy.scope():
        model = keras_workloads.make_model(tf, 0)
        model.set_weights(keras_workloads.initial_weights(model))
        keras_workloads.compile_model(tf, model)
        losses = []

        def epoch() -> None:
            history = model.fit(x, y, batch_size=batch, epochs=1, verbose=0, shuffle=False)
            losses.append(history.history["loss"][-1])

        epoch()
        bar = keras_workloads.LEARNED * math.log(keras_workloads.CLASSES)
        if not losses[-1] < bar:
            raise workloads.WrongResult(f"K1 x{replicas} replicas: the loss {losses[-1]:.3g} did not fall below "
                                        f"{bar:.3g}")
        seconds = _best(epoch, repeat)
    samples = steps * batch * replicas
    return ReplicaRow(f"K1 CNN b{batch} x{steps}", replicas, samples / seconds,
                      samples / _estimated_seconds("train_function"), f"loss {losses[0]:.3f} after one epoch")


def replica_rows(repeat: int = 3) -> list[ReplicaRow]:
    """Every workload at every replica count."""
    return [make(r, repeat) for make in (w1_replicated, k1_replicated) for r in REPLICAS]


def table(rows: list[ReplicaRow]) -> str:
    """The rows as a text table, with each workload's scaling over its one-replica row."""
    lines = [f"{'workload':<22} {'replicas':>8} {'host samples/s':>15} {'x1':>6} {'IPU est. samples/s':>19} "
             f"{'x1':>6}  check"]
    base: dict[str, ReplicaRow] = {}
    for row in rows:
        one = base.setdefault(row.workload, row)
        lines.append(f"{row.workload:<22} {row.replicas:>8} {row.host_samples_per_s:>15,.0f} "
                     f"{row.host_samples_per_s / one.host_samples_per_s:>6.2f} {row.ipu_samples_per_s:>19,.0f} "
                     f"{row.ipu_samples_per_s / one.ipu_samples_per_s:>6.2f}  {row.check}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(replica_rows()))
