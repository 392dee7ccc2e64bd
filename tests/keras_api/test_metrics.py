"""``tf.keras.metrics``: stateful metrics over several batches against NumPy formulas (property
tests) and against stock TensorFlow's Keras; their state lives in variables a compiled step updates."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import popjit.tensorflow as pj

FLOATS = st.floats(-4, 4, width=32, allow_subnormal=False)
#: Sample weights: zero, or not so small that ``weight * value`` underflows float32. why: with a weight of
#: 1e-45 the compiled float32 sums (stock TensorFlow's too) round the weighted values to 0, which the
#: float64 reference keeps (a metric of 0.0 against 0.5).
WEIGHTS = st.just(0.0) | st.floats(2.0 ** -20, 2, width=32)


def _batches(draw, classes: int, batches: int = 2):
    """``batches`` of (integer labels, logits, weights), each of its own size."""
    out = []
    for _ in range(batches):
        n = draw(st.integers(1, 6))
        labels = draw(hnp.arrays(np.int32, (n,), elements=st.integers(0, classes - 1)))
        logits = draw(hnp.arrays(np.float32, (n, classes), elements=FLOATS))
        weights = draw(hnp.arrays(np.float32, (n,), elements=WEIGHTS))
        out.append((labels, logits, weights))
    return out


@st.composite
def classification(draw):
    return _batches(draw, draw(st.integers(2, 5)))


def _run(metric, batches, weighted: bool, transform=lambda labels, logits: (labels, logits)):
    for labels, logits, weights in batches:
        y_true, y_pred = transform(labels, logits)
        metric.update_state(y_true, y_pred, sample_weight=weights if weighted else None)
    return float(metric.result().numpy())


def _weighted_mean(values, weights):
    total = sum(float(np.sum(v * w)) for v, w in zip(values, weights))
    count = sum(float(np.sum(w)) for w in weights)
    return total / count if count else 0.0


@settings(max_examples=30, deadline=None)
@given(classification(), st.booleans())
def test__sparse_categorical_accuracy__is_the_weighted_share_of_argmax_hits(batches, weighted):
    got = _run(pj.keras.metrics.SparseCategoricalAccuracy(), batches, weighted)
    hits = [(logits.argmax(-1) == labels).astype(np.float64) for labels, logits, _ in batches]
    weights = [w if weighted else np.ones_like(w) for _, _, w in batches]
    assert got == pytest.approx(_weighted_mean(hits, weights), rel=1e-5, abs=1e-6)


@settings(max_examples=30, deadline=None)
@given(classification(), st.booleans(), st.integers(1, 3))
def test__top_k_accuracy__counts_labels_among_the_k_largest(batches, weighted, k):
    got = _run(pj.keras.metrics.SparseTopKCategoricalAccuracy(k=k), batches, weighted)
    hits = []
    for labels, logits, _ in batches:
        # a label is in the top k when fewer than k classes score strictly higher (ties count as hits)
        higher = (logits > logits[np.arange(len(labels)), labels][:, None]).sum(-1)
        hits.append((higher < k).astype(np.float64))
    weights = [w if weighted else np.ones_like(w) for _, _, w in batches]
    assert got == pytest.approx(_weighted_mean(hits, weights), rel=1e-5, abs=1e-6)


@settings(max_examples=30, deadline=None)
@given(classification(), st.booleans())
def test__regression_metrics__are_weighted_means_of_their_formulas(batches, weighted):
    weights = [w if weighted else np.ones_like(w) for _, _, w in batches]
    preds = [logits.astype(np.float64) for _, logits, _ in batches]
    trues = [np.eye(logits.shape[1])[labels] for labels, logits, _ in batches]
    formulas = {
        pj.keras.metrics.MeanSquaredError: lambda t, p: ((p - t) ** 2).mean(-1),
        pj.keras.metrics.MeanAbsoluteError: lambda t, p: np.abs(p - t).mean(-1),
    }
    for cls, formula in formulas.items():
        got = _run(cls(), batches, weighted, lambda labels, logits: (np.eye(logits.shape[1])[labels], logits))
        expected = _weighted_mean([formula(t, p) for t, p in zip(trues, preds)], weights)
        assert got == pytest.approx(expected, rel=1e-5, abs=1e-5), cls.__name__
    rmse = _run(pj.keras.metrics.RootMeanSquaredError(), batches, weighted,
                lambda labels, logits: (np.eye(logits.shape[1])[labels], logits))
    squared = [(p - t) ** 2 for t, p in zip(trues, preds)]
    per_element_weights = [np.broadcast_to(w[:, None], s.shape) for w, s in zip(weights, squared)]
    assert rmse == pytest.approx(np.sqrt(_weighted_mean(squared, per_element_weights)), rel=1e-5, abs=1e-5)


@settings(max_examples=30, deadline=None)
@given(classification(), st.booleans())
def test__precision_and_recall__count_thresholded_hits(batches, weighted):
    def binary(labels, logits):
        return (labels > 0).astype(np.float32), 1 / (1 + np.exp(-logits[:, 0]))

    tp = fp = fn = 0.0
    for labels, logits, w in batches:
        truth, prob = binary(labels, logits)
        w = w if weighted else np.ones_like(w)
        predicted = prob > 0.5
        tp += float(np.sum(w * (predicted & (truth == 1))))
        fp += float(np.sum(w * (predicted & (truth == 0))))
        fn += float(np.sum(w * (~predicted & (truth == 1))))
    precision = _run(pj.keras.metrics.Precision(), batches, weighted, binary)
    recall = _run(pj.keras.metrics.Recall(), batches, weighted, binary)
    assert precision == pytest.approx(tp / (tp + fp) if tp + fp else 0.0, rel=1e-5, abs=1e-6)
    assert recall == pytest.approx(tp / (tp + fn) if tp + fn else 0.0, rel=1e-5, abs=1e-6)


CASES = [
    ("AUC", {}, "binary"), ("AUC", {"curve": "PR"}, "binary"), ("AUC", {"num_thresholds": 50}, "binary"),
    ("Precision", {"thresholds": 0.3}, "binary"), ("Recall", {}, "binary"),
    ("BinaryAccuracy", {}, "binary"), ("BinaryCrossentropy", {}, "binary"),
    ("CategoricalAccuracy", {}, "onehot"), ("TopKCategoricalAccuracy", {"k": 2}, "onehot"),
    ("CategoricalCrossentropy", {"from_logits": True}, "onehot_logits"),
    ("SparseCategoricalCrossentropy", {"from_logits": True}, "sparse_logits"),
    ("KLDivergence", {}, "onehot"), ("Poisson", {}, "onehot"), ("MeanAbsolutePercentageError", {}, "onehot"),
    ("MeanSquaredLogarithmicError", {}, "onehot"), ("Accuracy", {}, "labels"),
]


def _data(kind, labels, logits):
    prob = 1 / (1 + np.exp(-logits))
    if kind == "binary":
        return (labels % 2).astype(np.float32)[:, None], prob[:, :1]  # [n, 1], as Keras 2 and 3 agree there
    if kind == "onehot":
        return np.eye(logits.shape[1], dtype=np.float32)[labels], prob
    if kind == "onehot_logits":
        return np.eye(logits.shape[1], dtype=np.float32)[labels], logits
    if kind == "sparse_logits":
        return labels, logits
    return labels, logits.argmax(-1).astype(np.int32)


@pytest.mark.parametrize(("name", "kwargs", "kind"), CASES, ids=[f"{c[0]}{c[1] or ''}" for c in CASES])
def test__metric__equals_tensorflows_over_weighted_batches(real_tf, name, kwargs, kind):
    rng = np.random.default_rng(len(name))
    ours, theirs = getattr(pj.keras.metrics, name)(**kwargs), getattr(real_tf.keras.metrics, name)(**kwargs)
    for n in (7, 5, 9):
        labels = rng.integers(0, 4, n).astype(np.int32)
        y_true, y_pred = _data(kind, labels, rng.normal(size=(n, 4)).astype(np.float32) * 2)
        weights = rng.random(n).astype(np.float32)
        ours.update_state(y_true, y_pred, sample_weight=weights)
        theirs.update_state(y_true, y_pred, sample_weight=weights)
        np.testing.assert_allclose(ours.result().numpy(), theirs.result().numpy(), rtol=2e-5, atol=1e-6)
    ours.reset_state()
    assert float(ours.result().numpy()) == 0.0


@pytest.mark.parametrize("name", ["BinaryAccuracy", "MeanSquaredError", "MeanAbsoluteError"])
@pytest.mark.parametrize("labels_rank", [1, 2])
def test__labels_without_the_outputs_last_axis__are_compared_per_example(real_tf, name, labels_rank):
    """Labels ``[n]`` against sigmoid outputs ``[n, 1]`` (and the reverse): Keras drops the extra axis
    instead of broadcasting to ``[n, n]``."""
    rng = np.random.default_rng(7)
    labels = rng.integers(0, 2, 12).astype(np.float32)
    prob = rng.random(12).astype(np.float32)
    y_true, y_pred = (labels, prob[:, None]) if labels_rank == 1 else (labels[:, None], prob)
    ours, theirs = getattr(pj.keras.metrics, name)(), getattr(real_tf.keras.metrics, name)()
    ours.update_state(y_true, y_pred)
    theirs.update_state(y_true, y_pred)
    np.testing.assert_allclose(ours.result().numpy(), theirs.result().numpy(), rtol=1e-6)
    if name == "BinaryAccuracy":
        assert float(ours.result().numpy()) == pytest.approx(np.mean(labels == (prob > 0.5)))


def test__metric_state__is_updated_inside_a_compiled_step_and_read_on_the_host():
    metric = pj.keras.metrics.Mean()

    @pj.function(jit_compile=True)
    def step(x):
        metric.update_state(x)
        return metric.result()

    step(np.array([1.0, 2.0], np.float32))
    assert float(step(np.array([6.0], np.float32))) == pytest.approx(3.0)
    assert float(metric.result().numpy()) == pytest.approx(3.0)
    assert [v.name.split("/")[-1] for v in metric.variables] == ["total:0", "count:0"]


def test__metrics_by_name__resolve_as_keras_does():
    assert pj.keras.metrics.get("mse") is pj.keras.metrics.mean_squared_error
    assert isinstance(pj.keras.metrics.get("AUC"), pj.keras.metrics.AUC)
    config = pj.keras.metrics.serialize(pj.keras.metrics.Precision(thresholds=0.3, name="p"))
    again = pj.keras.metrics.deserialize(config)
    assert isinstance(again, pj.keras.metrics.Precision) and again.name == "p"
    with pytest.raises(ValueError, match="Unknown metric function: nope"):
        pj.keras.metrics.get("nope")
