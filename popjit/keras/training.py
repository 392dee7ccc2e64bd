"""Keras's training API on ``Model``: ``compile``, ``fit``, ``evaluate``, ``predict`` and the
``*_on_batch`` methods.

Inside an IPU strategy's scope each mode is one compiled program: a device loop of
``steps_per_execution`` steps that reads its batches from an infeed and writes each step's results
to an outfeed, reused across calls and epochs (Graphcore's execution model); the host sees the
last step's results of each execution, so per-batch callbacks fire once per execution. Outside
any IPU scope a model trains as stock Keras does on the CPU: one compiled step per batch.
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from popjit import context, data
from popjit.frontend import api as tf
from popjit.frontend import control_flow
from popjit.frontend.tracing import current_trace
from popjit.keras import callbacks as callbacks_mod
from popjit.keras import gradient_accumulation, mixed_precision, optimizers, pipelining
from popjit.keras.compile_utils import LossesContainer, MetricsContainer
from popjit.runtime import device as devices

log = logging.getLogger("popjit")

_MAKE_FUNCTIONS = ("make_train_function", "make_test_function", "make_predict_function")


def user_overrides(cls: type, name: str) -> bool:
    """Whether a class of the user's (not popjit's) in ``cls``'s hierarchy defines ``name``."""
    return any(name in c.__dict__ for c in cls.__mro__ if c.__module__.split(".")[0] != "popjit")


# -- data ----------------------------------------------------------------------------------------


def unpack_x_y_sample_weight(data: Any) -> tuple[Any, Any, Any]:
    """``(x, y, sample_weight)`` from a batch: ``x``, ``(x,)``, ``(x, y)`` or ``(x, y, sample_weight)``."""
    if isinstance(data, list):
        data = tuple(data)
    if not isinstance(data, tuple):
        return data, None, None
    if len(data) == 1:
        return data[0], None, None
    if len(data) == 2:
        return data[0], data[1], None
    if len(data) == 3:
        return data
    raise ValueError(f"Data is expected to be in format `x`, `(x,)`, `(x, y)`, or `(x, y, sample_weight)`, found: "
                     f"{data}")


def _as_array(value: Any) -> np.ndarray:
    arr = value.numpy() if hasattr(value, "numpy") else np.asarray(value)
    return arr.astype(np.float32) if arr.dtype == np.float64 else arr  # Keras's float64 -> float32 cast


def _is_sequence(x: Any) -> bool:
    """A ``keras.utils.Sequence`` (or an object shaped like one: batches by index, an epoch hook)."""
    return hasattr(x, "__getitem__") and hasattr(x, "__len__") and hasattr(x, "on_epoch_end")


def _is_dataset(x: Any) -> bool:
    return hasattr(x, "element_spec") and hasattr(x, "_make_host_iterator")


def _class_weights(y: Any, class_weight: dict[int, float]) -> np.ndarray:
    """Per-example weights from a class's weight (labels as integers or one-hot rows)."""
    labels = np.asarray(y)
    ids = labels.argmax(axis=-1) if labels.ndim > 1 and labels.shape[-1] > 1 else labels.reshape(len(labels), -1)[:, 0]
    return np.array([class_weight.get(int(i), 1.0) for i in ids], np.float32)


class DataHandler:
    """One call's data: ``x``/``y``/``sample_weight`` as arrays or a ``tf.data.Dataset`` of batches,
    how many steps make an epoch, and how they are grouped into executions on the IPU."""

    def __init__(self, x: Any, y: Any = None, sample_weight: Any = None, batch_size: int | None = None,
                 steps: int | None = None, shuffle: bool = False, class_weight: dict | None = None,
                 on_ipu: bool = False, steps_per_execution: int = 1, mode: str = "train", replicas: int = 1) -> None:
        self.on_ipu, self.mode, self.replicas = on_ipu, mode, replicas
        self.feeds: tuple[Any, Any] | None = None  # the infeed and outfeed bound to this data on the IPU
        self.sequence: Any = None  # a keras.utils.Sequence (host execution only)
        if _is_dataset(x):
            if y is not None or sample_weight is not None:
                raise ValueError("`y` argument is not supported when using dataset as input.")
            self._init_dataset(x, steps)
        elif _is_sequence(x) and not on_ipu:
            if y is not None or sample_weight is not None:
                raise ValueError("`y` argument is not supported when using `keras.utils.Sequence` as input.")
            self._init_sequence(x, steps, shuffle)
        elif callable(getattr(x, "__next__", None)) or _is_sequence(x):
            raise ValueError(f"The provided set of data is of type `{type(x)}` which is not compatible with the IPU's "
                             "requirement to know the data shape ahead of time. Please use "
                             "`tf.data.Dataset.from_generator()` to specify the shape of your data." if on_ipu else
                             f"popjit's Keras takes arrays or a tf.data.Dataset, not a {type(x).__name__}: wrap it "
                             "with tf.data.Dataset.from_generator().")
        else:
            self._init_arrays(x, y, sample_weight, batch_size, steps, shuffle, class_weight)
        if on_ipu and replicas > 1:
            self._distribute(steps)
        self.steps_per_execution = self._execution_size(steps_per_execution) if on_ipu else 1

    # -- sources -------------------------------------------------------------------------------------
    def _init_arrays(self, x: Any, y: Any, sample_weight: Any, batch_size: int | None, steps: int | None,
                     shuffle: bool, class_weight: dict | None) -> None:
        xs = tf.nest.map_structure(_as_array, x)
        ys = tf.nest.map_structure(_as_array, y) if y is not None else None
        if class_weight is not None and ys is not None:
            sample_weight = _class_weights(tf.nest.flatten(ys)[0], class_weight)
        sws = tf.nest.map_structure(_as_array, sample_weight) if sample_weight is not None else None
        sizes = {len(a) for a in tf.nest.flatten((xs, ys, sws)) if a is not None}
        if len(sizes) != 1:
            raise ValueError(f"Data cardinality is ambiguous: the arrays have {sorted(sizes)} samples. Make sure all "
                             "arrays contain the same number of samples.")
        (self.samples,) = sizes
        self.batch_size = int(batch_size or 32)
        if self.on_ipu and self.samples % self.batch_size:
            raise ValueError("The provided set of data has a partial batch, which could result in data being dropped. "
                             f"Either adjust the `batch_size` of your model (currently set to {self.batch_size}) or "
                             "pad your dataset to ensure there are no partial batches.")
        self.arrays = tuple(a for a in (xs, ys, sws) if a is not None)
        self.shuffle = shuffle
        self.steps = int(steps) if steps is not None else math.ceil(self.samples / self.batch_size)
        self.dataset = None

    def _init_dataset(self, dataset: Any, steps: int | None) -> None:
        for spec in tf.nest.flatten(dataset.element_spec):
            if self.on_ipu and (spec.shape is None or any(d is None for d in spec.shape)):
                raise ValueError(f"The provided set of data contains a shape {list(spec.shape)} which is not fully "
                                 "defined. Executing on IPU requires all dataset elements to have fully defined "
                                 "shapes. If using batch() make sure to set `drop_remainder=True`.")
        size = int(dataset.cardinality().numpy())
        if steps is None and size < 0 and self.on_ipu:
            raise ValueError("Could not infer the size of the data. You must specify the number of steps to run.")
        if steps is None and size == data.INFINITE_CARDINALITY:
            name = "steps_per_epoch" if self.mode == "train" else "steps"
            raise ValueError(f"When passing an infinitely repeating dataset, you must specify the `{name}` argument.")
        if steps is not None and 0 <= size < steps and self.on_ipu:
            raise ValueError(f"Your input does not have enough data. Make sure that your dataset or generator can "
                             f"generate at least {steps} batches (currently it can only generate {size} batches). You "
                             "may need to use the repeat() function when building your dataset.")
        self.dataset, self.arrays, self.shuffle = dataset, None, False
        self._cardinality = size
        # None: a host epoch runs until a dataset of unknown size ends, as in Keras
        self.steps = int(steps) if steps is not None else (size if size >= 0 else None)

    def _init_sequence(self, sequence: Any, steps: int | None, shuffle: bool) -> None:
        self.sequence, self.dataset, self.arrays, self.shuffle = sequence, None, None, shuffle
        self.steps = int(steps) if steps is not None else len(sequence)

    def _distribute(self, steps: int | None) -> None:
        """Make :attr:`steps` count each replica's steps: every step of a replicated program takes one batch
        per replica. Given ``steps`` are per replica and need that many batches for every replica (K6);
        otherwise the batches are shared out evenly and the remainder dropped (logged, as Graphcore's Keras)."""
        r = self.replicas
        size = getattr(self, "samples", None)
        batches = size // self.batch_size if size is not None else self._cardinality
        if steps is not None:
            if 0 <= batches < steps * r:
                raise ValueError(f"The provided dataset contains {batches} items, but all {r} replicas are requested "
                                 f"to run {steps} steps each. Make sure the dataset contains at least {steps * r} "
                                 "items.")
            return
        if self.steps is None:
            return
        if self.steps % r:
            log.info("Dataset of length %d is being evenly distributed between %d replicas. The remaining %d batches "
                     "will be dropped.", self.steps, r, self.steps % r)
        if self.steps < r:
            raise ValueError(f"The provided dataset contains {self.steps} items, but all {r} replicas are requested to "
                             f"run 1 steps each. Make sure the dataset contains at least {r} items.")
        self.steps //= r

    def _execution_size(self, steps_per_execution: int) -> int:
        spe = int(steps_per_execution or 1)
        if spe > self.steps:
            warnings.warn(f"`steps_per_execution` has been set to {spe} but the dataset provided only contains "
                          f"{self.steps} batches. Using {self.steps} as `steps_per_execution`.", stacklevel=4)
            spe = self.steps
        if self.mode != "predict" and self.steps % spe:
            raise ValueError("`steps_per_execution` must be a divisor of the number of batches in the dataset "
                             f"provided{' to this replica' if self.replicas > 1 else ''}.")
        return spe

    # -- iteration -----------------------------------------------------------------------------------
    def batches(self) -> Iterator[Any]:
        """One epoch's batches, as NumPy structures (host execution)."""
        if self.sequence is not None:
            yield from self._sequence_batches()
            return
        if self.dataset is not None:
            it = iter(self.dataset._make_host_iterator())
            for _ in range(self.steps) if self.steps is not None else iter(int, 1):
                try:
                    yield tf.nest.map_structure(np.asarray, it.get_next())
                except StopIteration:
                    return
            return
        order = np.random.permutation(self.samples) if self.shuffle else np.arange(self.samples)
        for step in range(self.steps):
            idx = order[step * self.batch_size:(step + 1) * self.batch_size]
            if not len(idx):
                return
            yield tf.nest.map_structure(lambda a, idx=idx: a[idx], self.arrays if len(self.arrays) > 1 else
                                        self.arrays[0])

    def _sequence_batches(self) -> Iterator[Any]:
        """A ``keras.utils.Sequence``'s batches (in shuffled order if asked); ``on_epoch_end`` after a
        training epoch, as Keras calls it."""
        count = len(self.sequence)
        order = np.random.permutation(count) if self.shuffle else np.arange(count)
        for step in range(min(self.steps, count)):
            batch = self.sequence[int(order[step])]
            yield tuple(batch) if isinstance(batch, list) else batch
        if self.mode == "train":
            self.sequence.on_epoch_end()

    def device_dataset(self) -> Any:
        """The batches of every epoch, one after another, as a dataset an infeed can read."""
        if self.dataset is not None:
            return self.dataset.repeat()
        elements = self.arrays if len(self.arrays) > 1 else self.arrays[0]
        ds = data.Dataset.from_tensor_slices(_lists_to_tuples(elements))
        if self.shuffle:
            ds = ds.shuffle(self.samples, reshuffle_each_iteration=True)
        return ds.batch(self.batch_size, drop_remainder=True).repeat()

    def executions(self) -> Iterator[tuple[int, int]]:
        """``(first step, steps)`` of each execution of an epoch."""
        step = 0
        while step < self.steps:
            n = min(self.steps_per_execution, self.steps - step)
            yield step, n
            step += n


def replicas(strategy: Any, shards: int = 1) -> int:
    """How many replicas the programs ``strategy`` runs have when they span ``shards`` IPUs (1 on the host)."""
    return strategy._replicas_for(shards) if strategy is not None else 1


def _lists_to_tuples(structure: Any) -> Any:
    """Lists become tuples (a dataset would read a list of arrays as one tensor, as TensorFlow does)."""
    if isinstance(structure, (list, tuple)):
        return tuple(_lists_to_tuples(x) for x in structure)
    if isinstance(structure, dict):
        return {k: _lists_to_tuples(v) for k, v in structure.items()}
    return structure


# -- the API on Model ------------------------------------------------------------------------------


def _numpy_logs(logs: dict[str, Any], order: list[str]) -> dict[str, Any]:
    """NumPy logs with the metrics first in ``order`` (a compiled step's dict comes back key-sorted)."""
    keys = [k for k in order if k in logs] + [k for k in logs if k not in order]
    return {k: (float(np.asarray(logs[k])) if np.ndim(logs[k]) == 0 else np.asarray(logs[k])) for k in keys}


class TrainingAPI:
    """``compile``/``fit``/``evaluate``/``predict`` for :class:`popjit.keras.models.Model`."""

    # -- compile ---------------------------------------------------------------------------------
    def compile(self, optimizer: Any = "rmsprop", loss: Any = None, metrics: Any = None, loss_weights: Any = None,
                weighted_metrics: Any = None, run_eagerly: bool | None = None, steps_per_execution: int | None = None,
                jit_compile: bool | None = None, **kwargs: Any) -> None:
        """Configure training: an optimizer, a loss (per output), metrics, and ``steps_per_execution``."""
        if kwargs:
            raise TypeError(f"Invalid keyword argument(s) in `compile()`: {tuple(kwargs)}. Valid keyword arguments "
                            "include \"cloning\", \"experimental_run_tf_function\", \"distribute\", "
                            "\"target_tensors\", or \"sample_weight_mode\".")
        strategy = context.current_strategy()
        if run_eagerly and strategy is not None:
            raise RuntimeError("Keras models cannot run eagerly when using `IPUStrategy`. Set `run_eagerly=False` "
                               "when calling `compile`.")
        if strategy is not None:
            self._check_variables_in(strategy)
        self.optimizer = optimizers.get(optimizer)
        if self.dtype_policy.name == "mixed_float16" and not isinstance(self.optimizer,
                                                                       mixed_precision.LossScaleOptimizer):
            self.optimizer = mixed_precision.LossScaleOptimizer(self.optimizer)  # as Keras: mixed_float16 scales losses
        self.loss = loss
        names = self._output_names()
        self.compiled_loss = LossesContainer(loss, loss_weights, names) if loss is not None else None
        self.compiled_metrics = MetricsContainer(metrics, weighted_metrics, names)
        self._steps_per_execution = int(steps_per_execution or 1)
        self._run_eagerly = bool(run_eagerly)
        self._jit_compile = jit_compile
        self._functions: dict[Any, Any] = {}
        self._is_compiled = True
        self._accumulator = self._make_accumulator()
        if self._device_loop(strategy) and steps_per_execution is None:
            log.info("The model `%s` has been configured with only 1 steps per execution. Consider increasing the "
                     "value for the `steps_per_execution` argument passed to the `compile()` method to improve "
                     "performance.", self.name)

    def set_gradient_accumulation_options(self, gradient_accumulation_steps_per_replica: int | None = None,
                                          experimental_normalize_gradients: bool | None = None,
                                          gradient_accumulation_reduction_method: Any = "sum",
                                          **gradient_accumulation_optimizer_kwargs: Any) -> None:
        """Graphcore's extension: apply the optimizer once every ``gradient_accumulation_steps_per_replica``
        training steps, to their gradients summed (``"sum"``), averaged (``"mean"``, ``"running_mean"``)
        or, with ``experimental_normalize_gradients``, each scaled by ``1 / steps`` and summed. ``None``
        turns accumulation off. ``steps_per_execution`` must then be a multiple of the steps."""
        kwargs = dict(gradient_accumulation_optimizer_kwargs)
        for key in ("opt", "num_mini_batches"):
            if key in kwargs:
                raise ValueError(f"Found `{key}` key in `gradient_accumulation_optimizer_kwargs`. This argument is "
                                 "automatically set by Keras.")
        steps = gradient_accumulation_steps_per_replica
        if steps is not None and (not isinstance(steps, int) or isinstance(steps, bool) or steps < 1):
            raise ValueError(f"Expected `gradient_accumulation_steps_per_replica` to be a positive integer, but got "
                             f"{steps} instead.")
        reduction = gradient_accumulation.GradientAccumulationReductionMethod.parse(
            "sum" if experimental_normalize_gradients else gradient_accumulation_reduction_method)
        unknown = set(kwargs) - {"offload_weight_update_variables", "replicated_optimizer_state_sharding", "dtype"}
        if unknown:
            raise TypeError(f"Unexpected gradient accumulation option(s): {sorted(unknown)}")
        gradient_accumulation.refuse_memory_options(**kwargs)
        self._gradient_accumulation = (steps, reduction, bool(experimental_normalize_gradients)) if steps else None
        self._functions = {}
        self._accumulator = self._make_accumulator()

    def _make_accumulator(self) -> Any:
        options = getattr(self, "_gradient_accumulation", None)
        if options is None or getattr(self, "optimizer", None) is None:
            return None
        steps, reduction, normalize = options
        return gradient_accumulation.GradientAccumulator(self.optimizer, steps, reduction,
                                                         1.0 / steps if normalize else 1.0)

    def _check_gradient_accumulation(self, on_ipu: bool) -> None:
        """Graphcore's checks when training with gradient accumulation or pipelining."""
        pipelined = on_ipu and self._pipelined()
        if pipelined:
            self._check_pipelined()
        if getattr(self, "_accumulator", None) is None:
            return
        steps = self._accumulator.steps
        if user_overrides(type(self), "train_step") and not pipelined:
            raise RuntimeError(f"The function `train_step` for the model {self.name} has been overridden. This is not "
                               "supported for Keras models with gradient accumulation enabled.")
        if user_overrides(type(self.optimizer), "minimize"):
            raise ValueError("When using Gradient Accumulation or Pipelining, the provided optimizer must not override "
                             "OptimizerV2.minimize.")
        if on_ipu and self._steps_per_execution % steps:
            raise RuntimeError(
                f"The {'pipelined ' if pipelined else ''}model has been configured to use gradient accumulation for "
                "training, however the current "
                f"`steps_per_execution` value (set to {self._steps_per_execution}) is not divisible by "
                f"`gradient_accumulation_steps_per_replica` ({steps}). You need to adjust either "
                "`steps_per_execution` or`gradient_accumulation_steps_per_replica` to make sure that "
                "`steps_per_execution` is divisible by `gradient_accumulation_steps_per_replica`.")

    def _check_pipelined(self) -> None:
        """Graphcore's rules for training a pipelined model (gradient accumulation at least twice the stages,
        none of the step functions overridden)."""
        for name in ("train_step", "call", "test_step", "predict_step"):
            if user_overrides(type(self), name) and getattr(self, "_is_graph_network", False):
                raise RuntimeError(f"The function `{name}` for the model {self.name} has been overridden. This is not "
                                   "supported for pipelined Keras models.")
        if getattr(self, "_accumulator", None) is None:
            raise ValueError("The model which you are attempting to train is pipelined, however "
                             "`gradient_accumulation_steps_per_replica` has not been set through "
                             "`set_pipelining_options()`. You need to set this value as pipelined models will perform "
                             "gradient accumulation when training.")
        least = 2 * (max(s for s in self._stages() if s is not None) + 1)
        if self._accumulator.steps < least:
            raise tf.errors.FailedPreconditionError(
                f"The number of iterations of the pipeline must be at least {least}, but it is "
                f"{self._accumulator.steps}. This number might be called `gradient_accumulation_count`, "
                "`gradient_accumulation_steps_per_replica` or `steps_per_execution` depending on the API used.")

    # -- pipelining (Graphcore's extension; popjit.keras.pipelining) --------------------------------
    def _stage_calls(self) -> list[tuple[Any, Any, list[int], Any]]:
        """Each layer call with a pipeline stage, in post-order: (assignment class, layer, positions of the
        calls it takes inputs from, node)."""
        if not self.built:
            raise RuntimeError(f"Cannot get pipeline stage assignments for model `{self.name}` which has not been "
                               "built yet. Please call `model.build()` first.")
        if getattr(self, "_stack", None) is not None:  # Sequential
            return [(pipelining.SequentialLayerPipelineStageAssignment, layer, [k - 1] if k else [], None)
                    for k, layer in enumerate(self.layers)]
        if self._is_graph_network:
            nodes = [n for n in self._nodes if n.keras_inputs]
            position = {id(n): k for k, n in enumerate(nodes)}
            calls = []
            for node in nodes:
                inbound = [kt._keras_history[0]._inbound_nodes[kt._keras_history[1]] for kt in node.keras_inputs]
                calls.append((pipelining.FunctionalLayerPipelineStageAssignment, node.layer,
                              [position[id(n)] for n in inbound if id(n) in position], node))
            return calls
        return [(pipelining.ModelLayerPipelineStageAssignment, layer, [], None) for layer in self.layers]

    def _stages(self) -> list[int | None]:
        """The stage of each call (:meth:`_stage_calls`): set by :meth:`set_pipeline_stage_assignment`, else
        from the ``PipelineStage`` scopes."""
        kept = getattr(self, "_stage_assignment", None)
        if kept is not None:
            return list(kept)
        return [node.stage if node is not None else layer._pipeline_stage for _, layer, _, node in self._stage_calls()]

    def get_pipeline_stage_assignment(self) -> list[Any]:
        """Each layer call of the model (a Sequential's layers, a functional model's nodes in post-order) and
        the pipeline stage it is assigned to."""
        calls, stages = self._stage_calls(), self._stages()
        return [cls(layer, 0 if node is None else layer._inbound_nodes.index(node),
                    [calls[j][1] for j in inbound], stage)
                for (cls, layer, inbound, node), stage in zip(calls, stages)]

    def set_pipeline_stage_assignment(self, pipeline_stage_assignment: list[Any]) -> None:
        """Assign each layer call to a stage: a list of ints (one per call, for a Sequential) or the edited list
        :meth:`get_pipeline_stage_assignment` returned, with Graphcore's checks."""
        if not isinstance(pipeline_stage_assignment, list):
            raise ValueError("`pipeline_stage_assignment` needs to be a list")
        if not self.built:
            raise RuntimeError(f"Cannot set pipeline stage assignments for model `{self.name}` which has not been "
                               "built yet. Please call `model.build()` first or assign pipeline stages in your graph "
                               "definition using PipelineStage scopes.")
        calls = self._stage_calls()
        if len(pipeline_stage_assignment) != len(calls):
            given = len(pipeline_stage_assignment)
            raise ValueError(f"The length of the provided `pipeline_stage_assignment` ({given}) does not match the "
                             f"number of layers in the graph ({len(calls)}). Each layer needs to be assigned a "
                             "pipeline stage.")
        stages = [a if isinstance(a, int) else a.pipeline_stage for a in pipeline_stage_assignment]
        pipelining.check_stages(stages, [layer.name for _, layer, _, _ in calls], [c[2] for c in calls])
        self._stage_assignment = stages
        self._functions = {}

    def reset_pipeline_stage_assignment(self) -> None:
        """Forget the assignment :meth:`set_pipeline_stage_assignment` made."""
        self._stage_assignment = None
        self._functions = {}

    def print_pipeline_stage_assignment_summary(self, line_length: int | None = None,
                                                print_fn: Callable[[str], Any] | None = None) -> None:
        """Graphcore's table of each layer call, its input layers and its pipeline stage."""
        rows = [(f"{a.layer.name} ({type(a.layer).__name__}) ({a.node_index})",
                 ", ".join(x.name for x in a.inbound_layers), str(a.pipeline_stage))
                for a in self.get_pipeline_stage_assignment()]
        pipelining.summary(rows, line_length, print_fn)

    def set_pipelining_options(self, gradient_accumulation_steps_per_replica: int | None = None,
                               device_mapping: list[int] | None = None, accumulate_outfeed: bool | None = None,
                               experimental_normalize_gradients: bool | None = None,
                               gradient_accumulation_reduction_method: Any = "sum", **pipelining_kwargs: Any) -> None:
        """Graphcore's extension: train the model as a pipeline of its stages (``PipelineStage`` scopes or
        :meth:`set_pipeline_stage_assignment`), stage ``i`` on IPU ``device_mapping[i]`` (default: its own),
        the optimizer applied once every ``gradient_accumulation_steps_per_replica`` steps. The values are
        those of gradient accumulation over those steps; the program spans ``max(device_mapping) + 1`` IPUs
        and replicates over the rest of the device."""
        for key in ("gradient_accumulation_count", "repeat_count", "inputs", "infeed_queue", "outfeed_queue",
                    "optimizer_function", "outfeed_loss", "outfeed_mask", "reduction_method", "name"):
            if key in pipelining_kwargs:
                raise ValueError(f"Found `{key}` key in `pipelining_kwargs`. This argument is automatically set by "
                                 "Keras.")
        for key, value in pipelining_kwargs.items():
            if key not in ("pipeline_schedule", "recomputation_mode") and value not in (None, False):
                raise tf.errors.UnimplementedError(f"set_pipelining_options({key}={value!r}) is not supported by "
                                                   "popjit. Remove it.")
        if accumulate_outfeed:
            raise tf.errors.UnimplementedError("set_pipelining_options(accumulate_outfeed=True) is not supported by "
                                               "popjit's Keras.")
        if device_mapping is not None and (not isinstance(device_mapping, list) or
                                           any(type(d) is not int or d < 0 for d in device_mapping)):
            raise ValueError(f"device_mapping must be a list of IPU indices, not {device_mapping!r}.")
        self._pipelining = {"device_mapping": device_mapping, "schedule": pipelining_kwargs.get("pipeline_schedule")}
        self.set_gradient_accumulation_options(gradient_accumulation_steps_per_replica,
                                               experimental_normalize_gradients, gradient_accumulation_reduction_method)

    def _pipelined(self) -> bool:
        """Whether the model is pipelined: some of its layer calls have a stage (an unbuilt model: an
        assignment was set, as ``PipelineSequential`` sets one)."""
        if not self.built:
            return getattr(self, "_stage_assignment", None) is not None
        return any(s is not None for s in self._stages())

    def _pipeline_shards(self) -> int:
        """The IPUs one copy of the model's programs spans: one per stage, or as ``device_mapping`` maps them."""
        if not self._pipelined():
            return 1
        stages = self._stages()
        calls = self._stage_calls() if self.built else []
        missing = [layer.name for (_, layer, _, _), stage in zip(calls, stages) if stage is None]
        if missing:
            raise ValueError(f"All layers of a pipelined model must have an associated pipeline stage. However, "
                             f"{missing[0]} has not been assigned to one. Pipeline stages can be assigned when a layer "
                             "is constructed, or each time a layer is called. Different pipeline stages can assigned "
                             "to each call.")
        mapping = (getattr(self, "_pipelining", None) or {}).get("device_mapping")
        count = max(s for s in stages if s is not None) + 1
        if mapping is not None and len(mapping) != count:
            raise ValueError(f"Each stage must be mapped to an IPU: {len(mapping)} mappings != {count} stages")
        return (max(mapping) if mapping else count - 1) + 1

    def _stage_mapping(self) -> list[int]:
        """The IPU of each pipeline stage: ``device_mapping``, else stage ``i`` on IPU ``i``."""
        count = max(s for s in self._stages() if s is not None) + 1
        return (getattr(self, "_pipelining", None) or {}).get("device_mapping") or list(range(count))

    def _stage_ipus(self) -> dict[int, int]:
        """The IPU of each pipelined layer call, by the id of its node (functional models) or of its layer."""
        mapping = self._stage_mapping()
        return {id(node if node is not None else layer): mapping[stage]
                for (_, layer, _, node), stage in zip(self._stage_calls(), self._stages()) if stage is not None}

    def _pipeline_marker(self, mode: str) -> tuple[str, tuple[int, ...], bool, int]:
        """What the schedule needs of the pipelined device loop of ``mode``: its pipeline schedule, the IPU of
        each stage, whether backward passes recompute, and the steps per weight update (0: inference)."""
        schedule = (getattr(self, "_pipelining", None) or {}).get("schedule")
        name = ("Grouped", "Interleaved", "Sequential")[0 if schedule is None else int(schedule)]
        training = mode == "train"
        accumulator = getattr(self, "_accumulator", None)
        return (name, tuple(self._stage_mapping()),
                training and bool(devices.configured_option("allow_recompute", False)),
                accumulator.steps if training and accumulator is not None else 0)

    def _shards_on(self, strategy: Any) -> int:
        """The IPUs one copy of this model's programs spans on ``strategy`` (1 on the host)."""
        return self._pipeline_shards() if self._device_loop(strategy) else 1

    def _log_effective_batch(self, handler: DataHandler) -> None:
        """Graphcore's log of the batch one weight update sees, when gradients are accumulated or replicated."""
        steps = self._accumulator.steps if getattr(self, "_accumulator", None) is not None else 1
        batch = getattr(handler, "batch_size", None)
        if batch is None and handler.dataset is not None:
            batch = tf.nest.flatten(handler.dataset.element_spec)[0].shape[0]
        if handler.replicas > 1:
            log.info("Training is distributed across %d replicas, your effective batch size is %d.", handler.replicas,
                     (batch or 1) * steps * handler.replicas)
        elif steps > 1 and batch:
            log.info("Training is accumulating gradients over %d steps of %d samples: your effective batch size "
                     "is %d.", steps, batch, steps * batch)

    def _check_variables_in(self, strategy: Any) -> None:
        """Keras's rule: a model compiled in a strategy's scope was also created in it."""
        for v in self.variables if self.built else ():
            if v.device != strategy.ipu_device:
                raise ValueError(
                    f"Variable ({v.name}) was not created in the distribution strategy scope of ({strategy}). It is "
                    "most likely due to not all layers or the model or optimizer being created outside the "
                    "distribution strategy scope. Try to make sure your code looks similar to the following.\n"
                    "with strategy.scope():\n  model=_create_model()\n  model.compile(...)")

    def _output_names(self) -> list[str]:
        if getattr(self, "_is_graph_network", False):
            return [kt._keras_history[0].name for kt in self.outputs]
        return ["output_1"]

    @property
    def metrics(self) -> list[Any]:
        """The loss trackers, then the compiled metrics (built by the first step)."""
        out: list[Any] = []
        if getattr(self, "compiled_loss", None) is not None:
            out += self.compiled_loss.metrics
        if getattr(self, "compiled_metrics", None) is not None:
            out += self.compiled_metrics.metrics
        return out

    @property
    def metrics_names(self) -> list[str]:
        return [m.name for m in self.metrics]

    def reset_metrics(self) -> None:
        """Every metric's state back to zero."""
        for m in self.metrics:
            m.reset_state()

    # -- steps -----------------------------------------------------------------------------------
    def train_step(self, data: Any) -> dict[str, Any]:
        """One training step: forward, loss, gradients, optimizer update, metrics."""
        x, y, sample_weight = unpack_x_y_sample_weight(data)
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            with pipelining.on_last_stage_ipu():
                loss = self.compiled_loss(y, y_pred, sample_weight, regularization_losses=self.losses)
        if getattr(self, "_accumulator", None) is not None:
            # the optimizer's gradients: a LossScaleOptimizer's are of the scaled loss, unscaled
            self._accumulator.apply_gradients(self.optimizer._compute_gradients(loss, self.trainable_variables,
                                                                                tape=tape))
        else:
            self.optimizer.minimize(loss, self.trainable_variables, tape=tape)
        with pipelining.on_last_stage_ipu():
            self.compiled_metrics.update_state(y, y_pred, sample_weight)
        return {m.name: m.result() for m in self.metrics}

    def test_step(self, data: Any) -> dict[str, Any]:
        """One evaluation step: forward, loss and metrics."""
        x, y, sample_weight = unpack_x_y_sample_weight(data)
        y_pred = self(x, training=False)
        with pipelining.on_last_stage_ipu():
            if self.compiled_loss is not None:
                self.compiled_loss(y, y_pred, sample_weight, regularization_losses=self.losses)
            self.compiled_metrics.update_state(y, y_pred, sample_weight)
        return {m.name: m.result() for m in self.metrics}

    def predict_step(self, data: Any) -> Any:
        """One prediction step: the model's outputs for a batch."""
        x, _, _ = unpack_x_y_sample_weight(data)
        return self(x, training=False)

    # -- running ---------------------------------------------------------------------------------
    def _check_call(self, method: str, needs_compile: bool = True) -> Any:
        """The IPU strategy to run on (None: the host), after Keras's and Graphcore's checks."""
        if not tf.executing_eagerly():
            raise RuntimeError(f"You are calling `Model.{method}` inside a `tf.function`. It runs its own compiled "
                               "loop: call it eagerly.")
        if needs_compile and not getattr(self, "_is_compiled", False):
            raise RuntimeError("You must compile your model before training/testing. Use `model.compile(optimizer, "
                               "loss)`.")
        strategy = context.current_strategy()
        if strategy is not None:
            self._check_variables_in(strategy)
        for name in _MAKE_FUNCTIONS:
            if user_overrides(type(self), name):
                if self._device_loop(strategy):
                    raise RuntimeError(f"The function `{name}` for the model {self.name} has been overridden. This "
                                       "is not supported when using Keras within an IPUStrategy. Either remove the "
                                       "override from your model definition or set `enable_keras_extensions=False` "
                                       "when creating the IPUStrategy.")
                raise tf.errors.UnimplementedError(
                    f"The model {self.name} overrides `{name}`, which popjit's Keras never calls (it builds its own "
                    "step functions). Override `train_step`, `test_step` or `predict_step` instead.")
        return strategy

    def _build_for(self, handler: DataHandler) -> None:
        """Create the model's and the metrics' variables before a compiled loop uses them."""
        first = next(handler.batches()) if handler.dataset is None else \
            tf.nest.map_structure(np.asarray, handler.dataset._make_host_iterator().get_next())
        x, y, _ = unpack_x_y_sample_weight(first)
        metrics = getattr(self, "compiled_metrics", None)
        if self.built and self.weights and (y is None or metrics is None or metrics.built):
            return
        y_pred = self(tf.nest.map_structure(tf.constant, x), training=False)
        if y is not None and metrics is not None and not metrics.built:
            metrics.build(tf.nest.map_structure(tf.constant, y), y_pred)

    def _step(self, mode: str) -> Callable[[Any], Any]:
        return {"train": self.train_step, "test": self.test_step, "predict": self.predict_step}[mode]

    def _batch_function(self, strategy: Any, mode: str) -> Callable[[Any], Any]:
        """One step of ``mode`` on one batch: a host program (or eager, with ``run_eagerly``), or an IPU
        program run by ``strategy``."""
        key = ("batch", mode, strategy is not None)
        if key not in self._functions:
            if strategy is None:
                self._functions[key] = self._step(mode) if getattr(self, "_run_eagerly", False) else \
                    tf.function(self._step(mode), jit_compile=getattr(self, "_jit_compile", None))
            else:
                program = tf.function(self._step(mode), jit_compile=True)
                self._functions[key] = lambda batch: strategy.run(program, args=(batch,))
        return self._functions[key]

    @staticmethod
    def _device_loop(strategy: Any) -> bool:
        """Whether calls run as Graphcore's Keras runs them: a device loop fed by an infeed (an IPU
        strategy with its Keras extensions on); else one program per batch, as stock Keras does."""
        return strategy is not None and getattr(strategy, "enable_keras_extensions", True)

    def _feeds(self, strategy: Any, mode: str, handler: DataHandler) -> tuple[Any, Any]:
        """The infeed and outfeed of ``mode``, fed from this call's data (bound once per call; the
        feeds, and the programs compiled for them, are reused by later calls of the same shapes)."""
        if handler.feeds is None:
            dataset = handler.device_dataset()
            feeds = self._functions.setdefault(("feeds", mode), {})
            spec_key = repr(dataset.element_spec)
            if spec_key in feeds:
                feeds[spec_key][0]._rebind(dataset)
            else:
                infeed = strategy.dataset_iterator(dataset, **getattr(self, "_infeed_options", {}))
                outfeed = strategy.outfeed("all" if mode == "predict" or self._async_callbacks() else "last",
                                           **getattr(self, "_outfeed_options", {}))
                feeds[spec_key] = (infeed, outfeed)
            handler.feeds = feeds[spec_key]
        return handler.feeds

    def _device_function(self, strategy: Any, mode: str, handler: DataHandler, steps: int) -> Callable[[], Any]:
        """The compiled program running ``steps`` steps of ``mode`` from the infeed, reused across calls."""
        infeed, outfeed = self._feeds(strategy, mode, handler)
        key = ("device", mode, id(infeed), id(outfeed), steps)
        if key not in self._functions:
            step = {"train": self.train_step, "test": self.test_step, "predict": self.predict_step}[mode]

            def one_step(i: Any) -> list[Any]:
                outfeed.enqueue(step(next(infeed)))
                return []

            shards = self._shards_on(strategy)

            def loop() -> None:
                if shards == 1:
                    # why: library code is not converted by autograph, so the device loop is built directly
                    control_flow.for_range(0, steps, 1, one_step, [])
                    return
                trace = current_trace()
                trace.use_shard(shards - 1)  # a pipelined model's program spans one IPU per stage
                # its layer calls go on their stage's IPU, and the IPUs overlap its steps (micro-batches)
                with pipelining.placing(self._stage_ipus(), self._stage_mapping()[-1]), \
                        trace.marking("while", pipeline=self._pipeline_marker(mode)):
                    control_flow.for_range(0, steps, 1, one_step, [])

            loop.__name__ = f"{mode}_function"  # the program's name, as Keras names these functions
            self._functions[key] = tf.function(loop, jit_compile=True)
        program = self._functions[key]

        def run() -> Any:
            strategy.run(program)
            return outfeed.dequeue()

        return run

    def _replicated_logs(self, out: dict[str, Any], replicas: int) -> dict[str, Any]:
        """One execution's logs from every replica's: replica 0's, or their mean or sum, as
        :meth:`set_replication_options` says (the outfeed's replica axis is first in LAST mode, second in ALL)."""
        if replicas == 1:
            return out
        axis = 1 if self._async_callbacks() else 0
        method = getattr(self, "_replicated_metric_reduction", "NONE")
        combine = {"NONE": lambda a: np.take(a, 0, axis=axis), "MEAN": lambda a: np.mean(a, axis=axis),
                   "SUM": lambda a: np.sum(a, axis=axis)}[method]
        return {k: combine(np.asarray(v)) for k, v in out.items()}

    def set_replication_options(self, replicated_metric_reduction_method: Any = "NONE") -> None:
        """Graphcore's extension: how the losses and metrics of a replicated model's replicas combine into
        the logs: ``"NONE"`` (replica 0's, the default), ``"MEAN"`` or ``"SUM"`` (or
        ``ReplicatedMetricReductionMethod``'s members)."""
        method = getattr(replicated_metric_reduction_method, "name", replicated_metric_reduction_method)
        if not isinstance(method, str) or method.upper() not in ("NONE", "MEAN", "SUM"):
            raise ValueError(f"Cannot parse {replicated_metric_reduction_method!r} as a replicated metric reduction "
                             "method: expected one of NONE, MEAN, SUM.")
        self._replicated_metric_reduction = method.upper()

    def _async_callbacks(self) -> bool:
        return bool(getattr(self, "_asynchronous_callbacks", False))

    def _run_epoch(self, strategy: Any, mode: str, handler: DataHandler, callbacks: Any) -> dict[str, Any]:
        """Every step of one epoch of ``mode``; the logs of the last step."""
        logs: dict[str, Any] = {}
        if not self._device_loop(strategy):
            fn = self._batch_function(strategy, mode)
            for step, batch in enumerate(handler.batches()):
                callbacks.on_batch_begin(mode, step)
                logs = _numpy_logs(fn(tf.nest.map_structure(tf.constant, batch)), self.metrics_names)
                callbacks.on_batch_end(mode, step, logs)
                if mode == "train" and self.stop_training:
                    break
            return logs
        for first, n in handler.executions():
            callbacks.on_batch_begin(mode, first)
            out = self._replicated_logs(self._device_function(strategy, mode, handler, n)(), handler.replicas)
            if self._async_callbacks():
                for k in range(n):
                    logs = _numpy_logs({name: np.asarray(v)[k] for name, v in out.items()}, self.metrics_names)
                    callbacks.on_batch_end(mode, first + k, logs)
            else:
                logs = _numpy_logs(out, self.metrics_names)
                callbacks.on_batch_end(mode, first + n - 1, logs)
            if mode == "train" and self.stop_training:
                break
        return logs

    # -- fit / evaluate / predict ------------------------------------------------------------------
    def fit(self, x: Any = None, y: Any = None, batch_size: int | None = None, epochs: int = 1, verbose: Any = "auto",
            callbacks: Any = None, validation_split: float = 0.0, validation_data: Any = None, shuffle: bool = True,
            class_weight: dict | None = None, sample_weight: Any = None, initial_epoch: int = 0,
            steps_per_epoch: int | None = None, validation_steps: int | None = None,
            validation_batch_size: int | None = None, validation_freq: int = 1, max_queue_size: int = 10,
            workers: int = 1, use_multiprocessing: bool = False) -> Any:
        """Train for ``epochs`` epochs; a ``History`` of each epoch's losses and metrics."""
        strategy = self._check_call("fit")
        verbose = 1 if verbose == "auto" else int(verbose)
        if validation_split and validation_data is None:
            x, y, sample_weight, validation_data = _split(x, y, sample_weight, validation_split)
        handler = DataHandler(x, y, sample_weight, batch_size, steps_per_epoch, shuffle, class_weight,
                              self._device_loop(strategy), self._steps_per_execution, "train",
                              replicas(strategy, self._shards_on(strategy)))
        self._check_gradient_accumulation(self._device_loop(strategy))
        self._log_effective_batch(handler)
        self._build_for(handler)
        cbs = callbacks_mod.configure(callbacks, self, True, verbose, epochs=epochs, steps=handler.steps,
                                      mode="train")
        self.stop_training = False
        cbs.on_begin("train")
        logs: dict[str, Any] = {}
        for epoch in range(initial_epoch, epochs):
            self.reset_metrics()
            cbs.on_epoch_begin(epoch)
            logs = self._run_epoch(strategy, "train", handler, cbs)
            epoch_logs = dict(logs)
            if validation_data is not None and _validates(epoch, validation_freq):
                vx, vy, vsw = unpack_x_y_sample_weight(validation_data)
                val = self.evaluate(vx, vy, sample_weight=vsw, batch_size=validation_batch_size or batch_size,
                                    steps=validation_steps, verbose=0, return_dict=True, callbacks=cbs)
                epoch_logs.update({f"val_{k}": v for k, v in val.items()})
            cbs.on_epoch_end(epoch, epoch_logs)
            logs = epoch_logs
            if self.stop_training:
                break
        cbs.on_end("train", logs)
        return cbs.history

    def evaluate(self, x: Any = None, y: Any = None, batch_size: int | None = None, verbose: Any = 1,
                 sample_weight: Any = None, steps: int | None = None, callbacks: Any = None, max_queue_size: int = 10,
                 workers: int = 1, use_multiprocessing: bool = False, return_dict: bool = False) -> Any:
        """The loss and metrics over the data: a scalar, a list (``metrics_names`` order) or a dict."""
        strategy = self._check_call("evaluate")
        verbose = 1 if verbose == "auto" else int(verbose)
        handler = DataHandler(x, y, sample_weight, batch_size, steps, False, None, self._device_loop(strategy),
                              self._steps_per_execution, "test", replicas(strategy, self._shards_on(strategy)))
        self._build_for(handler)
        cbs = callbacks_mod.configure(callbacks, self, False, verbose, steps=handler.steps, mode="test")
        self.reset_metrics()
        cbs.on_begin("test")
        logs = self._run_epoch(strategy, "test", handler, cbs)
        cbs.on_end("test", logs)
        if return_dict:
            return logs
        values = [logs[n] for n in self.metrics_names if n in logs]
        return values[0] if len(values) == 1 else values

    def predict(self, x: Any, batch_size: int | None = None, verbose: Any = 0, steps: int | None = None,
                callbacks: Any = None, max_queue_size: int = 10, workers: int = 1,
                use_multiprocessing: bool = False) -> Any:
        """The model's outputs for every example, as NumPy arrays."""
        strategy = self._check_call("predict", needs_compile=False)
        verbose = 1 if verbose == "auto" else int(verbose)
        handler = DataHandler(x, None, None, batch_size, steps, False, None, self._device_loop(strategy),
                              getattr(self, "_steps_per_execution", 1), "predict",
                              replicas(strategy, self._shards_on(strategy)))
        if not hasattr(self, "_functions"):
            self._functions = {}
        self._build_for(handler)
        cbs = callbacks_mod.configure(callbacks, self, False, verbose, steps=handler.steps, mode="predict")
        cbs.on_begin("predict")
        outputs: list[Any] = []
        if not self._device_loop(strategy):
            fn = self._batch_function(strategy, "predict")
            for step, batch in enumerate(handler.batches()):
                cbs.on_batch_begin("predict", step)
                outputs.append(tf.nest.map_structure(np.asarray, fn(tf.nest.map_structure(tf.constant, batch))))
                cbs.on_batch_end("predict", step, {"outputs": outputs[-1]})
        else:
            for first, n in handler.executions():
                cbs.on_batch_begin("predict", first)
                out = self._device_function(strategy, "predict", handler, n)()
                lead = 2 if handler.replicas == 1 else 3  # [steps, (replicas,) batch, ...]: batch i*R + r in order
                outputs.append(tf.nest.map_structure(lambda a, lead=lead: a.reshape(-1, *a.shape[lead:]), out))
                cbs.on_batch_end("predict", first + n - 1, {"outputs": outputs[-1]})
        cbs.on_end("predict")
        if not outputs:
            raise ValueError("Unexpected result of `predict_function` (Empty batch_outputs). Please use "
                             "`Model.compile(..., run_eagerly=True)`, or `tf.config.run_functions_eagerly(True)` for "
                             "more information of where went wrong, or file a issue/bug to `tf.keras`.")
        return tf.nest.map_structure(lambda *parts: np.concatenate(parts), *outputs)

    # -- single batches ----------------------------------------------------------------------------
    def _on_batch(self, mode: str, x: Any, y: Any, sample_weight: Any, reset_metrics: bool) -> Any:
        strategy = self._check_call(f"{mode}_on_batch", needs_compile=mode != "predict")
        if not hasattr(self, "_functions"):
            self._functions = {}
        handler = DataHandler(x, y, sample_weight, batch_size=len(tf.nest.flatten(x)[0]), on_ipu=False, mode=mode)
        self._build_for(handler)
        if reset_metrics and mode != "predict":
            self.reset_metrics()
        batch = tf.nest.map_structure(tf.constant, next(handler.batches()))
        return self._batch_function(strategy, mode)(batch)

    def train_on_batch(self, x: Any, y: Any = None, sample_weight: Any = None, class_weight: dict | None = None,
                       reset_metrics: bool = True, return_dict: bool = False) -> Any:
        """One training step on one batch; its loss and metrics."""
        if class_weight is not None and y is not None:
            sample_weight = _class_weights(y, class_weight)
        logs = _numpy_logs(self._on_batch("train", x, y, sample_weight, reset_metrics), self.metrics_names)
        return logs if return_dict else _as_list(logs, self.metrics_names)

    def test_on_batch(self, x: Any, y: Any = None, sample_weight: Any = None, reset_metrics: bool = True,
                      return_dict: bool = False) -> Any:
        """The loss and metrics on one batch."""
        logs = _numpy_logs(self._on_batch("test", x, y, sample_weight, reset_metrics), self.metrics_names)
        return logs if return_dict else _as_list(logs, self.metrics_names)

    def predict_on_batch(self, x: Any) -> Any:
        """The model's outputs for one batch."""
        return tf.nest.map_structure(np.asarray, self._on_batch("predict", x, None, None, False))

    # -- Graphcore's extensions -----------------------------------------------------------------------
    def set_asynchronous_callbacks(self, asynchronous: bool = False) -> None:
        """Per-batch callbacks for every step of an execution (True), or once per execution (False)."""
        self._asynchronous_callbacks = bool(asynchronous)

    def _ipu_config(self) -> dict[str, Any]:
        """The IPU options a model created in an IPU strategy's scope adds to its config, under the keys of
        Graphcore's Keras (pipelining is not implemented: those keys are None)."""
        if not self._device_loop(getattr(self, "_strategy", None)):
            return {}
        steps, reduction, normalize = getattr(self, "_gradient_accumulation", None) or (
            None, gradient_accumulation.GradientAccumulationReductionMethod.SUM, None)
        return {"gradient_accumulation_steps_per_replica": steps,
                "experimental_gradient_accumulation_normalize_gradients": normalize or None,
                "experimental_pipelining_normalize_gradients": None,
                "gradient_accumulation_reduction_method": reduction.value,
                "asynchronous_callbacks": self._async_callbacks(),
                "pipelining_gradient_accumulation_steps_per_replica": None, "pipelining_device_mapping": None,
                "pipelining_accumulate_outfeed": None,
                "infeed_kwargs": dict(getattr(self, "_infeed_options", {})),
                "outfeed_kwargs": dict(getattr(self, "_outfeed_options", {}))}

    def _apply_ipu_config(self, options: dict[str, Any]) -> None:
        """Set the IPU options read from a config (:func:`split_ipu_config`) when loading inside an IPU
        strategy's scope; outside one they are not Keras options and are left out, as Graphcore's Keras does."""
        if not options or not self._device_loop(context.current_strategy()):
            return
        pipelined = [k for k in options if k.startswith(("pipelining_", "experimental_pipelining"))
                     and options[k] is not None]
        if pipelined:
            raise tf.errors.UnimplementedError(f"The model's config sets pipelining options {pipelined}; pipelined "
                                               "Keras models are not implemented by popjit.")
        if options.get("gradient_accumulation_steps_per_replica"):
            method = gradient_accumulation.GradientAccumulationReductionMethod(
                options.get("gradient_accumulation_reduction_method", 0))
            self.set_gradient_accumulation_options(
                options["gradient_accumulation_steps_per_replica"],
                experimental_normalize_gradients=options.get("experimental_gradient_accumulation_normalize_gradients"),
                gradient_accumulation_reduction_method=method)
        self.set_asynchronous_callbacks(bool(options.get("asynchronous_callbacks", False)))
        self.set_infeed_queue_options(**(options.get("infeed_kwargs") or {}))
        self.set_outfeed_queue_options(**(options.get("outfeed_kwargs") or {}))

    def set_infeed_queue_options(self, **kwargs: Any) -> None:
        """Options of the infeed Keras creates for each mode (``prefetch_depth``...)."""
        self._infeed_options = dict(kwargs)

    def set_outfeed_queue_options(self, **kwargs: Any) -> None:
        """Options of the outfeed Keras creates for each mode (``buffer_depth``...)."""
        self._outfeed_options = dict(kwargs)


#: The keys of Graphcore's Keras for the IPU options in a model's config.
IPU_CONFIG_KEYS = ("gradient_accumulation_steps_per_replica", "gradient_accumulation_reduction_method",
                   "experimental_gradient_accumulation_normalize_gradients",
                   "pipelining_gradient_accumulation_steps_per_replica", "pipelining_device_mapping",
                   "pipelining_accumulate_outfeed", "experimental_pipelining_normalize_gradients",
                   "asynchronous_callbacks", "infeed_kwargs", "outfeed_kwargs")


def split_ipu_config(config: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(the config without the IPU options, the IPU options)`` of a model's config."""
    return ({k: v for k, v in config.items() if k not in IPU_CONFIG_KEYS},
            {k: v for k, v in config.items() if k in IPU_CONFIG_KEYS})


def _validates(epoch: int, freq: Any) -> bool:
    """Whether ``fit`` validates after ``epoch``: every ``freq`` epochs, or the epochs (from 1) listed."""
    if isinstance(freq, int):
        if freq < 1:
            raise ValueError(f"`validation_freq` can not be less than 1. Got: {freq}")
        return (epoch + 1) % freq == 0
    return epoch + 1 in freq


def _as_list(logs: dict[str, Any], names: list[str]) -> Any:
    values = [logs[n] for n in names if n in logs]
    return values[0] if len(values) == 1 else values


def _split(x: Any, y: Any, sample_weight: Any, fraction: float) -> tuple[Any, Any, Any, Any]:
    """The last ``fraction`` of the arrays as validation data (Keras's ``validation_split``)."""
    if _is_dataset(x):
        raise ValueError("`validation_split` is only supported for Tensors or NumPy arrays, found following types in "
                         f"the input: {[type(x)]}")
    arrays = [tf.nest.map_structure(_as_array, a) if a is not None else None for a in (x, y, sample_weight)]
    cut = math.floor(len(tf.nest.flatten(arrays[0])[0]) * (1.0 - fraction))
    train = [tf.nest.map_structure(lambda a: a[:cut], a) if a is not None else None for a in arrays]
    val = tuple(tf.nest.map_structure(lambda a: a[cut:], a) for a in arrays if a is not None)
    return (*train, val)
