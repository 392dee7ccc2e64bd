"""(e) Keras ``fit``: K1, a small CNN on 28×28×1 images; K2, an LSTM(128) over 64 time steps.

popjit and stock TensorFlow run the *same* Keras code (:func:`make_model`, :func:`compile_model`,
``model.fit(x, y, batch_size, epochs=1, shuffle=False)``) with ``tf`` bound to ``popjit.tensorflow``
or to ``tensorflow``, from the same initial weights (:func:`initial_weights`), on the same data.
popjit runs it as Graphcore's Keras does: the model built and compiled inside
``IPUStrategy().scope()``, so an epoch of ``steps`` steps is one device loop fed by an infeed.
Stock Keras compiles with ``jit_compile=True`` and the same ``steps_per_execution``.

One call is one epoch: ``steps`` batches of ``batch`` samples; the rate is samples/s. The result of a
call is the epoch's mean loss. The data is learnable (each class a fixed random pattern plus noise),
so a check can tell a model that trains from one that does not: the first epoch's mean loss must
fall below ``LEARNED`` of the untrained loss ``ln(10)``. The tests also compare popjit's losses and
weights with stock Keras's at small sizes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np

from benchmarks import core

KERAS_MODELS = ("cnn", "lstm")
KERAS_SIZES: dict[str, dict[str, int]] = {"K1": {"model": 0, "batch": 32, "steps": 100},
                                          "K2": {"model": 1, "batch": 32, "steps": 100}}
STEPS_PER_EXECUTION = 100
IMAGE = (28, 28, 1)
SEQUENCE = (64, 32)  # time steps, features per step
LSTM_UNITS = 128
CLASSES = 10
LEARNING_RATE = 1e-3
LEARNED = 0.8  # the first epoch's mean loss must be below this fraction of ln(10)


def model_name(model: int) -> str:
    """``0`` → ``"cnn"``, ``1`` → ``"lstm"`` (sizes are ints so the fresh-process runner can pass them)."""
    return KERAS_MODELS[model]


def keras_label(model: int = 0, batch: int = 32, steps: int = 100) -> str:
    """The row label of a Keras workload."""
    what = "CNN 28x28x1 conv32-conv64-dense10" if model_name(model) == "cnn" else \
        f"LSTM({LSTM_UNITS}) x{SEQUENCE[0]} steps-dense10"
    return f"keras fit {what} b{batch} x{steps}"


def keras_data(model: int, samples: int, seed: int = 5) -> tuple[np.ndarray, np.ndarray]:
    """``samples`` learnable examples (float32 images or sequences) and their int32 labels."""
    rng = np.random.default_rng(seed)
    shape = IMAGE if model_name(model) == "cnn" else SEQUENCE
    patterns = (rng.uniform(0.0, 1.0, (CLASSES, *shape)) < 0.2).astype(np.float32)
    y = rng.integers(0, CLASSES, samples).astype(np.int32)
    intensity = rng.uniform(0.5, 1.0, (samples,) + (1,) * len(shape)).astype(np.float32)
    noise = rng.uniform(0.0, 0.3, (samples, *shape)).astype(np.float32)
    return np.minimum(patterns[y] * intensity + noise, 1.0), y


def make_model(tf: ModuleType, model: int) -> Any:
    """The Keras model (the same code for popjit and TensorFlow)."""
    layers = tf.keras.layers
    if model_name(model) == "cnn":
        return tf.keras.Sequential([
            tf.keras.Input(IMAGE),
            layers.Conv2D(32, 3, activation="relu"),
            layers.MaxPooling2D(),
            layers.Conv2D(64, 3, activation="relu"),
            layers.MaxPooling2D(),
            layers.Flatten(),
            layers.Dense(CLASSES),
        ])
    return tf.keras.Sequential([tf.keras.Input(SEQUENCE), layers.LSTM(LSTM_UNITS), layers.Dense(CLASSES)])


def compile_model(tf: ModuleType, model: Any) -> None:
    """Adam, sparse categorical cross-entropy on logits, ``STEPS_PER_EXECUTION`` steps per execution."""
    model.compile(optimizer=tf.keras.optimizers.Adam(LEARNING_RATE),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  steps_per_execution=STEPS_PER_EXECUTION, jit_compile=True)


def initial_weights(model: Any, seed: int = 6) -> list[np.ndarray]:
    """Glorot-uniform matrices and zero vectors in the shapes of ``model.get_weights()``."""
    rng = np.random.default_rng(seed)
    weights = []
    for w in model.get_weights():
        if w.ndim < 2:
            weights.append(np.zeros(w.shape, np.float32))
            continue
        fan_in, fan_out = int(np.prod(w.shape[:-1])), w.shape[-1]
        limit = math.sqrt(6.0 / (fan_in + fan_out))
        weights.append(rng.uniform(-limit, limit, w.shape).astype(np.float32))
    return weights


def keras_problem(model: int = 0, batch: int = 32, steps: int = 100) -> core.Problem:
    """One epoch of ``steps`` batches of ``batch`` samples of K1 (``model=0``) or K2 (``model=1``)."""
    x, y = keras_data(model, batch * steps)
    return core.Problem("keras", keras_label(model, batch, steps), (x, y), steps, np.zeros(1), float(batch * steps),
                        "samples/s", rtol=0.0, atol=0.0, scale=1.0,
                        sizes={"model": model, "batch": batch, "steps": steps}, checker=check_learned)


def check_learned(p: core.Problem, got: np.ndarray, framework: str) -> float:
    """Raise :class:`core.WrongResult` unless the epoch's mean loss fell well below ``ln(10)``;
    returns how far below the bar it is."""
    loss = float(np.asarray(got).reshape(-1)[0])
    bar = LEARNED * math.log(CLASSES)
    if not np.isfinite(loss) or loss >= bar:
        raise core.WrongResult(f"{framework} {p.label}: the first epoch's mean loss {loss:.4g} is not "
                                    f"below {bar:.3g}: the model did not train")
    return bar - loss


Trainer = tuple[Callable[[], Any], Any]


def fit_call(tf: ModuleType, model: Any, p: core.Problem) -> Callable[[], np.ndarray]:
    """One epoch of ``model.fit`` on the problem's data; returns the epoch's mean loss."""
    x, y = p.inputs

    def call() -> np.ndarray:
        history = model.fit(x, y, batch_size=p.sizes["batch"], epochs=1, verbose=0, shuffle=False)
        return np.array(history.history["loss"][-1:], np.float64)

    return call


def keras_popjit(p: core.Problem) -> Trainer:
    """popjit's epoch inside ``IPUStrategy``, and the model."""
    tf, strategy = core.popjit_strategy()
    with strategy.scope():
        model = make_model(tf, p.sizes["model"])
        model.set_weights(initial_weights(model))
        compile_model(tf, model)
        call = fit_call(tf, model, p)

    def in_scope() -> np.ndarray:
        with strategy.scope():
            return call()

    return in_scope, model


def keras_tf(p: core.Problem) -> Trainer:
    """Stock Keras's epoch (``jit_compile=True``), and the model."""
    tf = core.import_peer("tensorflow")
    model = make_model(tf, p.sizes["model"])
    model.set_weights(initial_weights(model))
    compile_model(tf, model)
    return fit_call(tf, model, p), model


KERAS_TRAINERS: dict[str, Callable[[core.Problem], Trainer]] = {"popjit": keras_popjit, "tensorflow": keras_tf}
KERAS_NOTES = {"popjit": f"IPUStrategy, steps_per_execution={STEPS_PER_EXECUTION}",
               "tensorflow": f"jit_compile=True, steps_per_execution={STEPS_PER_EXECUTION}"}
KERAS_IMPLS: dict[str, Callable[[core.Problem], tuple[Callable[[], Any], str]]] = {
    fw: (lambda p, fw=fw: (KERAS_TRAINERS[fw](p)[0], KERAS_NOTES[fw])) for fw in KERAS_TRAINERS
}
