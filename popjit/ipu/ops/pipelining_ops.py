"""``ipu.pipelining_ops``: a model cut into stages, each on its own IPU, fed micro-batch by micro-batch.

``pipeline(computational_stages, gradient_accumulation_count, repeat_count, inputs, infeed_queue,
outfeed_queue, optimizer_function, device_mapping, pipeline_schedule, ...)`` runs, ``repeat_count``
times, ``gradient_accumulation_count`` micro-batches through the stages (stage ``i``'s outputs are stage
``i+1``'s inputs; the first stage takes ``inputs`` and one infeed element) and, when training, applies the
optimizer once to the gradients accumulated over those micro-batches (their sum, mean or running mean).
The last stage's outputs (or, with ``outfeed_loss``, the loss) go to the outfeed each micro-batch, or
summed once per repeat with ``accumulate_outfeed``.

On the IPU the stages overlap, each on its IPU; the values are those of running the micro-batches one
after another with gradient accumulation, which is what popjit runs (spec §1.10). The program spans
``max(device_mapping) + 1`` IPUs: a device of N IPUs runs it as ``N / next_pow2(shards)`` replicas. Each
stage's ops (and their gradients) are placed on its IPU, and the IPU estimate overlaps the micro-batches'
stages as the chosen ``pipeline_schedule`` does (``popjit.schedule.pipeline``).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from popjit.compat.v1.train import Optimizer as TF1Optimizer
from popjit.errors import FailedPreconditionError, UnimplementedError
from popjit.errors import missing_attributes as _missing_attributes
from popjit.frontend import api as tf
from popjit.frontend import nest
from popjit.frontend.tracing import current_trace
from popjit.ipu import loops
from popjit.ipu.config import planner_options
from popjit.ipu.ipu_infeed_queue import IPUInfeedQueue
from popjit.ipu.ipu_outfeed_queue import IPUOutfeedMode, IPUOutfeedQueue
from popjit.ipu.optimizers import IpuOptimizer, bottom_optimizer
from popjit.keras import backend
from popjit.keras.gradient_accumulation import (
    GradientAccumulationReductionMethod,
    GradientAccumulator,
    refuse_memory_options,
)
from popjit.keras.optimizer_v2 import OptimizerV2
from popjit.runtime import device as devices

__all__ = ["OptimizerFunctionOutput", "PipelineSchedule", "PipelineStageOptions", "RecomputationMode", "pipeline",
           "recomputation_checkpoint"]


class PipelineSchedule(enum.IntEnum):
    """How the stages overlap on the IPUs: ``Grouped`` (all forward passes of a group of micro-batches, then
    their backward passes), ``Interleaved`` (one forward and one backward at a time), ``Sequential`` (no
    overlap: one stage at a time, like sharding)."""

    Grouped = 0
    Interleaved = 1
    Sequential = 2


class RecomputationMode(enum.Enum):
    """What the backward passes recompute instead of stashing (memory, not values: the same numbers)."""

    Auto = 0
    RecomputeThenBackpropagate = 1
    RecomputeAndBackpropagateInterleaved = 2


class OptimizerFunctionOutput:
    """What a pipeline's ``optimizer_function`` returns: the optimizer and the loss to minimise (with a
    Keras optimizer, also the ``variables`` to train or the ``tape`` that watched them)."""

    def __init__(self, opt: Any, loss: Any, compute_gradients_args: Sequence[Any] = (),
                 compute_gradients_kwargs: dict[str, Any] | None = None, apply_gradients_args: Sequence[Any] = (),
                 apply_gradients_kwargs: dict[str, Any] | None = None, variables: Sequence[Any] | None = None,
                 tape: Any = None, gradient_capture_context: Any = None, captured_gradient_outfeed: Any = None) -> None:
        if not isinstance(opt, (TF1Optimizer, OptimizerV2, IpuOptimizer)):
            raise TypeError("OptimizerFunctionOutput.opt must be a TensorFlow Optimizer or Keras OptimizerV2 object.")
        if not isinstance(loss, tf.Tensor):
            raise TypeError("OptimizerFunctionOutput.loss must be a TensorFlow Tensor object.")
        if isinstance(bottom_optimizer(opt), OptimizerV2) and not variables and tape is None:
            raise RuntimeError("No variables to optimize. When using OptimzerV2, OptimizerFunctionOutput must contain "
                               "a list of variables or a GradientTape.")
        for name, value in (("gradient_capture_context", gradient_capture_context),
                            ("captured_gradient_outfeed", captured_gradient_outfeed)):
            if value is not None:
                raise UnimplementedError(f"OptimizerFunctionOutput({name}=...) is not supported by popjit.")
        self.opt, self.loss, self.variables, self.tape = opt, loss, list(variables or []), tape
        self.compute_gradients_args, self.compute_gradients_kwargs = tuple(compute_gradients_args), \
            dict(compute_gradients_kwargs or {})
        self.apply_gradients_args, self.apply_gradients_kwargs = tuple(apply_gradients_args), \
            dict(apply_gradients_kwargs or {})


class PipelineStageOptions:
    """PopLibs options for one pipeline stage's convolutions and matmuls (and slices): the matmul and
    convolution planner's ``availableMemoryProportion`` and ``partialsType``, used instead of
    ``IPUConfig.matmuls``/``convolutions.poplar_options`` for that stage's ops (an empty dict keeps the
    device's). Other options raise ``UnimplementedError``; so do slice options (popjit plans no slices)."""

    def __init__(self, convolution_options: dict | None = None, matmul_options: dict | None = None,
                 slice_options: dict | None = None) -> None:
        for name, value in (("convolution_options", convolution_options), ("matmul_options", matmul_options),
                            ("slice_options", slice_options)):
            if value is not None and not isinstance(value, dict):
                raise TypeError(f"{name} must be dictionary.")
        if slice_options:
            raise UnimplementedError(f"PipelineStageOptions(slice_options={slice_options!r}) is not supported by "
                                     "popjit: it plans no slices. Remove slice_options.")
        self.convolution_options = dict(convolution_options or {})
        self.matmul_options = dict(matmul_options or {})
        self.slice_options: dict = {}
        self._plans = {
            True: _plan_of(self.convolution_options, "PipelineStageOptions(convolution_options)"),
            False: _plan_of(self.matmul_options, "PipelineStageOptions(matmul_options)"),
        }

    def plan(self, convolution: bool) -> tuple[float, bool] | None:
        """The planner options of a convolution's or a matmul's ops, or None to keep the device's."""
        return self._plans[convolution]


def _plan_of(options: dict, where: str) -> tuple[float, bool] | None:
    if not options:
        return None
    parsed = planner_options(options, where)
    return (parsed.available_memory_proportion, parsed.half_partials)


def recomputation_checkpoint(tensors: Any, name: str | None = None) -> Any:
    """Mark ``tensors`` as recomputation checkpoints: the values, unchanged (recomputation trades memory for
    time on the IPU; the numbers are the same)."""
    return nest.map_structure(tf.identity, tensors)


def _call(fn: Callable, args: Any) -> Any:
    """``fn`` applied to a stage's inputs: a dict as keyword arguments, a tuple or list as positional ones,
    None as none, anything else as one argument."""
    if isinstance(args, dict):
        return fn(**args)
    if isinstance(args, (tuple, list)):
        return fn(*args)
    return fn() if args is None else fn(args)


def _first_inputs(inputs: Sequence[Any], element: Any) -> Any:
    """The first stage's arguments: ``inputs`` followed by the infeed element."""
    if isinstance(element, dict):
        if inputs:
            raise ValueError("A pipeline with a dict infeed element cannot also take positional `inputs`.")
        return element
    tail = list(element) if isinstance(element, (tuple, list)) else ([] if element is None else [element])
    return [*inputs, *tail]


def _refuse_captures(trace: Any, nodes: Sequence[Any]) -> None:
    """Graphcore's P7: a value the ``nodes`` of a stage use that was computed outside the pipeline's loop."""
    outer = set().union(*(s.defined for s in trace.scopes[:-1])) - trace.current.defined
    for node in nodes:
        for inner in [node, *(n for r in node.regions for n in r.walk())]:
            for v in inner.inputs:
                if v.uid in outer:
                    raise ValueError(f"Trying to capture the tensor {_describe(v)} which is not a resource. This "
                                     "tensor needs to be passed as either part of the `input` or `infeed_queue` of "
                                     "the pipeline.")


def _describe(v: Any) -> str:
    """A value as TensorFlow prints a graph tensor: its op, output index, shape and dtype."""
    op = v.producer.op if v.producer is not None else "Placeholder"
    return f'Tensor("{op}:{v.index}", shape={tuple(v.shape)}, dtype={v.dtype.name})'


def minimum_iterations(schedule: PipelineSchedule, stages: int, training: bool = True) -> int:
    """The fewest micro-batches a pipeline of ``stages`` stages runs per repeat: ramping up and down takes
    two rounds of the stages for the overlapping schedules when training, one for inference (Graphcore's
    backend checks the same)."""
    if schedule is PipelineSchedule.Sequential:
        return 1
    return 2 * stages if training else stages


def pipeline(computational_stages: Sequence[Callable], gradient_accumulation_count: int | None = None,
             gradient_accumulation_dtype: Any = None, gradient_accumulation_for_captured_grads: bool = True,
             repeat_count: int = 1, batch_serialization_iterations: int = 1, inputs: Sequence[Any] | None = None,
             infeed_queue: IPUInfeedQueue | None = None, outfeed_queue: IPUOutfeedQueue | None = None,
             optimizer_function: Callable[..., OptimizerFunctionOutput] | None = None,
             device_mapping: Sequence[int] | None = None, pipeline_schedule: PipelineSchedule | None = None,
             recomputation_mode: RecomputationMode | None = None,
             forward_propagation_stages_poplar_options: Sequence[PipelineStageOptions] | None = None,
             backward_propagation_stages_poplar_options: Sequence[PipelineStageOptions] | None = None,
             weight_update_poplar_options: PipelineStageOptions | None = None,
             offload_weight_update_variables: bool | None = None,
             replicated_optimizer_state_sharding: bool = False, offload_activations: bool | None = None,
             offload_gradient_accumulation_buffers: bool | None = None, replicated_weight_sharding: bool | None = None,
             offload_weights: bool | None = None, continuous_weight_updates: bool = False, outfeed_loss: bool = False,
             accumulate_outfeed: bool = False, accumulate_outfeed_dtype: Any = None, outfeed_mask: Any = None,
             reduction_method: Any = GradientAccumulationReductionMethod.SUM, name: str | None = None,
             **kwargs: Any) -> Any:
    """Run ``computational_stages`` as a pipeline (see the module docstring); in a ``tf.function`` run on the
    IPU, or inside ``ipu_compiler.compile`` in TensorFlow 1 (where it returns the operation to run)."""
    if "pipeline_depth" in kwargs:  # SDK 1.x's name
        gradient_accumulation_count = kwargs.pop("pipeline_depth")
    if kwargs:
        raise TypeError(f"pipeline() got unexpected keyword arguments {sorted(kwargs)}")
    stages = _check_stages(computational_stages)
    mapping = _check_mapping(device_mapping, len(stages))
    schedule = PipelineSchedule.Grouped if pipeline_schedule is None else PipelineSchedule(pipeline_schedule)
    training = optimizer_function is not None
    _check_feeds(infeed_queue, outfeed_queue, optimizer_function, outfeed_loss, outfeed_mask, accumulate_outfeed)
    if gradient_accumulation_count is None:
        raise ValueError("gradient_accumulation_count must be specified.")
    if schedule is PipelineSchedule.Interleaved and training and len(set(mapping)) < len(mapping):
        raise NotImplementedError("The pipelining schedule 'Interleaved' does not currently support multiple pipeline "
                                  "stages on the same device for training graphs. Please use a different pipeline "
                                  "schedule.")
    if outfeed_mask is not None:
        raise UnimplementedError("pipeline(outfeed_mask=...) is not supported by popjit: use outfeed_loss, or "
                                 "outfeed every output of the last stage.")
    refuse_memory_options("pipeline", offload_weight_update_variables=offload_weight_update_variables,
                           replicated_optimizer_state_sharding=replicated_optimizer_state_sharding,
                           offload_activations=offload_activations,
                           offload_gradient_accumulation_buffers=offload_gradient_accumulation_buffers,
                           replicated_weight_sharding=replicated_weight_sharding, offload_weights=offload_weights,
                           continuous_weight_updates=continuous_weight_updates,
                           gradient_accumulation_dtype=gradient_accumulation_dtype,
                           accumulate_outfeed_dtype=accumulate_outfeed_dtype)
    if batch_serialization_iterations != 1:
        raise UnimplementedError("pipeline(batch_serialization_iterations != 1) is not supported by popjit.")
    forward_options = _stage_options(forward_propagation_stages_poplar_options,
                                     "forward_propagation_stages_poplar_options", len(stages))
    backward_options = _stage_options(backward_propagation_stages_poplar_options,
                                      "backward_propagation_stages_poplar_options", len(stages))
    if weight_update_poplar_options is not None and not isinstance(weight_update_poplar_options,
                                                                   PipelineStageOptions):
        raise TypeError(f"Expected weight_update_poplar_options to be of type PipelineStageOptions, but got "
                        f"{type(weight_update_poplar_options).__name__}.")
    reduction = GradientAccumulationReductionMethod.parse(reduction_method)
    count = int(gradient_accumulation_count)
    least = minimum_iterations(schedule, len(stages), training)
    if count < least:
        raise FailedPreconditionError(
            f"The number of iterations of the pipeline must be at least {least}, but it is {count}. This number might "
            "be called `gradient_accumulation_count`, `gradient_accumulation_steps_per_replica` or "
            "`steps_per_execution` depending on the API used.")
    trace = current_trace()
    if trace is None:
        raise ValueError("pipeline() must be called inside a tf.function run on the IPU (IPUStrategy.run), or inside "
                         "ipu_compiler.compile in TensorFlow 1.")
    run = _Pipeline(stages, list(inputs or []), infeed_queue, outfeed_queue, optimizer_function, count, reduction,
                    outfeed_loss, accumulate_outfeed)
    run.trace, run.mapping, run.schedule = trace, mapping, schedule
    run.stage_options = list(zip(forward_options, backward_options))
    run.update_options = weight_update_poplar_options
    # why: recomputation_mode takes effect with allow_recompute, as Graphcore's (the estimate models every mode alike)
    run.recompute = training and bool(devices.configured_option("allow_recompute", False))
    return run.build(int(repeat_count))


class _Pipeline:
    """The micro-batch loop of one pipeline, and its gradient and outfeed accumulators."""

    def __init__(self, stages: list[Callable], inputs: list[Any], infeed: IPUInfeedQueue | None,
                 outfeed: IPUOutfeedQueue | None, optimizer_function: Callable | None, count: int,
                 reduction: GradientAccumulationReductionMethod, outfeed_loss: bool, accumulate: bool) -> None:
        self.stages, self.inputs, self.infeed, self.outfeed = stages, inputs, infeed, outfeed
        self.optimizer_function, self.count, self.reduction = optimizer_function, count, reduction
        self.outfeed_loss, self.accumulate = outfeed_loss, accumulate
        self.accumulator: GradientAccumulator | None = None  # made on the first micro-batch that trains
        self.variables: list[Any] = []
        self.outputs: list[Any] = []  # the outfeed's accumulators (accumulate_outfeed)
        self.tree: Any = None
        self.optimizer: Any = None
        self.trace: Any = None
        self.mapping: list[int] = list(range(len(stages)))
        self.schedule = PipelineSchedule.Grouped
        self.recompute = False  # the backward passes recompute their stage's forward pass
        # each stage's (forward, backward) planner options, and the weight update's (PipelineStageOptions)
        self.stage_options: list[tuple[Any, Any]] = [(None, None)] * len(stages)
        self.update_options: PipelineStageOptions | None = None

    # -- one micro-batch -------------------------------------------------------------------------------
    def forward(self, inputs: list[Any], element: Any) -> Any:
        """The stages on one micro-batch: the last stage's outputs. A stage may not capture a tensor from
        outside the pipeline (P7): only variables, or what comes through ``inputs`` and the infeed."""
        args = _first_inputs(inputs, element)
        for stage, ipu, options in zip(self.stages, self.mapping, self.stage_options):
            region = self.trace.current.region
            first = len(region.nodes)
            with self.trace.placed(ipu), self.trace.planning(*options):
                args = _call(stage, args)
            _refuse_captures(self.trace, region.nodes[first:])
        return args

    def micro_batch(self, *args: Any, **named: Any) -> list[Any]:
        """One micro-batch: the pipeline's ``inputs`` (carried through the loop unchanged), then its infeed
        element as positional arguments, or keyword ones for a dict."""
        inputs, element = list(args[:len(self.inputs)]), args[len(self.inputs):]
        got = named if named else (element[0] if len(element) == 1 else (element or None))
        if self.optimizer_function is None:
            self.emit(self.forward(inputs, got))
            return inputs
        with tf.GradientTape() as tape:
            outputs = self.forward(inputs, got)
            # why: the loss is part of the last stage
            with self.trace.placed(self.mapping[-1]), self.trace.planning(*self.stage_options[-1]):
                result = _call(self.optimizer_function, outputs)
        if not isinstance(result, OptimizerFunctionOutput):
            raise TypeError("The optimizer_function must return an OptimizerFunctionOutput.")
        self.accumulate_gradients(result, tape)
        self.emit(result.loss if self.outfeed_loss else outputs)
        return inputs

    def accumulate_gradients(self, result: OptimizerFunctionOutput, tape: Any) -> None:
        """Add this micro-batch's gradients to the accumulators (made on the first micro-batch)."""
        bottom = bottom_optimizer(result.opt)
        if isinstance(bottom, OptimizerV2):
            variables = result.variables or list((result.tape or tape).watched_variables())
            pairs = list(zip((result.tape or tape).gradient(result.loss, variables), variables))
            if isinstance(result.opt, IpuOptimizer):
                pairs = result.opt.transform(pairs)
        else:
            pairs = result.opt.compute_gradients(result.loss, *result.compute_gradients_args,
                                                 **({"var_list": result.variables} if result.variables else {}),
                                                 **result.compute_gradients_kwargs)
        if self.accumulator is None:
            self.optimizer = result
            self.accumulator = GradientAccumulator(result.opt, self.count, self.reduction)
        self.variables, _ = self.accumulator.accumulate(pairs)

    def emit(self, values: Any) -> None:
        """The micro-batch's values to the outfeed (now, or summed until the repeat ends)."""
        leaves = [v for v in nest.flatten(values) if v is not None]
        if self.outfeed is None:
            if leaves and self.optimizer_function is None:
                raise ValueError(f"The last computational stage has tensor outputs: {values}, but no outfeed_queue "
                                 "has been provided.")
            return
        if not self.accumulate:
            self.outfeed.enqueue(values)
            return
        if not self.outputs:
            self.tree = values
            self.outputs = [backend.make_variable(np.zeros(tuple(t.shape), t.dtype.as_numpy_dtype),
                                                  "pipeline/accumulated_outfeed", False) for t in leaves]
        for acc, value in zip(self.outputs, leaves):
            acc.assign_add(value)

    # -- one repeat ------------------------------------------------------------------------------------
    def one_repeat(self) -> None:
        """``count`` micro-batches, then the weight update and the accumulated outfeed."""
        # why: the schedule overlaps the micro-batches' stages as this schedule does on the IPUs
        with self.trace.marking("while", pipeline=(self.schedule.name, tuple(self.mapping), self.recompute,
                                                   self.count)):
            loops.repeat(self.count, self.micro_batch, inputs=self.inputs, infeed_queue=self.infeed)
        if self.accumulator is not None:
            self.apply()
        if self.outputs:
            values = [a.read_value() for a in self.outputs]
            self.outfeed.enqueue(nest.pack_sequence_as(self.tree, values))
            for a in self.outputs:
                a.assign(tf.zeros_like(a))

    def apply(self) -> Any:
        """The optimizer's update with the accumulated gradients; the accumulators start again from zero."""
        result = self.optimizer
        with self.trace.planning(self.update_options, self.update_options):
            return self.accumulator.apply_accumulated(self.variables, *result.apply_gradients_args,
                                                      **result.apply_gradients_kwargs)

    def build(self, repeat_count: int) -> Any:
        """The loop of ``repeat_count`` repeats (what a TensorFlow 1 session runs)."""
        return loops.repeat(repeat_count, self.one_repeat)


def _stage_options(options: Any, name: str, stages: int) -> list[PipelineStageOptions | None]:
    """One stage's options per stage (Graphcore's checks), or None for each when not given."""
    if options is None:
        return [None] * stages
    if not isinstance(options, (list, tuple)) or len(options) != stages:
        raise ValueError(f"{name} must be a list or a tuple of PipelineStageOptions, one per computational stage "
                         f"({stages}).")
    for o in options:
        if not isinstance(o, PipelineStageOptions):
            raise TypeError(f"Expected each element of {name} to be of type PipelineStageOptions, but got "
                            f"{type(o).__name__}.")
    return list(options)


def _check_stages(stages: Any) -> list[Callable]:
    if not isinstance(stages, (list, tuple)):
        raise TypeError("computational_stages argument needs to be a list or a tuple.")
    if len(stages) < 2:
        raise ValueError("Pipeline requires at least two computational stages.")
    for stage in stages:
        if isinstance(stage, (list, tuple)):
            raise UnimplementedError("A pipeline stage given as a list of functions (stages run in parallel on one "
                                     "IPU) is not supported by popjit: make each a single function.")
    return list(stages)


def _check_mapping(mapping: Sequence[int] | None, stages: int) -> list[int]:
    mapping = list(range(stages)) if mapping is None else list(mapping)
    if len(mapping) != stages:
        raise ValueError(f"Each stage must be mapped to an IPU: {len(mapping)} mappings != {stages} stages")
    if any(type(m) is not int or m < 0 for m in mapping):
        raise ValueError(f"device_mapping must hold non-negative IPU indices, not {mapping}.")
    return mapping


def _check_feeds(infeed: Any, outfeed: Any, optimizer_function: Any, outfeed_loss: bool, outfeed_mask: Any,
                 accumulate: bool) -> None:
    if infeed is not None and not isinstance(infeed, IPUInfeedQueue):
        raise TypeError("infeed_queue is not an instance of ipu_infeed_queue.IPUInfeedQueue")
    if outfeed is not None and not isinstance(outfeed, IPUOutfeedQueue):
        raise TypeError("outfeed_queue is not an instance of ipu_outfeed_queue.IPUOutfeedQueue")
    if outfeed_loss and optimizer_function is None:
        raise ValueError("An optimizer_function must be provided when outfeed_loss is True.")
    if outfeed_loss and outfeed_mask is not None:
        raise ValueError("Only one of `outfeed_loss` and `outfeed_mask` can be set.")
    if accumulate:
        if outfeed is None:
            raise ValueError("An outfeed_queue must be provided when accumulate_outfeed is True.")
        if outfeed._mode is not IPUOutfeedMode.ALL:
            raise ValueError("To accumulate the outfeed, it must be in IPUOutfeedMode ALL.")


__getattr__ = _missing_attributes("ipu.pipelining_ops")
