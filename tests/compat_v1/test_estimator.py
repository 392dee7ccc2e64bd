"""``ipu.ipu_estimator.IPUEstimator``: train, evaluate and predict a TF1 ``model_fn`` in on-device loops;
the same training as stock TensorFlow's session loop; checkpoints, global step and Graphcore's errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from popjit import ipu
from popjit.errors import UnimplementedError
from popjit.ipu import ipu_estimator, ipu_run_config
from popjit.ipu.config import IPUConfig
from popjit.tensorflow.compat import v1 as tf1

RNG = np.random.default_rng(11)
X = RNG.normal(size=(64, 3)).astype(np.float32)
Y = (X @ np.array([1.0, -2.0, 0.5], np.float32) > 0).astype(np.int32)
W0 = RNG.normal(size=(3, 2)).astype(np.float32) * 0.1


def _input(repeat: bool, batch: int = 8, extra: bool = False) -> Any:
    def input_fn(params: dict[str, Any]) -> Any:
        parts = (X, Y, Y) if extra else (X, Y)
        ds = tf1.data.Dataset.from_tensor_slices(parts).batch(batch, drop_remainder=True)
        return ds.repeat() if repeat else ds
    return input_fn


def _model_fn(features: Any, labels: Any, mode: str, params: dict[str, Any]) -> Any:
    w = tf1.get_variable("w", initializer=tf1.constant(W0))
    logits = tf1.matmul(features, w)
    classes = tf1.argmax(logits, 1, output_type=tf1.int32)
    if mode == tf1.estimator.ModeKeys.PREDICT:
        return ipu_estimator.IPUEstimatorSpec(mode, predictions={"class": classes, "logits": logits})
    loss = tf1.losses.sparse_softmax_cross_entropy(labels, logits)
    if mode == tf1.estimator.ModeKeys.EVAL:
        if params.get("host_metrics"):
            metric_fn = lambda y, c: {"accuracy": tf1.metrics.accuracy(y, c)}  # noqa: E731
            return ipu_estimator.IPUEstimatorSpec(mode, loss=loss, eval_metrics=(metric_fn, [labels, classes]))
        return ipu_estimator.IPUEstimatorSpec(mode, loss=loss,
                                              eval_metric_ops={"accuracy": tf1.metrics.accuracy(labels, classes)})
    step = tf1.train.get_global_step() if params.get("bad_step") else None
    optimizer = tf1.train.GradientDescentOptimizer(params.get("lr", 0.5))
    if params.get("cross_replica"):
        optimizer = ipu.optimizers.CrossReplicaOptimizer(optimizer)
    return ipu_estimator.IPUEstimatorSpec(mode, loss=loss, train_op=optimizer.minimize(loss, step))


def _estimator(tmp_path: Path, iterations: int = 4, replicas: int = 1, **params: Any) -> Any:
    cfg = IPUConfig()
    cfg.auto_select_ipus = replicas
    config = ipu_run_config.RunConfig(
        ipu_run_config=ipu_run_config.IPURunConfig(iterations_per_loop=iterations, ipu_options=cfg,
                                                   num_replicas=replicas),
        model_dir=str(tmp_path / "model"), save_checkpoints_steps=8)
    return ipu_estimator.IPUEstimator(_model_fn, config=config, params=params)


def _stock_training(real_tf1: Any, batches: list[int]) -> np.ndarray:
    with real_tf1.Graph().as_default():
        x = real_tf1.placeholder(real_tf1.float32, [8, 3])
        y = real_tf1.placeholder(real_tf1.int32, [8])
        w = real_tf1.get_variable("w", initializer=real_tf1.constant(W0))
        loss = real_tf1.losses.sparse_softmax_cross_entropy(y, real_tf1.matmul(x, w))
        train = real_tf1.train.GradientDescentOptimizer(0.5).minimize(loss)
        with real_tf1.Session() as sess:
            sess.run(real_tf1.global_variables_initializer())
            for k in batches:
                sess.run(train, {x: X[8 * k:8 * k + 8], y: Y[8 * k:8 * k + 8]})
            return sess.run(w)


def test__train_evaluate_predict(tmp_path: Path, real_tf1: Any) -> None:
    est = _estimator(tmp_path)
    est.train(_input(repeat=True), steps=12)
    est.train(_input(repeat=True), steps=8)  # steps count on from the checkpoint: 20 in all; the input starts again
    batches = [*range(8), *range(4), *range(8)]
    np.testing.assert_allclose(est.get_variable_value("w"), _stock_training(real_tf1, batches), rtol=1e-5, atol=1e-6)
    assert est.get_variable_value("global_step") == 20
    assert {p.name for p in (tmp_path / "model").glob("*.index")} == {"model.ckpt-0.index", "model.ckpt-8.index",
                                                                     "model.ckpt-12.index", "model.ckpt-20.index"}
    est.train(_input(repeat=True), max_steps=20)  # already there: nothing to do
    assert est.get_variable_value("global_step") == 20
    assert [k for k in real_tf1.train.load_checkpoint(str(tmp_path / "model")).get_variable_to_shape_map()
            if k == "w"] == ["w"]

    w = est.get_variable_value("w")
    want_accuracy = np.mean(np.argmax(X @ w, 1) == Y)
    results = est.evaluate(_input(repeat=False))
    assert results["global_step"] == 20
    np.testing.assert_allclose(results["accuracy"], want_accuracy, rtol=1e-6)
    logits = X @ w
    want_loss = np.mean(np.log(np.exp(logits).sum(1)) - logits[np.arange(64), Y])
    np.testing.assert_allclose(results["loss"], want_loss, rtol=1e-4)
    host = _estimator(tmp_path, host_metrics=True).evaluate(_input(repeat=False), steps=4)
    np.testing.assert_allclose(host["accuracy"], np.mean(np.argmax(X[:32] @ w, 1) == Y[:32]), rtol=1e-6)

    predictions = list(est.predict(_input(repeat=False)))
    assert len(predictions) == 64
    np.testing.assert_array_equal([p["class"] for p in predictions], np.argmax(X @ w, 1))
    np.testing.assert_allclose(predictions[5]["logits"], logits[5], rtol=1e-5)


def test__errors_of_graphcores_estimator(tmp_path: Path) -> None:
    est = _estimator(tmp_path)
    with pytest.raises(ValueError, match=r"steps \(6\) must be a multiple of iterations_per_loop \(4\)"):
        est.train(_input(repeat=True), steps=6)
    with pytest.raises(ValueError, match="Invalid dataset tuple, expected 1 or 2 elements, got 3"):
        est.train(_input(repeat=True, extra=True), steps=4)
    with pytest.raises(ValueError, match=r"Illegal increment of the `global_step` variable in the `model_fn`"):
        _estimator(tmp_path, bad_step=True).train(_input(repeat=True), steps=4)
    with pytest.raises(ValueError, match=r"`config` must be provided with type `ipu_run_config\.RunConfig`"):
        ipu_estimator.IPUEstimator(_model_fn, config=tf1.estimator.RunConfig())
    with pytest.raises(ValueError, match=r"IPU configuration requires more than one device, but `ipu_options` is None"):
        ipu_run_config.IPURunConfig(num_replicas=2)
    with pytest.raises(ValueError, match=r"`config\.ipu_options` must be an IPUConfig or IpuOptions instance"):
        ipu_run_config.IPURunConfig(ipu_options={"a": 1})
    with pytest.raises(NotImplementedError, match="compile_summary"):
        ipu_run_config.IPURunConfig(compile_summary=True)
    with pytest.raises(UnimplementedError, match=r"IPURunConfig\(autosharding=True\)"):
        ipu_run_config.IPURunConfig(autosharding=True)
    four = IPUConfig()
    four.auto_select_ipus = 4
    with pytest.raises(ValueError, match=r"configured with 2 devices \(1 replicas times 2 shards\), but `IpuOptions` "
                                         r"configured with 4 devices"):
        ipu_run_config.IPURunConfig(num_shards=2, ipu_options=four)
    assert not (tmp_path / "model").exists() or not list((tmp_path / "model").glob("*.index"))


def test__replicated_estimator__each_replica_its_batches_and_the_gradients_summed(tmp_path: Path,
                                                                                 fresh_ipu_system: Any) -> None:
    """Two replicas of batch 4 with summed gradients train as one replica of batch 8 (whose loss is the mean
    over 8) with twice the learning rate; the loss is the replicas' mean; predictions keep the data's order."""
    two = _estimator(tmp_path / "two", replicas=2, cross_replica=True, lr=0.25)
    two.train(_input(repeat=True, batch=4), steps=8)
    one = _estimator(tmp_path / "one", lr=0.5)
    one.train(_input(repeat=True, batch=8), steps=8)
    np.testing.assert_allclose(two.get_variable_value("w"), one.get_variable_value("w"), rtol=1e-5, atol=1e-7)
    results = two.evaluate(_input(repeat=False, batch=4), steps=4)
    want = one.evaluate(_input(repeat=False, batch=8), steps=4)
    np.testing.assert_allclose(results["loss"], want["loss"], rtol=1e-5)
    np.testing.assert_allclose(results["accuracy"], want["accuracy"], rtol=1e-6)
    classes = [p["class"] for p in two.predict(_input(repeat=False, batch=4))]
    logits = X @ two.get_variable_value("w")
    np.testing.assert_array_equal(classes, np.argmax(logits, 1))
    with pytest.raises(ValueError, match="This is not a valid replicated training graph because no "
                                         "IpuCrossReplicaSum operations were found"):
        _estimator(tmp_path / "bad", replicas=2).train(_input(repeat=True, batch=4), steps=4)


def test__host_call__runs_on_the_host_after_each_step(tmp_path: Path) -> None:
    def model_fn(features: Any, labels: Any, mode: str) -> Any:
        w = tf1.get_variable("w", initializer=tf1.constant(W0))
        loss = tf1.losses.sparse_softmax_cross_entropy(labels, tf1.matmul(features, w))
        train = tf1.train.GradientDescentOptimizer(0.5).minimize(loss)

        def on_host(step_loss: Any) -> Any:
            with tf1.variable_scope("host", use_resource=True):
                seen = tf1.get_variable("seen", initializer=np.float32(0.0), trainable=False)
            return seen.assign_add(step_loss)

        return ipu_estimator.IPUEstimatorSpec(mode, loss=loss, train_op=train, host_call=(on_host, [loss]))

    def estimator(iterations: int) -> Any:
        config = ipu_run_config.RunConfig(ipu_run_config=ipu_run_config.IPURunConfig(iterations_per_loop=iterations),
                                          model_dir=str(tmp_path / f"model{iterations}"))
        return ipu_estimator.IPUEstimator(model_fn, config=config)

    est = estimator(1)
    est.train(_input(repeat=True), steps=3)
    w, losses = W0.astype(np.float64), []  # the host variable holds the sum of the three steps' losses
    for k in range(3):
        x, y = X[8 * k:8 * k + 8].astype(np.float64), Y[8 * k:8 * k + 8]
        logits = x @ w
        p = np.exp(logits - logits.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        losses.append(-np.mean(np.log(p[np.arange(8), y])))
        p[np.arange(8), y] -= 1
        w -= 0.5 * x.T @ p / 8
    np.testing.assert_allclose(est.get_variable_value("host/seen"), sum(losses), rtol=1e-5)
    with pytest.raises(ValueError, match=r"host_call is not allowed for iterations_per_loop > 1"):
        estimator(2).train(_input(repeat=True), steps=2)


def test__warm_start_from__a_checkpoint_directory(tmp_path: Path) -> None:
    trained = _estimator(tmp_path / "a")
    trained.train(_input(repeat=True), steps=8)
    config = ipu_run_config.RunConfig(ipu_run_config=ipu_run_config.IPURunConfig(iterations_per_loop=4),
                                      model_dir=str(tmp_path / "b"))
    warm = ipu_estimator.IPUEstimator(_model_fn, config=config, warm_start_from=str(tmp_path / "a" / "model"))
    results = warm.evaluate(_input(repeat=False))
    w = trained.get_variable_value("w")
    np.testing.assert_allclose(results["accuracy"], np.mean(np.argmax(X @ w, 1) == Y), rtol=1e-6)
    assert results["global_step"] == 0  # only the trainable variables start from the checkpoint
    warm.train(_input(repeat=True), steps=4)
    assert warm.get_variable_value("global_step") == 4
    assert not np.allclose(warm.get_variable_value("w"), w)  # it trained on from there
    with pytest.raises(UnimplementedError, match=r"warm_start_from=WarmStartSettings"):
        ipu_estimator.IPUEstimator(_model_fn, config=config, warm_start_from=object())


def test__host_call__errors(tmp_path: Path, fresh_ipu_system: Any) -> None:
    def model_fn(features: Any, labels: Any, mode: str, params: dict[str, Any]) -> Any:
        spec = _model_fn(features, labels, mode, {"cross_replica": True})
        return ipu_estimator.IPUEstimatorSpec(mode, loss=spec.loss, train_op=spec.train_op,
                                              host_call=(params["host"], [spec.loss]))

    def estimator(replicas: int = 1, **params: Any) -> Any:
        cfg = IPUConfig()
        cfg.auto_select_ipus = replicas
        config = ipu_run_config.RunConfig(ipu_run_config=ipu_run_config.IPURunConfig(
            iterations_per_loop=1, ipu_options=cfg, num_replicas=replicas), model_dir=str(tmp_path / f"m{replicas}"))
        return ipu_estimator.IPUEstimator(model_fn, config=config, params=params)

    with pytest.raises(TypeError, match=r"`host_call` return value must be Operation or Tensor, given: 3"):
        estimator(host=lambda loss: 3).train(_input(repeat=True), steps=1)
    with pytest.raises(UnimplementedError, match=r"host_call=\.\.\.\) on several replicas"):
        estimator(2, host=lambda loss: loss).train(_input(repeat=True), steps=1)
    with pytest.raises(ValueError, match=r"warm_start_from: no checkpoint in"):
        config = ipu_run_config.RunConfig(ipu_run_config=ipu_run_config.IPURunConfig(iterations_per_loop=4),
                                          model_dir=str(tmp_path / "c"))
        (tmp_path / "empty").mkdir()
        ipu_estimator.IPUEstimator(_model_fn, config=config, warm_start_from=str(tmp_path / "empty")).evaluate(
            _input(repeat=False))
