"""``tf.keras.callbacks``: hooks ``fit``, ``evaluate`` and ``predict`` call around epochs and steps.

On the IPU a compiled program runs ``steps_per_execution`` steps; per-batch hooks then fire once
per execution with the last step's logs (``set_asynchronous_callbacks(True)`` replays them for every
step), as Graphcore's Keras does.
"""

from __future__ import annotations

import csv
import io
import math
import os
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from popjit.frontend import api as tf
from popjit.keras import backend
from popjit.keras.utils import Progbar
from popjit.runtime import instances

_MODES = ("train", "test", "predict")


class Callback:
    """The base class: every hook does nothing; ``self.model`` and ``self.params`` are set by ``fit``."""

    def __init__(self) -> None:
        self.model: Any = None
        self.params: dict[str, Any] = {}
        self.validation_data: Any = None

    def set_params(self, params: dict[str, Any]) -> None:
        self.params = params

    def set_model(self, model: Any) -> None:
        self.model = model

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        """Called at the start of an epoch."""

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        """Called at the end of an epoch, with its training (and validation) results."""

    def on_train_begin(self, logs: dict | None = None) -> None:
        """Called once at the start of ``fit``."""

    def on_train_end(self, logs: dict | None = None) -> None:
        """Called once at the end of ``fit``."""

    def on_test_begin(self, logs: dict | None = None) -> None:
        """Called at the start of ``evaluate`` (and of validation)."""

    def on_test_end(self, logs: dict | None = None) -> None:
        """Called at the end of ``evaluate``."""

    def on_predict_begin(self, logs: dict | None = None) -> None:
        """Called at the start of ``predict``."""

    def on_predict_end(self, logs: dict | None = None) -> None:
        """Called at the end of ``predict``."""

    def on_train_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        """Called before a training step (an execution on the IPU); calls ``on_batch_begin``."""
        self.on_batch_begin(batch, logs)

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        """Called after a training step, with its results; calls ``on_batch_end``."""
        self.on_batch_end(batch, logs)

    def on_test_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        """Called before an evaluation step."""

    def on_test_batch_end(self, batch: int, logs: dict | None = None) -> None:
        """Called after an evaluation step."""

    def on_predict_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        """Called before a prediction step."""

    def on_predict_batch_end(self, batch: int, logs: dict | None = None) -> None:
        """Called after a prediction step."""

    # Keras's older names of the training-batch hooks
    def on_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        """Old name of :meth:`on_train_batch_begin`."""

    def on_batch_end(self, batch: int, logs: dict | None = None) -> None:
        """Old name of :meth:`on_train_batch_end`."""


class CallbackList:
    """The callbacks of one ``fit``/``evaluate``/``predict`` call, called in order."""

    def __init__(self, callbacks: Iterable[Callback] | None = None, add_history: bool = False,
                 add_progbar: bool = False, model: Any = None, **params: Any) -> None:
        self.callbacks = list(callbacks or ())
        if add_progbar and not any(isinstance(c, ProgbarLogger) for c in self.callbacks):
            self.callbacks.append(ProgbarLogger())
        if add_history:
            self.history = History()
            self.callbacks.append(self.history)
        for c in self.callbacks:
            if model is not None:
                c.set_model(model)
            c.set_params(dict(params))

    def _call(self, hook: str, *args: Any) -> None:
        for c in self.callbacks:
            getattr(c, hook)(*args)

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self._call("on_epoch_begin", epoch, logs or {})

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        self._call("on_epoch_end", epoch, logs or {})

    def on_begin(self, mode: str, logs: dict | None = None) -> None:
        """``on_train_begin`` / ``on_test_begin`` / ``on_predict_begin``."""
        self._call(f"on_{mode}_begin", logs or {})

    def on_end(self, mode: str, logs: dict | None = None) -> None:
        self._call(f"on_{mode}_end", logs or {})

    def on_batch_begin(self, mode: str, batch: int, logs: dict | None = None) -> None:
        self._call(f"on_{mode}_batch_begin", batch, logs or {})

    def on_batch_end(self, mode: str, batch: int, logs: dict | None = None) -> None:
        self._call(f"on_{mode}_batch_end", batch, logs or {})


class History(Callback):
    """Records each epoch's logs: ``history.history["loss"]`` is the list of epoch losses."""

    def __init__(self) -> None:
        super().__init__()
        self.epoch: list[int] = []
        self.history: dict[str, list[Any]] = {}

    def on_train_begin(self, logs: dict | None = None) -> None:
        self.epoch = []

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        self.epoch.append(epoch)
        for k, v in (logs or {}).items():
            self.history.setdefault(k, []).append(v)
        if self.model is not None:
            self.model.history = self


class ProgbarLogger(Callback):
    """Prints Keras's progress bar (``verbose=1``) or one line per epoch (``verbose=2``)."""

    def __init__(self, count_mode: str = "steps", stateful_metrics: Iterable[str] | None = None) -> None:
        super().__init__()
        self._bar: Progbar | None = None
        self._mode = "train"

    def _start(self, mode: str, target: int | None) -> None:
        verbose = self.params.get("verbose", 1)
        self._mode = mode
        # why: the model's metrics already average over the epoch, so the bar shows them as they are
        stateful = getattr(self.model, "metrics_names", [])
        self._bar = Progbar(target, verbose=verbose, stateful_metrics=stateful) if verbose else None

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        if self.params.get("verbose") and self.params.get("epochs", 1) > 1:
            print(f"Epoch {epoch + 1}/{self.params.get('epochs', 1)}")
        self._start("train", self.params.get("steps"))

    def on_test_begin(self, logs: dict | None = None) -> None:
        if self.params.get("mode") == "test":  # evaluate() itself, not validation inside fit
            self._start("test", self.params.get("steps"))

    def on_predict_begin(self, logs: dict | None = None) -> None:
        self._start("predict", self.params.get("steps"))

    def _advance(self, batch: int, logs: dict | None, mode: str) -> None:
        if self._bar is not None and self._mode == mode:
            values = [(k, v) for k, v in (logs or {}).items() if np.ndim(v) == 0]
            self._bar.update(batch + 1, values, finalize=False)

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        self._advance(batch, logs, "train")

    def on_test_batch_end(self, batch: int, logs: dict | None = None) -> None:
        self._advance(batch, logs, "test")

    def on_predict_batch_end(self, batch: int, logs: dict | None = None) -> None:
        self._advance(batch, None, "predict")

    def _finish(self, logs: dict | None, mode: str) -> None:
        if self._bar is not None and self._mode == mode:
            values = [(k, v) for k, v in (logs or {}).items() if np.ndim(v) == 0]
            self._bar.update(self._bar._seen, values, finalize=True)
            self._bar = None

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        self._finish(logs, "train")

    def on_test_end(self, logs: dict | None = None) -> None:
        self._finish(logs, "test")

    def on_predict_end(self, logs: dict | None = None) -> None:
        self._finish(None, "predict")


class LambdaCallback(Callback):
    """Callbacks from functions: ``LambdaCallback(on_epoch_end=lambda epoch, logs: ...)``."""

    def __init__(self, on_epoch_begin: Callable | None = None, on_epoch_end: Callable | None = None,
                 on_batch_begin: Callable | None = None, on_batch_end: Callable | None = None,
                 on_train_begin: Callable | None = None, on_train_end: Callable | None = None, **kwargs: Any) -> None:
        super().__init__()
        given = {"on_epoch_begin": on_epoch_begin, "on_epoch_end": on_epoch_end, "on_batch_begin": on_batch_begin,
                 "on_batch_end": on_batch_end, "on_train_begin": on_train_begin, "on_train_end": on_train_end,
                 **kwargs}
        for hook, fn in given.items():
            if fn is not None:
                if not hasattr(Callback, hook):
                    raise TypeError(f"LambdaCallback got an unknown hook {hook!r}")
                setattr(self, hook, fn)


def _better(mode: str, monitor: str, min_delta: float) -> tuple[Callable[[float, float], bool], float]:
    """The comparison for ``mode`` (auto: larger is better for accuracies and AUC) and its signed delta."""
    if mode not in ("auto", "min", "max"):
        raise ValueError(f"Mode {mode} is unknown; use 'auto', 'min' or 'max'.")
    if mode == "max" or (mode == "auto" and ("acc" in monitor or monitor.startswith("fmeasure") or "auc" in monitor)):
        return np.greater, abs(min_delta)
    return np.less, -abs(min_delta)


class EarlyStopping(Callback):
    """Stop training when ``monitor`` has stopped improving for ``patience`` epochs."""

    def __init__(self, monitor: str = "val_loss", min_delta: float = 0, patience: int = 0, verbose: int = 0,
                 mode: str = "auto", baseline: float | None = None, restore_best_weights: bool = False) -> None:
        super().__init__()
        self.monitor, self.patience, self.verbose = monitor, patience, verbose
        self.baseline, self.restore_best_weights = baseline, restore_best_weights
        self.monitor_op, self.min_delta = _better(mode, monitor, min_delta)
        self.wait = self.stopped_epoch = 0
        self.best_weights: list[Any] | None = None

    def on_train_begin(self, logs: dict | None = None) -> None:
        self.wait, self.stopped_epoch, self.best_weights = 0, 0, None
        self.best = np.inf if self.monitor_op is np.less else -np.inf
        if self.baseline is not None:
            self.best = self.baseline

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        current = (logs or {}).get(self.monitor)
        if current is None:
            print(f"Early stopping conditioned on metric `{self.monitor}` which is not available. Available "
                  f"metrics are: {','.join(logs or {})}")
            return
        if self.restore_best_weights and self.best_weights is None:
            self.best_weights = self.model.get_weights()
        self.wait += 1
        if self.monitor_op(current - self.min_delta, self.best):
            self.best = current
            if self.restore_best_weights:
                self.best_weights = self.model.get_weights()
            if self.baseline is None or self.monitor_op(current - self.min_delta, self.baseline):
                self.wait = 0
        if self.wait >= self.patience and epoch > 0:
            self.stopped_epoch = epoch
            self.model.stop_training = True
            if self.restore_best_weights and self.best_weights is not None:
                if self.verbose > 0:
                    print("Restoring model weights from the end of the best epoch.")
                self.model.set_weights(self.best_weights)

    def on_train_end(self, logs: dict | None = None) -> None:
        if self.stopped_epoch > 0 and self.verbose > 0:
            print(f"Epoch {self.stopped_epoch + 1:05d}: early stopping")


class TerminateOnNaN(Callback):
    """Stop training as soon as a step's loss is NaN or infinite."""

    def on_batch_end(self, batch: int, logs: dict | None = None) -> None:
        loss = (logs or {}).get("loss")
        if loss is not None and not math.isfinite(float(loss)):
            print(f"Batch {batch}: Invalid loss, terminating training")
            self.model.stop_training = True


class CSVLogger(Callback):
    """Append each epoch's logs as a row of ``filename`` (a header row first)."""

    def __init__(self, filename: str, separator: str = ",", append: bool = False) -> None:
        super().__init__()
        self.filename, self.sep, self.append = os.fspath(filename), separator, append
        self._file: io.TextIOBase | None = None
        self._writer: Any = None
        self._keys: list[str] | None = None

    def on_train_begin(self, logs: dict | None = None) -> None:
        has_header = self.append and os.path.exists(self.filename) and os.path.getsize(self.filename) > 0
        self._file = open(self.filename, "a" if self.append else "w", newline="")  # noqa: SIM115  (closed at train end)
        self._header_written = has_header
        self._keys = None

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        logs = logs or {}
        if self._keys is None:
            self._keys = sorted(logs)
            self._writer = csv.DictWriter(self._file, fieldnames=["epoch", *self._keys], delimiter=self.sep)
            if not self._header_written:
                self._writer.writeheader()
        row = {"epoch": epoch, **{k: _plain(logs.get(k, "NA")) for k in self._keys}}
        self._writer.writerow(row)
        self._file.flush()

    def on_train_end(self, logs: dict | None = None) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def _plain(value: Any) -> Any:
    return float(value) if np.ndim(value) == 0 and not isinstance(value, str) else value


def _learning_rate(model: Any) -> Any:
    optimizer = getattr(model, "optimizer", None)
    if optimizer is None or not hasattr(optimizer, "lr"):
        raise ValueError('Optimizer must have a "lr" attribute.')
    return optimizer


class LearningRateScheduler(Callback):
    """Set the optimizer's learning rate to ``schedule(epoch, lr)`` at the start of every epoch."""

    def __init__(self, schedule: Callable[..., float], verbose: int = 0) -> None:
        super().__init__()
        self.schedule, self.verbose = schedule, verbose

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        optimizer = _learning_rate(self.model)
        try:
            lr = self.schedule(epoch, float(backend.get_value(optimizer.lr)))
        except TypeError:  # a schedule of the epoch alone (Keras accepts both)
            lr = self.schedule(epoch)
        if isinstance(lr, tf.Tensor):
            lr = float(lr.numpy())
        if not isinstance(lr, (float, np.floating, int)):
            raise ValueError(f'The output of the "schedule" function should be float. Got: {lr}')
        backend.set_value(optimizer.lr, float(lr))
        if self.verbose > 0:
            print(f"\nEpoch {epoch + 1:05d}: LearningRateScheduler setting learning rate to {lr}.")

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        if logs is not None:
            logs["lr"] = float(backend.get_value(self.model.optimizer.lr))


class ReduceLROnPlateau(Callback):
    """Multiply the learning rate by ``factor`` when ``monitor`` has not improved for ``patience`` epochs."""

    def __init__(self, monitor: str = "val_loss", factor: float = 0.1, patience: int = 10, verbose: int = 0,
                 mode: str = "auto", min_delta: float = 1e-4, cooldown: int = 0, min_lr: float = 0,
                 **kwargs: Any) -> None:
        super().__init__()
        if factor >= 1.0:
            raise ValueError(f"ReduceLROnPlateau does not support a factor >= 1.0. Got {factor}")
        self.monitor, self.factor, self.patience, self.verbose = monitor, factor, patience, verbose
        self.cooldown, self.min_lr = cooldown, min_lr
        self.monitor_op, self.min_delta = _better(mode, monitor, min_delta)
        self.monitor_op_name = mode

    def on_train_begin(self, logs: dict | None = None) -> None:
        self.best = np.inf if self.monitor_op is np.less else -np.inf
        self.wait = self.cooldown_counter = 0

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        logs = logs if logs is not None else {}
        logs["lr"] = float(backend.get_value(_learning_rate(self.model).lr))
        current = logs.get(self.monitor)
        if current is None:
            return
        if self.cooldown_counter > 0:
            self.cooldown_counter -= 1
            self.wait = 0
        if self.monitor_op(current - self.min_delta, self.best) if self.monitor_op is np.greater else \
                self.monitor_op(current, self.best + self.min_delta):
            self.best, self.wait = current, 0
        elif self.cooldown_counter <= 0:
            self.wait += 1
            if self.wait >= self.patience:
                old = logs["lr"]
                if old > np.float32(self.min_lr):
                    new = max(old * self.factor, self.min_lr)
                    backend.set_value(self.model.optimizer.lr, new)
                    if self.verbose > 0:
                        print(f"\nEpoch {epoch + 1:05d}: ReduceLROnPlateau reducing learning rate to {new}.")
                    self.cooldown_counter, self.wait = self.cooldown, 0


class ModelCheckpoint(Callback):
    """Save the weights after every epoch (or every ``save_freq`` batches), or only when ``monitor``
    improved (``save_best_only``), to ``filepath`` formatted with ``epoch`` and the logs
    (``"w.{epoch:02d}-{val_loss:.2f}.h5"``): the weights (``save_weights_only=True``) or the whole
    model (``model.save``, Keras 2's ``.h5``)."""

    def __init__(self, filepath: Any, monitor: str = "val_loss", verbose: int = 0, save_best_only: bool = False,
                 save_weights_only: bool = False, mode: str = "auto", save_freq: Any = "epoch", options: Any = None,
                 initial_value_threshold: float | None = None, period: int | None = None) -> None:
        super().__init__()
        if save_freq != "epoch" and not (isinstance(save_freq, int) and save_freq > 0):
            raise ValueError(f"Unrecognized save_freq: {save_freq}")
        if period is not None:
            raise tf.errors.UnimplementedError("ModelCheckpoint(period=...) is deprecated in Keras 2; use save_freq.")
        self.filepath, self.monitor, self.verbose = os.fspath(filepath), monitor, verbose
        self.save_best_only, self.save_weights_only, self.save_freq = save_best_only, save_weights_only, save_freq
        self.monitor_op, _ = _better(mode, monitor, 0.0)
        worst = math.inf if self.monitor_op(0.0, 1.0) else -math.inf
        self.best = worst if initial_value_threshold is None else initial_value_threshold
        self._batches_since_saving = 0
        self._epoch = 0

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self._epoch = epoch

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        if self.save_freq == "epoch":
            return
        self._batches_since_saving += 1
        if self._batches_since_saving >= self.save_freq:
            self._batches_since_saving = 0
            self._save(self._epoch, batch, logs or {})

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        if self.save_freq == "epoch":
            self._save(epoch, None, logs or {})

    def _save(self, epoch: int, batch: int | None, logs: dict) -> None:
        fields = {k: _plain(v) for k, v in logs.items()}
        path = self.filepath.format(epoch=epoch + 1, **fields, **({} if batch is None else {"batch": batch + 1}))
        if self.save_best_only:
            current = logs.get(self.monitor)
            if current is None:
                print(f"Can save best model only with {self.monitor} available, skipping.")
                return
            current = float(current)
            if not self.monitor_op(current, self.best):
                if self.verbose > 0:
                    print(f"\nEpoch {epoch + 1:05d}: {self.monitor} did not improve from {self.best:.5f}")
                return
            if self.verbose > 0:
                print(f"\nEpoch {epoch + 1:05d}: {self.monitor} improved from {self.best:.5f} to {current:.5f}, "
                      f"saving model to {path}")
            self.best = current
        elif self.verbose > 0:
            print(f"\nEpoch {epoch + 1:05d}: saving model to {path}")
        if not instances.writes_checkpoints():  # several poprun instances: instance 0 writes, as the chief
            return
        directory = os.path.dirname(path)
        if directory:
            os.makedirs(directory, exist_ok=True)
        if self.save_weights_only:
            self.model.save_weights(path, overwrite=True)
        else:
            self.model.save(path, overwrite=True)


def configure(callbacks: Any, model: Any, add_history: bool, verbose: int, **params: Any) -> CallbackList:
    """The ``CallbackList`` of one call: the user's callbacks, a progress bar if ``verbose``, and
    ``History`` for ``fit``."""
    if isinstance(callbacks, CallbackList):
        return callbacks
    return CallbackList(callbacks, add_history=add_history, add_progbar=bool(verbose), model=model,
                        verbose=verbose, **params)
