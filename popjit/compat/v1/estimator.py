"""``tf.compat.v1.estimator``: the Estimator pieces Graphcore's ``IPUEstimator`` builds on.

``ModeKeys``, ``EstimatorSpec`` and ``RunConfig`` (with the options popjit's estimators honour:
``model_dir``, ``tf_random_seed``, ``save_checkpoints_steps``, ``keep_checkpoint_max``,
``log_step_count_steps``, ``save_summary_steps``). The plain ``Estimator`` is not implemented;
``ipu.ipu_estimator.IPUEstimator`` is.
"""

from __future__ import annotations

import collections
from typing import Any

from popjit.errors import UnimplementedError, missing_attributes


class ModeKeys:
    """What a ``model_fn`` is asked to build."""

    TRAIN = "train"
    EVAL = "eval"
    PREDICT = "infer"


class EstimatorSpec(collections.namedtuple("EstimatorSpec", [
        "mode", "predictions", "loss", "train_op", "eval_metric_ops", "training_hooks", "evaluation_hooks",
        "prediction_hooks"])):
    """What a ``model_fn`` returns: the loss and train op (TRAIN), metrics (EVAL) or predictions (PREDICT)."""

    def __new__(cls, mode: str, predictions: Any = None, loss: Any = None, train_op: Any = None,
                eval_metric_ops: Any = None, export_outputs: Any = None, training_chief_hooks: Any = None,
                training_hooks: Any = None, scaffold: Any = None, evaluation_hooks: Any = None,
                prediction_hooks: Any = None) -> EstimatorSpec:
        refuse_hooks(training_chief_hooks, training_hooks, evaluation_hooks, prediction_hooks)
        if scaffold is not None or export_outputs is not None:
            raise UnimplementedError("EstimatorSpec(scaffold=..., export_outputs=...) is not supported by popjit.")
        return super().__new__(cls, mode, predictions, loss, train_op, eval_metric_ops or {}, None, None, None)


def refuse_hooks(*hooks: Any) -> None:
    """Session run hooks are not run by popjit's estimators: refuse them rather than skip them."""
    if any(hooks):
        raise UnimplementedError("Session run hooks (training_hooks, evaluation_hooks, prediction_hooks, hooks=) "
                                 "are not supported by popjit's estimators yet; remove them.")


_RUN_CONFIG_HONOURED = {"model_dir": None, "tf_random_seed": None, "save_summary_steps": 100,
                        "save_checkpoints_steps": None, "save_checkpoints_secs": None, "keep_checkpoint_max": 5,
                        "log_step_count_steps": 100, "session_config": None}


class RunConfig:
    """Where an estimator keeps its checkpoints and how often it saves, logs and summarises."""

    def __init__(self, **options: Any) -> None:
        for name in options:
            if name not in _RUN_CONFIG_HONOURED:
                raise UnimplementedError(f"tf.estimator.RunConfig({name}=...) is not supported by popjit; remove it.")
        values = {**_RUN_CONFIG_HONOURED, **options}
        if values["save_checkpoints_steps"] is not None and values["save_checkpoints_secs"] is not None:
            raise ValueError("Can not provide both save_checkpoints_steps and save_checkpoints_secs.")
        if values["save_checkpoints_steps"] is None and values["save_checkpoints_secs"] is None:
            values["save_checkpoints_secs"] = 600
        for name, value in values.items():
            setattr(self, f"_{name}", value)

    model_dir = property(lambda self: self._model_dir)
    tf_random_seed = property(lambda self: self._tf_random_seed)
    save_summary_steps = property(lambda self: self._save_summary_steps)
    save_checkpoints_steps = property(lambda self: self._save_checkpoints_steps)
    save_checkpoints_secs = property(lambda self: self._save_checkpoints_secs)
    keep_checkpoint_max = property(lambda self: self._keep_checkpoint_max)
    log_step_count_steps = property(lambda self: self._log_step_count_steps)
    session_config = property(lambda self: self._session_config)

    def replace(self, **changes: Any) -> RunConfig:
        """A copy with ``changes``."""
        current = {name: getattr(self, f"_{name}") for name in _RUN_CONFIG_HONOURED}
        if "save_checkpoints_steps" in changes:
            current["save_checkpoints_secs"] = None
        return type(self)(**{**current, **changes})


__all__ = ["EstimatorSpec", "ModeKeys", "RunConfig"]

__getattr__ = missing_attributes("tf.compat.v1.estimator")
