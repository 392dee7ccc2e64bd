"""``ipu.ipu_estimator``: ``IPUEstimator`` runs a TF1 ``model_fn`` on the IPU in on-device loops.

Each ``train``/``evaluate``/``predict`` builds a new TF1 graph: the ``input_fn``'s dataset feeds an
infeed, and ``model_fn`` is built inside ``loops.repeat(iterations_per_loop, ...)``, compiled with
``ipu_compiler.compile`` under ``ipu_scope`` — one session run per ``iterations_per_loop`` steps.
As Graphcore's:

- training reports the mean loss of each loop; the host adds ``iterations_per_loop`` to the global
  step after each run (a ``model_fn`` that increments it itself is refused); ``steps`` must be a
  multiple of ``iterations_per_loop``; training stops early when the dataset ends;
- checkpoints (``model.ckpt-<step>``, TensorFlow's format) go to ``model_dir`` at the start, every
  ``save_checkpoints_steps`` steps (or ``save_checkpoints_secs``) and at the end, and every call starts
  from the latest one there; the loss is written as a TensorBoard summary every ``save_summary_steps``;
- evaluation runs the metrics' update ops inside the loop and reads their last values through an
  outfeed (``eval_metric_ops``), or runs ``eval_metrics=(metric_fn, tensors)`` on the host over the
  tensors of every step; it returns the metrics, the mean ``loss`` and the ``global_step``;
- prediction outfeeds the predictions of every step and yields them one example at a time.
"""

from __future__ import annotations

import collections
import inspect
import logging
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from popjit.compat.v1 import graph_ops, summary
from popjit.compat.v1 import train as tf1_train
from popjit.compat.v1.estimator import EstimatorSpec, ModeKeys, refuse_hooks
from popjit.compat.v1.session import Session
from popjit.compat.v1.variable_scope import get_variable_scope, variable_scope
from popjit.data.dataset import Dataset
from popjit.errors import OutOfRangeError, UnimplementedError, missing_attributes
from popjit.frontend import api, graph_mode
from popjit.frontend.convert import convert_to_tensor
from popjit.frontend.device import device
from popjit.frontend.graph_mode import Operation
from popjit.frontend.random_ops import set_seed
from popjit.frontend.replication import cross_replica_sum
from popjit.frontend.tensor import Tensor
from popjit.ipu import ipu_compiler, loops
from popjit.ipu.config import IPUConfig
from popjit.ipu.ipu_infeed_queue import IPUInfeedQueue
from popjit.ipu.ipu_outfeed_queue import IPUOutfeedMode, IPUOutfeedQueue
from popjit.ipu.ipu_run_config import RunConfig
from popjit.ipu.scopes import ipu_scope
from popjit.runtime import device as devices
from popjit.runtime import instances
from popjit.train.checkpoint import latest_checkpoint
from popjit.train.tensor_bundle import BundleReader

_log = logging.getLogger("popjit")
_ILLEGAL_INCREMENT = ("Illegal increment of the `global_step` variable in the `model_fn`. This is usually caused by "
                      "passing it as an argument to the `Optimizer.minimize()` function. Please remove this argument "
                      "as the IPUEstimator itself is responsible for incrementing it.")


class IPUEstimatorSpec(collections.namedtuple("IPUEstimatorSpec", [
        "mode", "predictions", "loss", "train_op", "eval_metric_ops", "eval_metrics", "host_call", "training_hooks",
        "evaluation_hooks", "prediction_hooks"])):
    """What a ``model_fn`` returns to an ``IPUEstimator``."""

    def __new__(cls, mode: str, predictions: Any = None, loss: Any = None, train_op: Any = None,
                eval_metric_ops: Any = None, eval_metrics: Any = None, host_call: Any = None,
                training_hooks: Any = None, evaluation_hooks: Any = None, prediction_hooks: Any = None
                ) -> IPUEstimatorSpec:
        refuse_hooks(training_hooks, evaluation_hooks, prediction_hooks)
        if eval_metric_ops and eval_metrics:
            raise ValueError("Only one of `eval_metric_ops` and `eval_metrics` can be set.")
        for what, value in (("host_call", host_call), ("eval_metrics", eval_metrics)):
            if value is None:
                continue
            if not isinstance(value, tuple):
                raise ValueError(f"`{what}` must be a tuple")
            if len(value) != 2:
                raise ValueError(f"`{what}` must have two elements")
            if not isinstance(value[1], list):
                raise ValueError(f"second element in `{what}` must be a list")
        return super().__new__(cls, mode, predictions, loss, train_op, eval_metric_ops or {}, eval_metrics, host_call,
                               None, None, None)


def _accepts(fn: Callable[..., Any]) -> set[str]:
    return set(inspect.signature(fn).parameters)


def _features_and_labels(args: tuple, kwargs: dict) -> tuple[Any, Any]:
    if args and kwargs:
        raise ValueError("Invalid dataset with both tuple and keywords")
    if not args and not kwargs:
        raise ValueError("Invalid dataset with neither tuple nor keywords")
    if kwargs:
        return kwargs, None
    if len(args) == 1:
        return args[0], None
    if len(args) == 2:
        return args[0], args[1]
    raise ValueError(f"Invalid dataset tuple, expected 1 or 2 elements, got {len(args)}")


class IPUEstimator:
    """An Estimator whose ``model_fn`` runs on the IPU (see the module docstring)."""

    def __init__(self, model_fn: Callable[..., Any], model_dir: str | None = None, config: Any = None,
                 params: dict[str, Any] | None = None, warm_start_from: Any = None) -> None:
        if config is None or not isinstance(config, RunConfig):
            raise ValueError("`config` must be provided with type `ipu_run_config.RunConfig`")
        if params is not None and not isinstance(params, dict):
            raise ValueError("`params` is expected to be of type `dict`")
        if warm_start_from is not None and not isinstance(warm_start_from, (str, os.PathLike)):
            raise UnimplementedError("IPUEstimator(warm_start_from=WarmStartSettings(...)) is not supported by popjit: "
                                     "give the checkpoint's path (or its directory) to warm-start every trainable "
                                     "variable.")
        self._warm_start = None if warm_start_from is None else os.fspath(warm_start_from)
        if model_dir is not None and config.model_dir is not None and os.fspath(model_dir) != config.model_dir:
            raise ValueError(f"model_dir are set both in constructor and RunConfig, but with different values. In "
                             f"constructor: '{model_dir}', in RunConfig: '{config.model_dir}' ")
        chosen = model_dir or config.model_dir
        if chosen is None:
            chosen = tempfile.mkdtemp()
            _log.warning("Using temporary folder as model directory: %s", chosen)
        self._model_dir = os.fspath(chosen)
        self._model_fn = model_fn
        self._config = config.replace(model_dir=self._model_dir)
        self._params = dict(params or {})

    model_dir = property(lambda self: self._model_dir)
    config = property(lambda self: self._config)
    params = property(lambda self: dict(self._params))

    @property
    def _iterations(self) -> int:
        return self._config.ipu_run_config.iterations_per_loop

    # -- the pieces every mode uses ---------------------------------------------------------------------
    def _validate_steps(self, steps: int | None) -> None:
        if steps is not None and steps % self._iterations != 0:
            raise ValueError(f"steps ({steps}) must be a multiple of iterations_per_loop ({self._iterations})")

    def _configure_system(self) -> None:
        options = self._config.ipu_run_config.ipu_options
        if options is not None:
            options.configure_ipu_system()
        elif not devices.is_configured():
            default = IPUConfig()
            default.auto_select_ipus = 1
            default.configure_ipu_system()

    def _infeed(self, input_fn: Callable[..., Any], mode: str) -> IPUInfeedQueue:
        accepted = _accepts(input_fn)
        kwargs = {k: v for k, v in (("mode", mode), ("params", self.params), ("config", self._config))
                  if k in accepted}
        dataset = input_fn(**kwargs)
        if not isinstance(dataset, Dataset):
            raise ValueError("input_fn must return Dataset")
        return IPUInfeedQueue(dataset, prefetch_depth=self._config.ipu_run_config.prefetch_depth)

    def _call_model_fn(self, features: Any, labels: Any, mode: str) -> Any:
        accepted = _accepts(self._model_fn)
        kwargs: dict[str, Any] = {}
        if "labels" in accepted:
            kwargs["labels"] = labels
        elif labels is not None:
            raise ValueError("model_fn does not take labels, but input_fn returns labels.")
        for name, value in (("mode", mode), ("params", self.params), ("config", self._config)):
            if name in accepted:
                kwargs[name] = value
        spec = self._model_fn(features=features, **kwargs)
        if not isinstance(spec, (IPUEstimatorSpec, EstimatorSpec)):
            raise ValueError("`model_fn` must return IPUEstimatorSpec or EstimatorSpec")
        return spec

    @property
    def _replicas(self) -> int:
        return self._config.ipu_run_config.num_replicas

    def _replica_mean(self, total: Any, check: bool = False) -> Any:
        """A loop's total loss, averaged over the replicas (each replica's is that of its own batches). A
        replicated training graph must combine the replicas' gradients (Graphcore's check)."""
        if self._replicas == 1:
            return total
        if check and not any(node.op == "all_reduce" for node in graph_mode.current_graph_trace().top.region.walk()):
            raise ValueError("This is not a valid replicated training graph because no IpuCrossReplicaSum operations "
                             "were found. Did you remember to use the "
                             "`tensorflow.python.ipu.optimizers.cross_replica_optimizer.CrossReplicaOptimizer`?")
        return cross_replica_sum(total) / float(self._replicas)

    def _compiled(self, loop: Callable[[], Any]) -> Any:
        with ipu_scope(f"/device:IPU:{self._config.ipu_run_config.ordinal}"):
            return ipu_compiler.compile(loop, [])

    def _new_graph(self) -> tuple[Any, Any]:
        graph = graph_mode.GraphFacade()
        with graph.as_default():
            if self._config.tf_random_seed is not None:
                set_seed(self._config.tf_random_seed)
            with device("cpu"), variable_scope(get_variable_scope(), use_resource=True):
                step = tf1_train.get_or_create_global_step()
        return graph, step

    def _session(self, graph: Any, checkpoint_path: str | None) -> tuple[Session, Any]:
        """A session with the variables initialized, then restored from ``checkpoint_path`` (default: the
        latest checkpoint in ``model_dir``, if there is one)."""
        with graph.as_default():
            saver = tf1_train.Saver(max_to_keep=self._config.keep_checkpoint_max)
            init = [graph_ops.global_variables_initializer(), graph_ops.local_variables_initializer()]
        sess = Session(graph=graph, config=self._config.session_config)
        sess.run(init)
        path = checkpoint_path or latest_checkpoint(self._model_dir)
        if path is not None:
            _log.info("Restoring parameters from %s", path)
            saver.restore(sess, path)
        elif self._warm_start is not None:
            self._warm_start_variables(graph, sess)
        return sess, saver

    def _warm_start_variables(self, graph: Any, sess: Session) -> None:
        """A first session with nothing in ``model_dir``: every trainable variable the ``warm_start_from``
        checkpoint has starts from its value there (as TensorFlow's default warm start)."""
        path = latest_checkpoint(self._warm_start) if os.path.isdir(self._warm_start) else self._warm_start
        if path is None:
            raise ValueError(f"warm_start_from: no checkpoint in {self._warm_start}")
        names = set(BundleReader(path).keys())
        with graph.as_default():
            chosen = {v.name.split(":")[0]: v for v in graph_ops.trainable_variables()
                      if v.name.split(":")[0] in names}
            if not chosen:
                return
            warm = tf1_train.Saver(var_list=chosen)
        _log.info("Warm-starting %d variables from %s", len(chosen), path)
        warm.restore(sess, path)

    # -- training ---------------------------------------------------------------------------------------
    def train(self, input_fn: Callable[..., Any], hooks: Any = None, steps: int | None = None,
              max_steps: int | None = None, saving_listeners: Any = None) -> IPUEstimator:
        """Train for ``steps`` more steps, or up to ``max_steps`` in all (or until the dataset ends)."""
        refuse_hooks(hooks, saving_listeners)
        if steps is None and max_steps is None:
            raise ValueError("One of `num_steps` or `final_step` must be specified.")
        if steps is not None and max_steps is not None:
            raise ValueError("Only one of `num_steps` or `final_step` can be specified.")
        self._validate_steps(steps)
        self._configure_system()
        graph, global_step = self._new_graph()
        with graph.as_default():
            infeed = self._infeed(input_fn, ModeKeys.TRAIN)
            writes_before = len(graph._trace.writes)
            loop_loss = self._training_run(infeed)
            if any(ref.id == global_step._id for ref, _ in graph._trace.writes[writes_before:]):
                raise ValueError(_ILLEGAL_INCREMENT)
            with device("cpu"):
                increment = global_step.assign_add(np.int64(self._iterations))
            start_infeed = infeed.initializer
        sess, saver = self._session(graph, None)
        with sess:
            sess.run(start_infeed)
            step = int(sess.run(global_step))
            final = max_steps if max_steps is not None else step + steps
            if step >= final:
                _log.info("Skipping training since max_steps has already saved.")
                return self
            self._training_loop(sess, saver, loop_loss, increment, step, final)
        return self

    def _training_run(self, infeed: IPUInfeedQueue) -> Callable[[Session], float]:
        """Build the compiled training loop; a function running it once in a session, giving its mean loss
        (and then running the ``host_call``, if the spec has one)."""
        host: dict[str, Any] = {}
        (total,) = self._compiled(lambda: [self._replica_mean(
            loops.repeat(self._iterations, self._training_step(host), [0.0], infeed), check=True)])
        mean_loss = total / float(self._iterations)
        if "host_call" not in host:
            return lambda sess: float(sess.run(mean_loss))
        placeholders, after = self._host_call(host)
        dequeue = host["outfeed"].dequeue()

        def run(sess: Session) -> float:
            loss = float(sess.run(mean_loss))
            received = [np.asarray(a)[0] for a in sess.run(dequeue)]  # the loop's only step
            sess.run(after, feed_dict=dict(zip(placeholders, received)))
            return loss

        return run

    def _training_step(self, host: dict[str, Any]) -> Callable[..., Any]:
        def step(total_loss: Any, *args: Any, **kwargs: Any) -> Any:
            features, labels = _features_and_labels(args, kwargs)
            spec = self._call_model_fn(features, labels, ModeKeys.TRAIN)
            if spec.loss is None:
                raise ValueError("EstimatorSpec must contain loss when training")
            if spec.train_op is None:
                raise ValueError("EstimatorSpec must contain train_op when training")
            if getattr(spec, "host_call", None) is not None:  # its tensors go to the host with every step
                tensors = [convert_to_tensor(t) for t in spec.host_call[1]]
                host["host_call"], host["outfeed"] = spec.host_call[0], IPUOutfeedQueue()
                host["received"] = [(t.dtype, t.shape) for t in tensors]
                host["outfeed"].enqueue(tensors)
            return total_loss + api.cast(convert_to_tensor(spec.loss), "float32")  # the train op's updates carried

        return step

    def _host_call(self, host: dict[str, Any]) -> tuple[list[Tensor], Any]:
        """``host_call``'s function built once on the host, over placeholders that each run feeds with the tensors
        its step sent: (the placeholders, what each run runs after the training loop). Graphcore's estimator
        allows it with one step per loop; popjit, on one replica."""
        if self._iterations > 1:
            raise ValueError("host_call is not allowed for iterations_per_loop > 1")
        if self._replicas > 1:
            raise UnimplementedError("IPUEstimatorSpec(host_call=...) on several replicas is not supported by popjit.")
        with device("cpu"):
            placeholders = [graph_ops.placeholder(dtype, shape) for dtype, shape in host["received"]]
            result = host["host_call"](*placeholders)
        if not isinstance(result, (Tensor, Operation)):
            raise TypeError(f"`host_call` return value must be Operation or Tensor, given: {result}")
        return placeholders, result

    def _training_loop(self, sess: Session, saver: Any, loop_loss: Callable[[Session], float], increment: Any,
                       step: int, final: int) -> None:
        prefix = os.path.join(self._model_dir, "model.ckpt")
        writer = summary.FileWriter(self._model_dir) if instances.writes_checkpoints() else None
        self._save(sess, saver, prefix, step)
        saved_step, saved_time, logged_step, loss, first = step, time.time(), step, None, step
        try:
            while step < final:
                try:
                    loss = loop_loss(sess)
                except OutOfRangeError:
                    _log.info("The input ended after %d steps: training stops.", step)
                    break
                step = int(sess.run(increment))
                if step - logged_step >= self._config.log_step_count_steps or step == self._iterations:
                    _log.info("loss = %s, step = %d", loss, step)
                    logged_step = step
                every = self._config.save_summary_steps
                if writer and every and (step - self._iterations == first or step % every < self._iterations):
                    writer.add_summary(summary.scalar_summary("loss", loss), step)  # the first run, then every N
                if self._checkpoint_due(step - saved_step, time.time() - saved_time):
                    self._save(sess, saver, prefix, step)
                    saved_step, saved_time = step, time.time()
        finally:
            if writer:
                writer.close()
        if step != saved_step:
            self._save(sess, saver, prefix, step)
        _log.info("Loss for final step: %s.", loss)

    def _checkpoint_due(self, steps_since: int, seconds_since: float) -> bool:
        every_steps, every_secs = self._config.save_checkpoints_steps, self._config.save_checkpoints_secs
        return (every_steps is not None and steps_since >= every_steps) or \
            (every_secs is not None and seconds_since >= every_secs)

    def _save(self, sess: Session, saver: Any, prefix: str, step: int) -> None:
        if not instances.writes_checkpoints():  # several poprun instances: instance 0 writes, as the chief
            return
        _log.info("Saving checkpoints for %d into %s.", step, prefix)
        saver.save(sess, prefix, global_step=step)

    # -- evaluation -------------------------------------------------------------------------------------
    def evaluate(self, input_fn: Callable[..., Any], steps: int | None = None, hooks: Any = None,
                 checkpoint_path: str | None = None, name: str | None = None) -> dict[str, Any]:
        """The metrics, mean loss and global step of the model over ``steps`` steps (or the whole dataset)."""
        refuse_hooks(hooks)
        self._validate_steps(steps)
        self._configure_system()
        graph, global_step = self._new_graph()
        with graph.as_default():
            infeed = self._infeed(input_fn, ModeKeys.EVAL)
            outfeed = IPUOutfeedQueue(IPUOutfeedMode.LAST)
            host: dict[str, Any] = {}
            (total,) = self._compiled(lambda: [self._replica_mean(
                loops.repeat(self._iterations, self._evaluation_step(outfeed, host), [0.0], infeed))])
            dequeue = outfeed.dequeue() if outfeed.enqueued else None
            start_infeed = infeed.initializer
        sess, _ = self._session(graph, checkpoint_path)
        with sess:
            sess.run(start_infeed)
            runs, loss_sum, metric_values = 0, 0.0, {}
            while steps is None or runs * self._iterations < steps:
                try:
                    loss_sum += float(sess.run(total))
                except OutOfRangeError:
                    break
                runs += 1
                if dequeue is not None:  # replicated: each replica's value, averaged (as Graphcore's estimator)
                    metric_values = {k: np.mean(v, axis=0) if self._replicas > 1 else v
                                     for k, v in sess.run(dequeue).items()}
            if runs == 0:
                raise ValueError("The evaluation input_fn gave fewer elements than iterations_per_loop: nothing "
                                 "was evaluated.")
            if "metric_fn" in host:
                metric_values = self._host_metrics(graph, sess, host)
            results = {**{k: _scalar_value(v) for k, v in metric_values.items()},
                       "loss": np.float32(loss_sum / (runs * self._iterations)),
                       "global_step": int(sess.run(global_step))}
        _log.info("Saving dict for global step %d: %s", results["global_step"],
                  ", ".join(f"{k} = {v}" for k, v in sorted(results.items())))
        return results

    def _evaluation_step(self, outfeed: IPUOutfeedQueue, host: dict[str, Any]) -> Callable[..., Any]:
        def step(total_loss: Any, *args: Any, **kwargs: Any) -> Any:
            features, labels = _features_and_labels(args, kwargs)
            spec = self._call_model_fn(features, labels, ModeKeys.EVAL)
            if spec.loss is None:
                raise ValueError("EstimatorSpec must contain loss when evaluating")
            metric_ops = spec.eval_metric_ops
            eval_metrics = getattr(spec, "eval_metrics", None)
            if not metric_ops and not eval_metrics:
                raise ValueError("EstimatorSpec must contain either eval_metric_ops or eval_metrics")
            if metric_ops:  # in the loop the updates come first and the values read what they assigned
                outfeed.enqueue({k: v[0] for k, v in metric_ops.items()})
            else:
                host["metric_fn"], host["outfeed"] = eval_metrics[0], IPUOutfeedQueue()
                host["outfeed"].enqueue(eval_metrics[1])
            return total_loss + api.cast(convert_to_tensor(spec.loss), "float32")

        return step

    @staticmethod
    def _host_metrics(graph: Any, sess: Session, host: dict[str, Any]) -> dict[str, Any]:
        """``eval_metrics``: its ``metric_fn`` run on the host over the tensors of every evaluated step."""
        with graph.as_default():
            stacked = host["outfeed"].dequeue()
        arrays = sess.run(stacked)
        with graph.as_default():
            merged = [convert_to_tensor(a.reshape(-1, *a.shape[2:])) for a in arrays]
            with device("cpu"):
                metric_ops = host["metric_fn"](*merged)
            fresh = graph_ops.local_variables()
            init = graph_ops.variables_initializer(fresh)
        sess.run(init)
        sess.run([v[1] for v in metric_ops.values()])
        return sess.run({k: v[0] for k, v in metric_ops.items()})

    # -- prediction -------------------------------------------------------------------------------------
    def predict(self, input_fn: Callable[..., Any], predict_keys: Any = None, hooks: Any = None,
                checkpoint_path: str | None = None, yield_single_examples: bool = True,
                num_predictions: int | None = None) -> Iterator[Any]:
        """The predictions of every step, one example (or one batch) at a time, until the dataset ends or
        ``num_predictions`` were given."""
        refuse_hooks(hooks)
        _, sess, run, dequeue, _ = self._outfed_program(input_fn, ModeKeys.PREDICT, self._prediction_run,
                                                        checkpoint_path)
        given = 0
        with sess:
            while num_predictions is None or given < num_predictions:
                try:
                    sess.run(run)
                except OutOfRangeError:
                    return
                for example in examples(self._predictions(sess.run(dequeue)), predict_keys, yield_single_examples,
                                        self._replicas):
                    yield example
                    given += 1
                    if given == num_predictions:
                        return

    def _outfed_program(self, input_fn: Callable[..., Any], mode: str,
                        build: Callable[[IPUOutfeedQueue, IPUInfeedQueue], Any], checkpoint_path: str | None
                        ) -> tuple[Any, Session, Any, Any, Any]:
        """A new graph where ``build(outfeed, infeed)`` makes the compiled program of ``mode``, fed by
        ``input_fn``, and a session on it with the infeed started: (graph, session, program, the outfeed's
        dequeue, global step)."""
        self._configure_system()
        graph, global_step = self._new_graph()
        with graph.as_default():
            infeed = self._infeed(input_fn, mode)
            outfeed = IPUOutfeedQueue()
            run = build(outfeed, infeed)
            dequeue = outfeed.dequeue()
            start_infeed = infeed.initializer
        sess, _ = self._session(graph, checkpoint_path)
        sess.run(start_infeed)
        return graph, sess, run, dequeue, global_step

    def _prediction_run(self, outfeed: IPUOutfeedQueue, infeed: IPUInfeedQueue) -> Any:
        """The compiled prediction loop, outfeeding each step's predictions."""
        return self._compiled(lambda: loops.repeat(self._iterations, self._prediction_step(outfeed), [], infeed))

    @staticmethod
    def _predictions(outfed: Any) -> Any:
        """What a run outfed, as the predictions to yield."""
        return outfed

    def _prediction_step(self, outfeed: IPUOutfeedQueue) -> Callable[..., Any]:
        def step(*args: Any, **kwargs: Any) -> Any:
            features, _ = _features_and_labels(args, kwargs)
            spec = self._call_model_fn(features, None, ModeKeys.PREDICT)
            if spec.predictions is None:
                raise ValueError("EstimatorSpec must contain predictions when predicting")
            return outfeed.enqueue(spec.predictions)

        return step

    # -- variables --------------------------------------------------------------------------------------
    def latest_checkpoint(self) -> str | None:
        """The newest checkpoint in ``model_dir`` (None before training)."""
        return latest_checkpoint(self._model_dir)

    def get_variable_names(self) -> list[str]:
        """The names of the variables in the latest checkpoint."""
        return sorted(BundleReader(self._require_checkpoint()).keys())

    def get_variable_value(self, name: str) -> np.ndarray:
        """The value of variable ``name`` in the latest checkpoint."""
        return BundleReader(self._require_checkpoint()).get(name)

    def _require_checkpoint(self) -> str:
        path = self.latest_checkpoint()
        if path is None:
            raise ValueError(f"Could not find trained model in model_dir: {self._model_dir}.")
        return path


def _scalar_value(value: Any) -> Any:
    array = np.asarray(value)
    return array[()] if array.ndim == 0 else array


def examples(batch: Any, keys: Any, single: bool, replicas: int = 1) -> Iterator[Any]:
    """The predictions of one run (stacked over its steps), as single examples or as one batch per step."""
    if isinstance(batch, dict) and keys is not None:
        batch = {k: v for k, v in batch.items() if k in keys}
    if replicas > 1:  # [steps, replicas, batch...]: replica r's step i is batch i*R + r, in order
        batch = {k: v.reshape(-1, *v.shape[2:]) for k, v in batch.items()} if isinstance(batch, dict) else \
            batch.reshape(-1, *batch.shape[2:])
    leaves = list(batch.values()) if isinstance(batch, dict) else [batch]
    steps = leaves[0].shape[0]
    for s in range(steps):
        per_step = {k: v[s] for k, v in batch.items()} if isinstance(batch, dict) else batch[s]
        if not single:
            yield per_step
            continue
        count = (next(iter(per_step.values())) if isinstance(per_step, dict) else per_step).shape[0]
        for i in range(count):
            yield {k: v[i] for k, v in per_step.items()} if isinstance(per_step, dict) else per_step[i]


__getattr__ = missing_attributes("ipu.ipu_estimator")
