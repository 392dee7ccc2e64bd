"""(h) Pipelining: W1's MLP cut into 4 stages on 4 IPUs (``ipu.pipelining_ops.pipeline``), as the IPU
estimate sees it.

Stages: ``784→256`` relu | ``256→128`` relu | ``128→10`` | the softmax cross-entropy loss, each on its own
IPU, micro-batches of 16, the gradients averaged over ``gradient_accumulation_count`` micro-batches (MEAN)
and applied once per repeat. Each row gives the estimated utilisation of the IPUs (the share of their
cycles spent on the stages' work) beside the ideal one of the fill/drain formula for balanced stages
and free inter-IPU copies, ``gac / (gac + 2 (S - 1))``; the estimated samples per second on the IPUs and
against the Sequential schedule (no overlap); and the host's samples per second (the host runs the
micro-batches one after another). Checked: the weights equal NumPy's float64 SGD on the concatenated
micro-batches of each repeat. popjit only: TensorFlow and JAX have no IPU pipelines to compare.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

from benchmarks import workloads

STAGES = 4
MICRO_BATCH = 16
REPEATS = 2
ACCUMULATIONS = (8, 16, 32, 64)


@dataclass
class PipelineRow:
    """One pipeline schedule at one gradient-accumulation count."""

    schedule: str
    gac: int
    utilisation: float
    ideal: float
    ipu_samples_per_s: float
    sequential_samples_per_s: float
    host_samples_per_s: float
    check: str


def run_pipeline(schedule: str, gac: int, sequential_seconds: float | None = None, repeat: int = 2) -> PipelineRow:
    """The 4-stage pipeline with ``schedule`` and ``gac``: its estimate, host speed and check."""
    import popjit.tensorflow as tf
    from popjit import ipu
    from popjit.ipu.ops import pipelining_ops
    from popjit.runtime import device

    cfg = ipu.config.IPUConfig()
    cfg.auto_select_ipus = STAGES
    cfg.configure_ipu_system()
    xs, ys = workloads.train_data(REPEATS * gac, MICRO_BATCH)
    init = workloads.train_init(256, 128)
    dataset = tf.data.Dataset.from_tensor_slices((xs.reshape(-1, xs.shape[-1]), ys.reshape(-1)))
    infeed = ipu.ipu_infeed_queue.IPUInfeedQueue(dataset.batch(MICRO_BATCH, drop_remainder=True).repeat())
    outfeed = ipu.ipu_outfeed_queue.IPUOutfeedQueue()
    strategy = ipu.ipu_strategy.IPUStrategy()
    with strategy.scope():
        variables = workloads.train_variables(tf, init)
        w1, b1, w2, b2, w3, b3 = variables
        opt = tf.keras.optimizers.SGD(workloads.TRAIN_LR)
        stages = [lambda x, y: (tf.nn.relu(tf.matmul(x, w1) + b1), y),
                  lambda h, y: (tf.nn.relu(tf.matmul(h, w2) + b2), y),
                  lambda h, y: (tf.matmul(h, w3) + b3, y),
                  lambda logits, y: tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y,
                                                                                                  logits=logits))]

        def optimizer_function(loss: Any) -> Any:
            return pipelining_ops.OptimizerFunctionOutput(opt, loss, variables=variables)

        @tf.function(jit_compile=True)
        def pipelined() -> None:
            pipelining_ops.pipeline(stages, gradient_accumulation_count=gac, repeat_count=REPEATS,
                                    infeed_queue=infeed, outfeed_queue=outfeed, optimizer_function=optimizer_function,
                                    outfeed_loss=True, pipeline_schedule=pipelining_ops.PipelineSchedule[schedule],
                                    reduction_method="MEAN")

        strategy.run(pipelined)
        outfeed.dequeue()
        error = workloads.check_training(f"pipeline {schedule} gac {gac}", variables, init,
                                         xs.reshape(REPEATS, gac * MICRO_BATCH, -1), ys.reshape(REPEATS, -1))
        best = math.inf
        for _ in range(repeat):
            start = time.perf_counter()
            strategy.run(pipelined)
            best = min(best, time.perf_counter() - start)
            outfeed.dequeue()
    schedule_ = device.get_device(0).last_program("pipelined").schedule
    (pipe,) = schedule_.pipelines
    samples = REPEATS * gac * MICRO_BATCH
    seconds = schedule_.seconds
    return PipelineRow(schedule, gac, pipe.utilisation, pipe.ideal_utilisation, samples / seconds,
                       samples / (sequential_seconds or seconds), samples / best, f"max |w - NumPy| {error:.1e}")


def pipeline_rows(repeat: int = 2) -> list[PipelineRow]:
    """Sequential at the smallest count (the reference), then Grouped at every count and Interleaved at one."""
    reference = run_pipeline("Sequential", ACCUMULATIONS[0], repeat=repeat)
    sequential_seconds = REPEATS * ACCUMULATIONS[0] * MICRO_BATCH / reference.ipu_samples_per_s
    rows = [reference]
    for gac in ACCUMULATIONS:
        rows.append(run_pipeline("Grouped", gac, sequential_seconds * gac / ACCUMULATIONS[0], repeat))
    rows.append(run_pipeline("Interleaved", ACCUMULATIONS[1], sequential_seconds * ACCUMULATIONS[1] / ACCUMULATIONS[0],
                             repeat))
    return rows


def table(rows: list[PipelineRow]) -> str:
    """The rows as a text table."""
    lines = [f"{'schedule':<12} {'gac':>4} {'utilisation':>11} {'ideal':>6} {'est./ideal':>10} "
             f"{'IPU est. samples/s':>19} {'vs Sequential':>13} {'host samples/s':>15}  check"]
    for r in rows:
        lines.append(f"{r.schedule:<12} {r.gac:>4} {100 * r.utilisation:>10.1f}% {100 * r.ideal:>5.1f}% "
                     f"{r.utilisation / r.ideal:>10.2f} {r.ipu_samples_per_s:>19,.0f} "
                     f"{r.ipu_samples_per_s / r.sequential_samples_per_s:>13.2f} {r.host_samples_per_s:>15,.0f}  "
                     f"{r.check}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(pipeline_rows()))
