"""The IPU Keras models of Graphcore's SDK ≤ 2.1 (``ipu.keras.Sequential``, ``ipu.keras.Model``), as
thin layers over popjit's Keras.

``Sequential(layers, gradient_accumulation_count=N)`` and ``Model(inputs, outputs,
gradient_accumulation_count=N)`` train with ``fit(..., steps_per_run=S)``: a *step* is one weight
update over ``N`` mini-batches whose gradients are summed, and one execution of the device loop
runs ``S`` steps (all the steps of the epoch by default). They map onto
``set_gradient_accumulation_options(N)`` and ``steps_per_execution = S * N`` mini-batches, with the
SDK's checks on the dataset's length and its error texts. A dataset of finite length restarts at
every epoch. The models can only be used on an IPU (inside an IPUStrategy's scope), and only
through ``fit``, ``evaluate`` and ``predict``. ``evaluate`` returns a list (the loss, then the
metrics). ``PipelineSequential`` and ``PipelineModel`` are these models trained as pipelines: the values
of gradient accumulation, on one IPU per stage (:mod:`popjit.keras.pipelining`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

from popjit import context, data
from popjit.errors import UnimplementedError
from popjit.frontend import api as tf
from popjit.keras import models
from popjit.keras.base_layer import Layer
from popjit.keras.pipelining import (
    FunctionalLayerPipelineStageAssignment,
    ModelLayerPipelineStageAssignment,
    PipelineStage,
    SequentialLayerPipelineStageAssignment,
)
from popjit.keras.training import TrainingAPI, _as_array, _is_dataset

__all__ = ["FunctionalLayerPipelineStageAssignment", "Model", "ModelLayerPipelineStageAssignment", "PipelineModel",
           "PipelineSequential", "PipelineStage", "Sequential", "SequentialLayerPipelineStageAssignment",
           "SequentialPipelineModel"]

log = logging.getLogger("popjit")

#: Keras arguments the SDK's IPU models refuse (NotImplementedError naming them).
_UNSUPPORTED_ARGS = ("sample_weight_mode", "weighted_metrics", "target_tensors", "distribute", "run_eagerly",
                     "validation_split", "validation_data", "class_weight", "sample_weight", "validation_steps",
                     "validation_freq", "max_queue_size", "workers", "use_multiprocessing")

_LOOP = {"fit": ("number of steps in an epoch 'steps_per_epoch'", "training"),
         "evaluate": ("number of steps 'steps'", "evaluation"), "predict": ("number of steps 'steps'", "inference")}


def _validate_args(kwargs: dict[str, Any], fn: str) -> None:
    if "y" in kwargs:
        raise ValueError("Labels should be provided by the 'x' DataSet containing a tuple.")
    if "batch_size" in kwargs:
        raise ValueError("Do not specify `batch_size` in IPU Keras models. Use the Dataset.batch() method to apply "
                         "batching at the input dataset level.")
    bad = [k for k in _UNSUPPORTED_ARGS if k in kwargs]
    if bad:
        raise NotImplementedError(f"IPU Keras models do not support these parameters to {fn}(): {', '.join(bad)}")
    if kwargs:
        raise TypeError(f"{fn}() got unexpected keyword arguments: {sorted(kwargs)}")


class _Epoch:
    """How one call walks its data: the dataset, its length in mini-batches (None when infinite or
    unknown), whether it was made from arrays, and whether each epoch starts it again (all but an
    infinite dataset, as in the SDK)."""

    def __init__(self, x: Any, y: Any, batch_size: int | None, owner: str, fn: str) -> None:
        if _is_dataset(x):
            if batch_size:
                raise ValueError(f"Do not specify `batch_size` in {owner}.{fn}(). Use the Dataset.batch() method to "
                                 "apply batching at the input dataset level.")
            size = int(x.cardinality().numpy())
            self.dataset, self.size, self.from_arrays = x, (size if size >= 0 else None), False
            self.restarts = size != data.INFINITE_CARDINALITY
            return
        if batch_size is None:
            raise ValueError("`batch_size` or `steps` is required for `Tensor` or `NumPy` input data.")
        xs = tf.nest.map_structure(_as_array, x)
        parts = xs if y is None else (xs, tf.nest.map_structure(_as_array, y))
        samples = len(tf.nest.flatten(xs)[0])
        self.dataset = data.Dataset.from_tensor_slices(parts).batch(int(batch_size), drop_remainder=True)
        self.size, self.from_arrays, self.restarts = samples // int(batch_size), True, True


class _LegacyIPUModel:
    """The SDK ≤ 2.1 behaviour shared by :class:`Sequential` and :class:`Model` (mixed in before them)."""

    _num_inputs = 1
    _num_outputs = 1

    def _init_legacy(self, gradient_accumulation_count: int, gradient_accumulation_dtype: Any,
                     layer_replacement: bool, accumulation_count: int, accumulation_dtype: Any) -> None:
        if accumulation_count != 1:
            log.warning("From %s: Argument 'accumulation_count' is deprecated, use 'gradient_accumulation_count' "
                        "instead.", type(self).__name__)
            if gradient_accumulation_count != 1:
                raise ValueError("Arguments accumulation_count and gradient_accumulation_count cannot be used "
                                 "together.")
            gradient_accumulation_count = accumulation_count
        dtype = accumulation_dtype if accumulation_dtype is not None else gradient_accumulation_dtype
        self.gradient_accumulation_count = gradient_accumulation_count
        # layer_replacement swaps Keras layers for the IPU's versions, which compute the same functions
        self.layer_replacement = bool(layer_replacement)
        self._legacy_calls = 0
        if gradient_accumulation_count > 1 or dtype is not None:
            self.set_gradient_accumulation_options(gradient_accumulation_count, dtype=dtype)

    @contextlib.contextmanager
    def _running(self) -> Iterator[None]:
        self._legacy_calls += 1
        try:
            yield
        finally:
            self._legacy_calls -= 1

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not getattr(self, "_legacy_calls", 0):
            raise ValueError(f"{type(self).__name__} can only be called through the `fit`, `evaluate` or `predict` "
                             "interfaces.")
        return super().__call__(*args, **kwargs)  # type: ignore[misc]

    def compile(self, optimizer: Any = "rmsprop", loss: Any = None, metrics: Any = None, loss_weights: Any = None,
                **kwargs: Any) -> None:
        """Keras's ``compile``; ``loss_weights`` only as a list; no sample weights or weighted metrics."""
        if not isinstance(loss_weights, (list, type(None))):
            raise ValueError("loss_weights can only be specified as a list.")
        _validate_args(kwargs, "compile")
        TrainingAPI.compile(self, optimizer, loss, metrics, loss_weights)  # type: ignore[arg-type]

    # -- the SDK's step accounting ---------------------------------------------------------------------
    def _check_device(self) -> None:
        strategy = context.current_strategy()
        if strategy is None or getattr(strategy, "ipu_device", None) is None:
            raise ValueError(f"{type(self).__name__} can only be used on an IPU device.")

    def _check_elements(self, dataset: Any, count: int, fn: str) -> None:
        found = len(tf.nest.flatten(dataset.element_spec))
        if found != count:
            raise ValueError(f"{fn} requires a dataset with a structure containing {count} element(s), but got "
                             f"{found} element(s) instead.")

    def _derive_steps(self, size: int, steps_per_run: int | None, fn: str) -> int:
        """Steps (weight updates) of an epoch of ``size`` mini-batches made from arrays, dropping the rest."""
        per = self.gradient_accumulation_count * (steps_per_run or 1)
        run = f" multiplied by steps_per_run ({steps_per_run})" if steps_per_run else ""
        steps = (size // per) * (steps_per_run or 1)
        if steps == 0:
            raise ValueError(f"The number of mini-batches in the dataset ({size}) must be at least the gradient "
                             f"accumulation count ({self.gradient_accumulation_count}) multiplied by the replication "
                             f"factor (1){run}.")
        if size % per:
            what = "steps per epoch (steps_per_epoch)" if fn == "fit" else "steps"
            log.warning(" The number of mini-batches in the dataset (%d) must be a multiple of the gradient "
                        "accumulation count (%d) multiplied by the replication factor (1)%s. Samples have been "
                        "dropped to give a dataset of %d mini-batches. Adjust the size of the supplied dataset or "
                        "specify the %s if you do not want this to happen.", size, self.gradient_accumulation_count,
                        run, steps * self.gradient_accumulation_count, what)
        return steps

    def _plan(self, epoch: _Epoch, steps: int | None, steps_per_run: int | None, fn: str) -> tuple[int, int]:
        """``(mini-batches per epoch, mini-batches per execution)`` after the SDK's checks."""
        ga, owner = self.gradient_accumulation_count, type(self).__name__
        if not steps and epoch.size is None:
            raise ValueError("When using an infinitely repeating dataset, you must provide the number of steps per "
                             "epoch (steps_per_epoch).")
        if not steps and epoch.from_arrays:
            steps = self._derive_steps(epoch.size, steps_per_run, fn)
        if steps and epoch.size is not None and steps * ga > epoch.size:
            label = "Steps per epoch" if fn == "fit" else "Steps"
            raise ValueError(f"{label} times gradient accumulation count ({steps} x {ga}) is greater than the number "
                             f"of mini-batches in the dataset ({epoch.size}).")
        if steps and steps_per_run and steps % steps_per_run:
            what, loop = _LOOP[fn]
            raise ValueError(f"{owner} requires the {what} ({steps}) to be evenly divisible by the number of steps "
                             f"per execution of the on-device {loop} loop 'steps_per_run' ({steps_per_run}) multiplied "
                             "by the replication factor (1).")
        mini_batches = steps * ga if steps else epoch.size
        head = f"{owner} requires the number of mini-batches in the dataset ({mini_batches}) to be evenly divisible by"
        if steps_per_run is None and mini_batches % ga:
            raise ValueError(f"{head} the gradient accumulation count ({ga}) multiplied by the replication factor (1)")
        if steps_per_run is not None and mini_batches % (ga * steps_per_run):
            raise ValueError(f"{head} the product of 'steps_per_run' ({steps_per_run}), the gradient accumulation "
                             f"count ({ga}), and the replication factor (1).")
        per_execution = steps_per_run * ga if steps_per_run else mini_batches
        return mini_batches, per_execution

    def _prepare(self, fn: str, x: Any, y: Any, batch_size: int | None, steps: int | None,
                 steps_per_run: int | None, prefetch_depth: int | None, kwargs: dict[str, Any],
                 elements: int) -> tuple[Any, int]:
        """The checks every call makes, in the SDK's order; the dataset of one epoch and its length."""
        self._check_device()
        epoch = _Epoch(x, y, batch_size, type(self).__name__, fn)
        _validate_args(kwargs, fn)
        self._check_elements(epoch.dataset, elements, fn)
        if fn != "predict" and not getattr(self, "_is_compiled", False):
            raise RuntimeError("You must compile your model before training/testing. Use `model.compile(optimizer, "
                               "loss)`.")
        mini_batches, per_execution = self._plan(epoch, steps, steps_per_run, fn)
        self._steps_per_execution = per_execution
        self._infeed_options = {} if prefetch_depth is None else {"prefetch_depth": prefetch_depth}
        dataset = epoch.dataset.take(mini_batches) if epoch.restarts else epoch.dataset
        if not hasattr(self, "_functions"):
            self._functions = {}
        return dataset, mini_batches

    # -- fit / evaluate / predict -------------------------------------------------------------------------
    def fit(self, x: Any = None, y: Any = None, *, batch_size: int | None = None, epochs: int = 1, verbose: Any = 1,
            callbacks: Any = None, shuffle: bool = True, initial_epoch: int = 0, steps_per_epoch: int | None = None,
            steps_per_run: int | None = None, prefetch_depth: int | None = None, **kwargs: Any) -> Any:
        """Train for ``epochs`` epochs of ``steps_per_epoch`` weight updates (each over
        ``gradient_accumulation_count`` mini-batches), ``steps_per_run`` of them per execution.
        ``shuffle`` is not supported by the SDK (shuffle the dataset instead) and has no effect."""
        dataset, mini_batches = self._prepare("fit", x, y, batch_size, steps_per_epoch, steps_per_run,
                                              prefetch_depth, kwargs, self._num_inputs + self._num_outputs)
        with self._running():
            return TrainingAPI.fit(self, dataset, epochs=epochs, verbose=verbose,  # type: ignore[arg-type]
                                   callbacks=callbacks, initial_epoch=initial_epoch, steps_per_epoch=mini_batches,
                                   shuffle=False)

    def evaluate(self, x: Any = None, y: Any = None, *, batch_size: int | None = None, verbose: Any = 1,
                 steps: int | None = None, callbacks: Any = None, steps_per_run: int | None = None,
                 prefetch_depth: int | None = None, **kwargs: Any) -> list[Any]:
        """The loss and metrics over the data, as a list (the loss first)."""
        dataset, mini_batches = self._prepare("evaluate", x, y, batch_size, steps, steps_per_run, prefetch_depth,
                                              kwargs, self._num_inputs + self._num_outputs)
        with self._running():
            logs = TrainingAPI.evaluate(self, dataset, verbose=verbose, steps=mini_batches,  # type: ignore[arg-type]
                                        callbacks=callbacks, return_dict=True)
        return [logs[name] for name in self.metrics_names if name in logs]

    def predict(self, x: Any, batch_size: int | None = None, verbose: Any = 0, steps: int | None = None,
                callbacks: Any = None, steps_per_run: int | None = None, prefetch_depth: int | None = None,
                **kwargs: Any) -> Any:
        """The outputs for every mini-batch: an array for one output, a list for several."""
        dataset, mini_batches = self._prepare("predict", x, None, batch_size, steps, steps_per_run, prefetch_depth,
                                              kwargs, self._num_inputs)
        with self._running():
            out = TrainingAPI.predict(self, dataset, verbose=verbose, steps=mini_batches,  # type: ignore[arg-type]
                                      callbacks=callbacks)
        return list(out) if isinstance(out, tuple) else out


class Sequential(_LegacyIPUModel, models.Sequential):
    """``ipu.keras.Sequential(layers, gradient_accumulation_count=1, gradient_accumulation_dtype=None,
    layer_replacement=False)``: a Keras Sequential model for one IPU (see the module docstring)."""

    def __init__(self, layers: Any = None, gradient_accumulation_count: int = 1,
                 gradient_accumulation_dtype: Any = None, layer_replacement: bool = False,
                 accumulation_count: int = 1, accumulation_dtype: Any = None) -> None:
        if not isinstance(layers, list):
            raise ValueError("IPU Sequential requires a list of Layers.")
        if not all(isinstance(layer, Layer) for layer in layers):
            raise ValueError("An IPU Sequential's list of Layers may only contain Keras Layers.")
        models.Sequential.__init__(self, layers)
        self._init_legacy(gradient_accumulation_count, gradient_accumulation_dtype, layer_replacement,
                          accumulation_count, accumulation_dtype)


class Model(_LegacyIPUModel, models.Model):
    """``ipu.keras.Model(inputs, outputs, gradient_accumulation_count=1, gradient_accumulation_dtype=None,
    layer_replacement=False)``: a functional Keras model for one IPU (see the module docstring)."""

    def __init__(self, inputs: Any, outputs: Any, gradient_accumulation_count: int = 1,
                 gradient_accumulation_dtype: Any = None, layer_replacement: bool = False,
                 accumulation_count: int = 1, accumulation_dtype: Any = None, **kwargs: Any) -> None:
        models.Model.__init__(self, inputs, outputs, **kwargs)
        self._num_inputs, self._num_outputs = len(self.inputs), len(self.outputs)
        self._init_legacy(gradient_accumulation_count, gradient_accumulation_dtype, layer_replacement,
                          accumulation_count, accumulation_dtype)


class PipelineSequential(Sequential):
    """``ipu.keras.PipelineSequential(stages, gradient_accumulation_count, ...)`` (SDK ≤ 2.1): a Sequential
    model of lists of layers, each list a pipeline stage (on IPU ``device_mapping[i]``, default ``i``); it
    trains with gradient accumulation over ``gradient_accumulation_count`` mini-batches, as the pipeline
    computes it."""

    def __init__(self, stages: list[list[Layer]], gradient_accumulation_count: int,
                 gradient_accumulation_dtype: Any = None, batch_serialization_iterations: int = 1,
                 device_mapping: list[int] | None = None,
                 pipeline_schedule: Any = None, recomputation_mode: Any = None, **kwargs: Any) -> None:
        if not isinstance(stages, (list, tuple)) or not all(isinstance(s, (list, tuple)) for s in stages):
            raise TypeError("PipelineSequential requires a list of lists of layers, one list per pipeline stage.")
        if batch_serialization_iterations != 1:
            raise UnimplementedError("PipelineSequential(batch_serialization_iterations != 1) is not supported by "
                                     "popjit.")
        super().__init__([layer for stage in stages for layer in stage], gradient_accumulation_count,
                         gradient_accumulation_dtype, **kwargs)
        self._stage_assignment = [k for k, stage in enumerate(stages) for _ in stage]
        self._pipelining = {"device_mapping": list(device_mapping) if device_mapping is not None else None,
                            "schedule": pipeline_schedule}


class PipelineModel(Model):
    """``ipu.keras.PipelineModel(inputs, outputs, gradient_accumulation_count, ...)`` (SDK ≤ 2.1): a functional
    model whose layers were called inside ``ipu.keras.PipelineStage`` scopes; it trains with gradient
    accumulation over ``gradient_accumulation_count`` mini-batches, as the pipeline computes it."""

    def __init__(self, inputs: Any, outputs: Any, gradient_accumulation_count: int,
                 gradient_accumulation_dtype: Any = None, batch_serialization_iterations: int = 1,
                 device_mapping: list[int] | None = None, pipeline_schedule: Any = None, recomputation_mode: Any = None,
                 **kwargs: Any) -> None:
        if batch_serialization_iterations != 1:
            raise UnimplementedError("PipelineModel(batch_serialization_iterations != 1) is not supported by popjit.")
        super().__init__(inputs, outputs, gradient_accumulation_count, gradient_accumulation_dtype, **kwargs)
        self._pipelining = {"device_mapping": list(device_mapping) if device_mapping is not None else None,
                            "schedule": pipeline_schedule}


SequentialPipelineModel = PipelineSequential
