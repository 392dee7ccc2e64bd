"""``popjit demo``: a small Keras CNN learns scikit-learn's handwritten digits inside ``IPUStrategy``.

The script below is what a Graphcore user writes (only the import lines differ from an IPU
script); it is written to a file and run from there, as ``popjit run`` runs scripts, so the
progress bar and any traceback point at real lines. Afterwards the demo reports the test accuracy
(it fails below ``MIN_ACCURACY``), the wall time on this CPU, and what the virtual IPU says about
the compiled training program: the estimated time per step and the tile memory.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from popjit.kernels.jit import cache_root

MIN_ACCURACY = 0.95

DEMO_SCRIPT = """\
import numpy as np
from sklearn.datasets import load_digits

import popjit.tensorflow as tf
from popjit.tensorflow.python import ipu

# 1,797 handwritten digits, 8x8 pixels, shipped with scikit-learn.
digits = load_digits()
images = (digits.images / 16.0).astype(np.float32)[..., np.newaxis]
labels = digits.target.astype(np.int32)
order = np.random.default_rng(0).permutation(len(images))
x_train, y_train = images[order[:1440]], labels[order[:1440]]
x_test, y_test = images[order[1440:1760]], labels[order[1440:1760]]

config = ipu.config.IPUConfig()
config.auto_select_ipus = 1
config.configure_ipu_system()
tf.keras.utils.set_random_seed(1)

strategy = ipu.ipu_strategy.IPUStrategy()
with strategy.scope():
  model = tf.keras.Sequential([
      tf.keras.Input((8, 8, 1)),
      tf.keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
      tf.keras.layers.MaxPooling2D(),
      tf.keras.layers.Conv2D(64, 3, padding="same", activation="relu"),
      tf.keras.layers.MaxPooling2D(),
      tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(10),
  ])
  model.compile(optimizer=tf.keras.optimizers.Adam(0.003),
                loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                metrics=["accuracy"],
                steps_per_execution=5)
  history = model.fit(x_train, y_train, batch_size=32, epochs=10)
  loss, accuracy = model.evaluate(x_test, y_test, batch_size=32)
"""

def _heading(title: str) -> None:
    print(f"\n== {title} " + "=" * max(0, 76 - len(title)), flush=True)


def run_script(source: str, path: Path, namespace: dict[str, Any]) -> float:
    """Write ``source`` to ``path`` and run it in ``namespace``; returns the seconds it took."""
    path.write_text(source)
    code = compile(source, str(path), "exec")
    t0 = time.perf_counter()
    exec(code, namespace)
    return time.perf_counter() - t0


def training_program(device_ordinal: int = 0) -> Any:
    """The executable of the last Keras training program run on ``/device:IPU:<ordinal>``."""
    # why: the device registry sits below the entry points; imported here so `import popjit.demo` stays light
    from popjit.runtime import device

    exe = device.get_device(device_ordinal).last_program("train_function")
    if exe is None:
        raise RuntimeError("the demo ran no Keras training program on the IPU")
    return exe


def report(ns: dict[str, Any], seconds: float) -> bool:
    """Print the accuracy, the timings and the virtual IPU's figures; True when the model learnt."""
    model, accuracy = ns["model"], float(ns["accuracy"])
    steps_per_execution = model._steps_per_execution
    schedule = training_program().schedule
    steps = len(ns["history"].epoch) * (len(ns["x_train"]) // 32)
    _heading("results")
    print(f"test accuracy        {accuracy:.4f} on {len(ns['x_test'])} unseen digits "
          f"({'passes' if accuracy >= MIN_ACCURACY else 'FAILS'} the {MIN_ACCURACY:.0%} bar)")
    print(f"on this CPU          {seconds:.1f} s for {steps} training steps and the evaluation, compilation "
          f"included (machine code cached in {cache_root()})")
    per_step = schedule.seconds / steps_per_execution
    print(f"on an IPU (estimate) {per_step * 1e6:,.1f} us per training step: one program of "
          f"{steps_per_execution} steps is {schedule.total_cycles:,} cycles on {schedule.target.describe()}")
    _heading("the training program on the virtual IPU")
    print(f"{len(schedule.compute_sets)} compute sets; the costliest:")
    for step in sorted(schedule.steps, key=lambda s: s.cycles * s.executions, reverse=True)[:5]:
        print(f"  {step.name:<40} {step.tiles_used:>5} tiles {step.cycles * step.executions:>11,} cycles")
    for line in schedule.totals_lines()[1:]:
        print(line)
    return accuracy >= MIN_ACCURACY


def main() -> int:
    """Run the demo; 0 when the trained model reaches ``MIN_ACCURACY`` on the test digits."""
    t0 = time.perf_counter()
    source = DEMO_SCRIPT
    _heading("Keras on a virtual IPU: a CNN learns handwritten digits")
    print(source)
    print("--- output ---", flush=True)
    ns: dict[str, Any] = {"__name__": "__popjit_demo__"}
    with tempfile.TemporaryDirectory(prefix="popjit-demo-") as tmp:
        seconds = run_script(source, Path(tmp) / "digits_cnn.py", ns)
    ok = report(ns, seconds)
    print(f"\ndemo {'finished' if ok else 'FAILED: the model did not learn'} in {time.perf_counter() - t0:.1f} s")
    print("Every compiler stage of a small program: python docs/tour.py (docs/pipeline.md).")
    return 0 if ok else 1
