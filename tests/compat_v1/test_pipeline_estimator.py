"""``ipu.ipu_pipeline_estimator.IPUPipelineEstimator`` (spec §1.17): a ``model_fn`` returning a pipeline, trained
against the closed form, evaluated with ``eval_metrics_fn`` on the host and predicting; Graphcore's checks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from popjit import ipu
from popjit.ipu import ipu_estimator, ipu_run_config
from popjit.ipu.config import IPUConfig
from popjit.ipu.ipu_pipeline_estimator import IPUPipelineEstimator, IPUPipelineEstimatorSpec
from popjit.ipu.ops import pipelining_ops
from popjit.tensorflow.compat import v1 as tf1

X, Y, W0, LR = 1.5, 1.0, 2.0, 0.5


def _config(tmp_path: Path, iterations: int, shards: int = 2) -> Any:
    cfg = IPUConfig()
    cfg.auto_select_ipus = shards
    return ipu_run_config.RunConfig(ipu_run_config=ipu_run_config.IPURunConfig(
        num_shards=shards, iterations_per_loop=iterations, ipu_options=cfg), model_dir=str(tmp_path / "model"))


def _xy_input(n: int) -> Any:
    xs, ys = np.full(n, X, np.float32), np.full(n, Y, np.float32)
    return lambda: tf1.data.Dataset.from_tensor_slices((xs, ys))


def _linear_model(gac: int, reduction: str = "sum", **spec: Any) -> Any:
    """loss = w * x + y on two stages; GD on w."""
    def model_fn(mode: str) -> Any:
        def stage1(features: Any, labels: Any) -> Any:
            w = tf1.get_variable("w", initializer=np.float32(W0), use_resource=True)
            return w * features, labels

        def stage2(partial: Any, labels: Any) -> Any:
            return partial + labels

        def optimizer_function(loss: Any) -> Any:
            return pipelining_ops.OptimizerFunctionOutput(tf1.train.GradientDescentOptimizer(LR), loss)

        return IPUPipelineEstimatorSpec(mode, [stage1, stage2], gradient_accumulation_count=gac,
                                        optimizer_function=optimizer_function, reduction_method=reduction, **spec)
    return model_fn


def _logged(model_dir: Path, real_tf1: Any, tag: str) -> dict[int, float]:
    """Every ``tag`` summary in the event files of ``model_dir`` (one per training call), by step."""
    return {e.step: v.simple_value for events in model_dir.glob("events.out.tfevents.*")
            for e in real_tf1.train.summary_iterator(str(events)) for v in e.summary.value if v.tag == tag}


@pytest.mark.parametrize(("gac", "updates", "reduction"), [(4, 1, "sum"), (4, 2, "mean"), (8, 2, "sum")])
def test__training_equals_the_closed_form(tmp_path: Path, real_tf1: Any, fresh_ipu_system: Any, gac: int,
                                         updates: int, reduction: str) -> None:
    iterations = gac * updates
    estimator = IPUPipelineEstimator(_linear_model(gac, reduction), config=_config(tmp_path, iterations))
    w, losses = W0, []
    for run in range(2):
        estimator.train(_xy_input(iterations), steps=iterations)
        assert estimator.get_variable_value("global_step") == iterations * (run + 1)
        per_update = []
        for _ in range(updates):
            per_update.append(w * X + Y)
            w -= LR * X * (gac if reduction == "sum" else 1)
        losses.append(np.mean(per_update))
        np.testing.assert_allclose(estimator.get_variable_value("w"), w, rtol=1e-6)
    logged = _logged(tmp_path / "model", real_tf1, "loss")
    np.testing.assert_allclose([logged[iterations * (k + 1)] for k in range(2)], losses, rtol=1e-6)


def test__evaluate_runs_eval_metrics_fn_on_the_host(tmp_path: Path, fresh_ipu_system: Any) -> None:
    features = np.arange(4, dtype=np.float32)

    def model_fn(mode: str) -> Any:
        def stage1(x: Any) -> Any:
            return tf1.get_variable("w1", initializer=np.float32(1.0), use_resource=True) * x

        def stage2(partial: Any) -> Any:
            return {"squared": partial * partial, "partial": partial}  # passed to eval_metrics_fn by name

        def eval_metrics_fn(partial: Any, squared: Any) -> Any:
            return {"mean": tf1.metrics.mean(partial), "loss": squared}

        return IPUPipelineEstimatorSpec(mode, [stage1, stage2], gradient_accumulation_count=2,
                                        eval_metrics_fn=eval_metrics_fn, device_mapping=[0, 1])

    estimator = IPUPipelineEstimator(model_fn, config=_config(tmp_path, 2))
    metrics = estimator.evaluate(lambda: tf1.data.Dataset.from_tensor_slices(features).batch(1, drop_remainder=True),
                                 steps=4)
    assert metrics["mean"] == pytest.approx(np.mean(features))
    assert metrics["loss"] == pytest.approx(np.mean(features ** 2))
    assert metrics["global_step"] == 0


def test__predict_yields_each_micro_batchs_outputs(tmp_path: Path, fresh_ipu_system: Any) -> None:
    def model_fn(mode: str, params: dict[str, Any]) -> Any:
        def stage1(x: Any) -> Any:
            return tf1.get_variable("w", initializer=np.int32(1), use_resource=True) * x

        def stage2(partial: Any) -> Any:
            squared = partial * partial
            return {"squared": squared, "partial": partial} if params["as_dict"] else squared

        return IPUPipelineEstimatorSpec(mode, [stage1, stage2], gradient_accumulation_count=4)

    def input_fn() -> Any:
        return tf1.data.Dataset.from_tensor_slices(np.arange(8, dtype=np.int32)).batch(1, drop_remainder=True)

    squares = IPUPipelineEstimator(model_fn, config=_config(tmp_path, 4), params={"as_dict": False})
    assert list(squares.predict(input_fn, num_predictions=8)) == [i * i for i in range(8)]
    named = IPUPipelineEstimator(model_fn, config=_config(tmp_path / "b", 4), params={"as_dict": True})
    got = list(named.predict(input_fn, num_predictions=6))
    assert [g["partial"] for g in got] == list(range(6)) and [g["squared"] for g in got] == [i * i for i in range(6)]


def test__graphcores_checks(tmp_path: Path, fresh_ipu_system: Any) -> None:
    xy = _xy_input(4)
    with pytest.raises(ValueError, match="must not have `features` or `labels` arguments"):
        IPUPipelineEstimator(lambda features, labels, mode: None, config=_config(tmp_path, 1)).train(xy, steps=1)
    spec = lambda mode: ipu_estimator.IPUEstimatorSpec(mode, loss=tf1.constant(0.0))  # noqa: E731
    with pytest.raises(TypeError, match="must return `IPUPipelineEstimatorSpec`"):
        IPUPipelineEstimator(spec, config=_config(tmp_path, 1)).train(xy, steps=1)
    with pytest.raises(ValueError, match=r"This pipeline requires 4 devices, but `IPURunConfig.num_shards` was set "
                                         r"to 2 \(num_shards/2 < pipeline_devices <= num_shards\)"):
        IPUPipelineEstimator(_linear_model(1, device_mapping=[0, 1, 2, 3, 0]),
                             config=_config(tmp_path, 1)).train(xy, steps=1)
    with pytest.raises(ValueError, match=r"This pipeline requires 2 devices, but `IPURunConfig.num_shards` was set "
                                         "to 4"):
        IPUPipelineEstimator(_linear_model(1), config=_config(tmp_path, 1, shards=4)).train(xy, steps=1)
    with pytest.raises(ValueError, match=r"`IPURunConfig.iterations_per_loop` \(got 4\) must be divisible by "
                                         r"`gradient_accumulation_count` \(got 3\)"):
        IPUPipelineEstimator(_linear_model(3), config=_config(tmp_path, 4)).train(xy, steps=4)
    with pytest.raises(ValueError, match=r"`IPURunConfig.iterations_per_loop` \(got 1\) cannot be less than "
                                         r"`gradient_accumulation_count` \(got 2\)"):
        IPUPipelineEstimator(_linear_model(2), config=_config(tmp_path, 1)).train(xy, steps=1)
    with pytest.raises(ValueError, match="must contain `optimizer_function` when training"):
        IPUPipelineEstimatorSpec(tf1.estimator.ModeKeys.TRAIN, [lambda x: x, lambda x: x], 2)
    with pytest.raises(ValueError, match="must contain `eval_metrics_fn` when evaluating"):
        IPUPipelineEstimatorSpec(tf1.estimator.ModeKeys.EVAL, [lambda x: x, lambda x: x], 2)
    assert ipu.ipu_pipeline_estimator.IPUPipelineEstimator is IPUPipelineEstimator
