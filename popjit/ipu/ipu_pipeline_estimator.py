"""``ipu.ipu_pipeline_estimator``: ``IPUPipelineEstimator`` runs a ``model_fn`` that returns a pipeline.

The ``model_fn`` (no ``features`` or ``labels`` arguments: the infeed's elements go to the first stage)
returns an :class:`IPUPipelineEstimatorSpec` with the pipeline's stages, ``gradient_accumulation_count``
and, to train, an ``optimizer_function``; to evaluate, an ``eval_metrics_fn``. Each session run is one
``pipelining_ops.pipeline`` of ``iterations_per_loop`` micro-batches (``iterations_per_loop /
gradient_accumulation_count`` weight updates), compiled on the IPUs as ``IPUEstimator`` compiles its loops;
checkpoints, summaries, the global step and the other ``IPUEstimator`` behaviours are the same. As
Graphcore's:

- training outfeeds each micro-batch's loss and reports their mean per run;
- evaluation outfeeds the last stage's outputs and runs ``eval_metrics_fn`` on them on the host, over
  every micro-batch evaluated: it returns a dict whose ``loss`` (a tensor, averaged, or a metric) becomes
  the result's loss;
- prediction outfeeds the last stage's outputs (a dict, or exactly one tensor) and yields them one example
  at a time.
"""

from __future__ import annotations

import collections
import inspect
from collections.abc import Callable
from typing import Any

import numpy as np

from popjit.compat.v1 import graph_ops
from popjit.compat.v1.estimator import ModeKeys, refuse_hooks
from popjit.compat.v1.session import Session
from popjit.errors import OutOfRangeError, missing_attributes
from popjit.frontend import api
from popjit.frontend.convert import convert_to_tensor
from popjit.frontend.device import device
from popjit.ipu.ipu_estimator import IPUEstimator
from popjit.ipu.ipu_outfeed_queue import IPUOutfeedQueue
from popjit.ipu.ops import pipelining_ops

__all__ = ["IPUPipelineEstimator", "IPUPipelineEstimatorSpec"]


class IPUPipelineEstimatorSpec(collections.namedtuple("IPUPipelineEstimatorSpec", [
        "mode", "computational_stages", "gradient_accumulation_count", "eval_metrics_fn", "optimizer_function",
        "device_mapping", "pipeline_schedule", "inputs", "pipeline_options"])):
    """What a ``model_fn`` returns to an :class:`IPUPipelineEstimator`: the pipeline's stages and
    ``gradient_accumulation_count`` (SDK 1.x: ``pipeline_depth``), an ``optimizer_function`` to train, an
    ``eval_metrics_fn`` to evaluate, ``device_mapping``, ``pipeline_schedule``, the first stage's extra
    ``inputs``, and other ``pipelining_ops.pipeline`` options (``reduction_method``, ``recomputation_mode``...)."""

    def __new__(cls, mode: str, computational_stages: Any, gradient_accumulation_count: int | None = None,
                eval_metrics_fn: Callable[..., Any] | None = None, optimizer_function: Callable[..., Any] | None = None,
                device_mapping: Any = None, pipeline_schedule: Any = None, inputs: Any = None,
                training_hooks: Any = None, evaluation_hooks: Any = None, prediction_hooks: Any = None,
                pipeline_depth: int | None = None, **pipeline_options: Any) -> IPUPipelineEstimatorSpec:
        refuse_hooks(training_hooks, evaluation_hooks, prediction_hooks)
        if mode == ModeKeys.TRAIN and not optimizer_function:
            raise ValueError("`IPUPipelineEstimatorSpec` must contain `optimizer_function` when training")
        if mode == ModeKeys.EVAL and not eval_metrics_fn:
            raise ValueError("`IPUPipelineEstimatorSpec` must contain `eval_metrics_fn` when evaluating")
        count = gradient_accumulation_count if gradient_accumulation_count is not None else pipeline_depth
        return super().__new__(cls, mode, list(computational_stages), count, eval_metrics_fn, optimizer_function,
                               device_mapping, pipeline_schedule, list(inputs or []), pipeline_options)


class IPUPipelineEstimator(IPUEstimator):
    """An Estimator whose ``model_fn`` returns an :class:`IPUPipelineEstimatorSpec` (see the module docstring)."""

    # -- the pipeline -------------------------------------------------------------------------------------
    def _pipeline_spec(self, mode: str) -> IPUPipelineEstimatorSpec:
        """The ``model_fn``'s spec for ``mode``, checked as Graphcore's estimator checks it."""
        accepted = set(inspect.signature(self._model_fn).parameters)
        if "features" in accepted or "labels" in accepted:
            raise ValueError("The `model_fn` used with `IPUPipelineEstimator` must not have `features` or `labels` "
                             "arguments. They are instead passed to the first pipeline stage function.")
        kwargs = {k: v for k, v in (("mode", mode), ("params", self.params), ("config", self._config))
                  if k in accepted}
        spec = self._model_fn(**kwargs)
        if not isinstance(spec, IPUPipelineEstimatorSpec):
            raise TypeError("The `model_fn` used with `IPUPipelineEstimator` must return `IPUPipelineEstimatorSpec`.")
        devices_needed = len(set(spec.device_mapping)) if spec.device_mapping is not None else \
            len(spec.computational_stages)
        shards = self._config.ipu_run_config.num_shards
        if not shards // 2 < devices_needed <= shards:
            raise ValueError(f"This pipeline requires {devices_needed} devices, but `IPURunConfig.num_shards` was set "
                             f"to {shards} (num_shards/2 < pipeline_devices <= num_shards).")
        count, iterations = spec.gradient_accumulation_count, self._iterations
        if count is not None and iterations < count:
            raise ValueError(f"`IPURunConfig.iterations_per_loop` (got {iterations}) cannot be less than "
                             f"`gradient_accumulation_count` (got {count})")
        if count is not None and iterations % count:
            raise ValueError(f"`IPURunConfig.iterations_per_loop` (got {iterations}) must be divisible by "
                             f"`gradient_accumulation_count` (got {count})")
        return spec

    def _pipeline(self, mode: str, outfeed: IPUOutfeedQueue, infeed: Any, built: dict[str, Any] | None = None) -> Any:
        """One run: the pipeline of ``iterations_per_loop`` micro-batches, compiled for the IPUs (the
        ``model_fn``'s spec it was built from goes into ``built["spec"]``)."""
        def run() -> Any:
            spec = self._pipeline_spec(mode)
            if built is not None:
                built["spec"] = spec
            training = mode == ModeKeys.TRAIN
            return pipelining_ops.pipeline(
                spec.computational_stages, spec.gradient_accumulation_count,
                repeat_count=self._iterations // (spec.gradient_accumulation_count or self._iterations),
                inputs=spec.inputs, infeed_queue=infeed, outfeed_queue=outfeed,
                optimizer_function=spec.optimizer_function if training else None,
                device_mapping=spec.device_mapping, pipeline_schedule=spec.pipeline_schedule, outfeed_loss=training,
                **spec.pipeline_options)

        return self._compiled(run)

    # -- training -------------------------------------------------------------------------------------
    def _training_run(self, infeed: Any) -> Callable[[Session], float]:
        outfeed = IPUOutfeedQueue()
        run = self._pipeline(ModeKeys.TRAIN, outfeed, infeed)
        losses = outfeed.dequeue()
        return lambda sess: (sess.run(run), float(np.mean(sess.run(losses))))[1]

    # -- evaluation -----------------------------------------------------------------------------------
    def evaluate(self, input_fn: Callable[..., Any], steps: int | None = None, hooks: Any = None,
                 checkpoint_path: str | None = None, name: str | None = None) -> dict[str, Any]:
        """``eval_metrics_fn`` over the last stage's outputs of ``steps`` micro-batches (or the whole dataset):
        the metrics, the loss and the global step."""
        refuse_hooks(hooks)
        self._validate_steps(steps)
        built: dict[str, Any] = {}
        graph, sess, run, dequeue, global_step = self._outfed_program(
            input_fn, ModeKeys.EVAL, lambda outfeed, infeed: self._pipeline(ModeKeys.EVAL, outfeed, infeed, built),
            checkpoint_path)
        with sess:
            runs: list[Any] = []
            while steps is None or len(runs) * self._iterations < steps:
                try:
                    sess.run(run)
                except OutOfRangeError:
                    break
                runs.append(sess.run(dequeue))
            if not runs:
                raise ValueError("The evaluation input_fn gave fewer elements than iterations_per_loop: nothing "
                                 "was evaluated.")
            results = _metrics(built["spec"].eval_metrics_fn, graph, sess, _concatenated(runs, self._replicas))
            results["global_step"] = int(sess.run(global_step))
        return results

    # -- prediction -------------------------------------------------------------------------------------
    def _prediction_run(self, outfeed: IPUOutfeedQueue, infeed: Any) -> Any:
        return self._pipeline(ModeKeys.PREDICT, outfeed, infeed)

    @staticmethod
    def _predictions(outfed: Any) -> Any:
        """The last stage's outputs as predictions: a dict as it is, else exactly one tensor."""
        if isinstance(outfed, dict):
            return outfed
        outputs = list(outfed) if isinstance(outfed, (list, tuple)) else [outfed]
        if len(outputs) != 1:
            raise ValueError(f"The last computational stage must return exactly one prediction tensor, but got "
                             f"{len(outputs)}")
        return outputs[0]


def _metrics(metrics_fn: Callable[..., Any], graph: Any, sess: Session, outputs: Any) -> dict[str, Any]:
    """``eval_metrics_fn`` run on the host over every evaluated micro-batch's outputs."""
    with graph.as_default(), device("cpu"):
        if isinstance(outputs, dict):
            metrics = metrics_fn(**{k: convert_to_tensor(v) for k, v in outputs.items()})
        else:
            metrics = metrics_fn(*[convert_to_tensor(v) for v in outputs])
        if not isinstance(metrics, dict):
            raise TypeError(f"The `eval_metrics_fn` must return a dict, but got {type(metrics)}.")
        if "loss" not in metrics:
            raise KeyError("The dict returned from `eval_metrics_fn` must contain 'loss'.")
        values = {k: v[0] if isinstance(v, tuple) else api.reduce_mean(convert_to_tensor(v))
                  for k, v in metrics.items()}
        updates = [v[1] for v in metrics.values() if isinstance(v, tuple)]
        init = graph_ops.variables_initializer(graph_ops.local_variables())
    sess.run(init)
    sess.run(updates)
    return {k: np.asarray(v)[()] for k, v in sess.run(values).items()}


def _concatenated(runs: list[Any], replicas: int) -> Any:
    """The outputs of several runs (each ``[micro-batches, (replicas,) ...]``) joined along the micro-batches
    (and replicas)."""
    lead = 2 if replicas > 1 else 1

    def join(parts: list[np.ndarray]) -> np.ndarray:
        return np.concatenate([np.asarray(p).reshape(-1, *np.asarray(p).shape[lead:]) for p in parts])

    first = runs[0]
    if isinstance(first, dict):
        return {k: join([r[k] for r in runs]) for k in first}
    if isinstance(first, (list, tuple)):
        return [join([r[i] for r in runs]) for i in range(len(first))]
    return [join(runs)]


__getattr__ = missing_attributes("ipu.ipu_pipeline_estimator")
