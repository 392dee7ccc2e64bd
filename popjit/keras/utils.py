"""``tf.keras.utils``: the progress bar ``fit`` prints, one-hot labels, normalisation, seeding."""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Iterable
from typing import Any, TextIO

import numpy as np

from popjit.frontend import api as tf


class Progbar:
    """Keras's text progress bar: ``37/100 [=========>....] - ETA: 2s - loss: 0.3142``.

    On a terminal the line is redrawn in place; elsewhere (a log file, a CI job) only the final line
    of each bar is printed, as Keras does. ``verbose=2`` prints just the final line, without the bar.
    Values given in ``stateful_metrics`` are shown as given; others are averaged over the steps.
    """

    def __init__(self, target: int | None, width: int = 30, verbose: int = 1, interval: float = 0.05,
                 stateful_metrics: Iterable[str] | None = None, unit_name: str = "step",
                 stream: TextIO | None = None) -> None:
        self.target, self.width, self.verbose, self.interval = target, width, verbose, interval
        self.stateful_metrics = set(stateful_metrics or ())
        self.unit_name = unit_name
        self.stream = stream or sys.stdout
        self._dynamic = bool(getattr(self.stream, "isatty", lambda: False)()) or "ipykernel" in sys.modules
        self._values: dict[str, list[float]] = {}
        self._order: list[str] = []
        self._start = self._last_update = time.time()
        self._seen = 0
        self._total_width = 0

    def update(self, current: int, values: Iterable[tuple[str, Any]] | None = None,
               finalize: bool | None = None) -> None:
        """Advance to step ``current`` with ``values`` (name, value) pairs."""
        finalize = (self.target is not None and current >= self.target) if finalize is None else finalize
        for name, value in values or ():
            if name not in self._order:
                self._order.append(name)
            value = float(np.asarray(value))
            if name in self.stateful_metrics:
                self._values[name] = [value, 1]
            else:
                steps = max(current - self._seen, 1)
                total, count = self._values.get(name, [0.0, 0])
                self._values[name] = [total + value * steps, count + steps]
        self._seen = current
        now = time.time()
        if not finalize and now - self._last_update < self.interval:
            return
        self._last_update = now
        if self.verbose == 1 and (self._dynamic or finalize):
            self._write(self._bar_line(current, now, finalize), finalize)
        elif self.verbose == 2 and finalize:
            elapsed = now - self._start
            self._write(f"{current}/{self.target} - {elapsed:.0f}s{self._metrics_text()}", True)

    def add(self, n: int, values: Iterable[tuple[str, Any]] | None = None) -> None:
        """Advance by ``n`` steps."""
        self.update(self._seen + n, values)

    def _bar_line(self, current: int, now: float, finalize: bool) -> str:
        if self.target is None:
            head = f"{current:7d}/Unknown"
        else:
            digits = int(math.log10(self.target)) + 1 if self.target > 0 else 1
            progress = current / self.target if self.target else 1.0
            filled = int(self.width * progress)
            bar = "=" * max(filled - 1, 0) + (">" if current < self.target else "=") * (filled > 0)
            head = f"{current:{digits}d}/{self.target} [{bar}{'.' * (self.width - len(bar))}]"
        per_step = (now - self._start) / current if current else 0.0
        if finalize:
            timing = f" - {now - self._start:.0f}s {self._per_unit(per_step)}"
        else:
            eta = per_step * (self.target - current) if self.target else 0.0
            timing = f" - ETA: {eta:.0f}s"
        return head + timing + self._metrics_text()

    def _per_unit(self, seconds: float) -> str:
        if seconds >= 1 or seconds == 0:
            return f"{seconds:.0f}s/{self.unit_name}"
        if seconds >= 1e-3:
            return f"{seconds * 1e3:.0f}ms/{self.unit_name}"
        return f"{seconds * 1e6:.0f}us/{self.unit_name}"

    def _metrics_text(self) -> str:
        out = []
        for name in self._order:
            total, count = self._values[name]
            value = total / max(count, 1)
            out.append(f" - {name}: {value:.4f}" if abs(value) > 1e-3 else f" - {name}: {value:.4e}")
        return "".join(out)

    def _write(self, line: str, finalize: bool) -> None:
        if self._dynamic:
            pad = " " * max(self._total_width - len(line), 0)
            self.stream.write("\r" + line + pad + ("\n" if finalize else ""))
            self._total_width = len(line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


def to_categorical(y: Any, num_classes: int | None = None, dtype: str = "float32") -> np.ndarray:
    """One-hot rows for integer class labels (a trailing size-1 axis of ``y`` is dropped)."""
    y = np.array(y, dtype="int")
    shape = y.shape
    if shape and shape[-1] == 1 and len(shape) > 1:
        shape = shape[:-1]
    y = y.ravel()
    if y.size and y.min() < 0:
        raise ValueError(f"to_categorical expects non-negative class indices, got {int(y.min())}.")
    num_classes = int(num_classes) if num_classes is not None else int(y.max()) + 1 if y.size else 0
    out = np.zeros((y.size, num_classes), dtype=dtype)
    out[np.arange(y.size), y] = 1
    return out.reshape((*shape, num_classes))


def normalize(x: Any, axis: int = -1, order: int = 2) -> np.ndarray:
    """``x`` divided by its ``order``-norm along ``axis`` (zero norms leave zeros)."""
    x = np.asarray(x)
    norm = np.atleast_1d(np.linalg.norm(x, order, axis))
    norm[norm == 0] = 1
    return x / np.expand_dims(norm, axis)


def set_random_seed(seed: int) -> None:
    """Seed Python's ``random``, NumPy and TensorFlow's global generator at once."""
    import random

    if not isinstance(seed, int):
        raise ValueError(f"Expected `seed` argument to be an integer. Received: seed={seed} (of type {type(seed)})")
    random.seed(seed)
    np.random.seed(seed)
    tf.random.set_seed(seed)


class Sequence:
    """``tf.keras.utils.Sequence``: a dataset of batches by index. Subclasses define ``__len__`` (batches
    per epoch) and ``__getitem__(index)`` (a batch: ``x``, ``(x, y)`` or ``(x, y, sample_weight)``), and
    may define ``on_epoch_end``. ``fit``/``evaluate``/``predict`` take one outside an IPU scope (on
    the IPU, as in Graphcore's Keras, data must have its shapes known ahead: use a ``tf.data.Dataset``)."""

    def __getitem__(self, index: int) -> Any:
        raise NotImplementedError

    def __len__(self) -> int:
        raise NotImplementedError

    def on_epoch_end(self) -> None:
        """Called at the end of every training epoch (shuffle the data here)."""

    def __iter__(self) -> Any:
        for index in range(len(self)):
            yield self[index]
