"""Graphcore's IPU Keras optimizers (``ipu_tensorflow_addons.keras.optimizers``): SGDIpuOptimizer is Keras's
SGD, AdamIpuOptimizer and LAMBIpuOptimizer follow NumPy references of their updates (eagerly and in
a compiled IPU step), the optimizer state takes its own dtype, and what popjit does not model is
refused."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import popjit.tensorflow as pj
from popjit import ipu
from popjit.errors import UnimplementedError
from popjit.ipu_tensorflow_addons.keras import optimizers as ipu_opt

STEPS = 4


def _grads(seed, shapes):
    rng = np.random.default_rng(seed)
    return [[rng.normal(size=s).astype(np.float32) for s in shapes] for _ in range(STEPS)]


def _run(opt, values, grads, names=None, compiled=False):
    """``values`` after applying each step's ``grads`` with ``opt``; the variables' names are ``names``."""
    variables = [pj.Variable(v, name=n) for v, n in zip(values, names or [None] * len(values))]
    step = lambda gs: opt.apply_gradients(zip(gs, variables))  # noqa: E731
    if compiled:
        strategy = ipu.ipu_strategy.IPUStrategy()
        with strategy.scope():
            variables = [pj.Variable(v, name=n) for v, n in zip(values, names or [None] * len(values))]
            program = pj.function(lambda *gs: opt.apply_gradients(zip(gs, variables)), jit_compile=True)
            for gs in grads:
                strategy.run(program, args=tuple(gs))
        return [v.numpy() for v in variables]
    for gs in grads:
        step([pj.constant(g) for g in gs])
    return [v.numpy() for v in variables]


def _adam_reference(value, grads, lr, b1, b2, eps, debiasing=True, amsgrad=False, m_dtype=np.float32):
    """Graphcore's Adam: ``lr * m_hat / (sqrt(v_hat) + eps)``; AMSGrad keeps the largest debiased v."""
    w, m, v, vhat = value.astype(np.float64), np.zeros(value.shape), np.zeros(value.shape), np.zeros(value.shape)
    for t, g in enumerate(grads, start=1):
        m = (m * b1 + g * (1 - b1)).astype(m_dtype).astype(np.float64)
        v = v * b2 + g * g * (1 - b2)
        m_hat, v_hat = (m / (1 - b1 ** t), v / (1 - b2 ** t)) if debiasing else (m, v)
        if amsgrad:
            v_hat = vhat = np.maximum(vhat, v_hat)
        w = w - lr * m_hat / (np.sqrt(v_hat) + eps)
    return w


@pytest.mark.parametrize("kwargs", [dict(), dict(debiasing=False), dict(amsgrad=True),
                                    dict(m_dtype=pj.float16, v_dtype="float16")],
                         ids=["debiased", "no-debiasing", "amsgrad", "float16-state"])
def test__adam_ipu__follows_graphcores_update(kwargs):
    (grads,) = zip(*_grads(1, [(3, 2)]))
    value = np.random.default_rng(2).normal(size=(3, 2)).astype(np.float32)
    opt = ipu_opt.AdamIpuOptimizer(0.05, epsilon=1e-3, **kwargs)
    (got,) = _run(opt, [value], [[g] for g in grads])
    m_dtype = np.float16 if "m_dtype" in kwargs else np.float32
    want = _adam_reference(value, grads, 0.05, 0.9, 0.999, 1e-3, kwargs.get("debiasing", True),
                           kwargs.get("amsgrad", False), m_dtype)
    np.testing.assert_allclose(got, want, rtol=2e-3 if m_dtype is np.float16 else 1e-5, atol=1e-6)
    if m_dtype is np.float16:
        assert opt.get_slot(opt._slot_owners[next(iter(opt._slots))], "m").dtype == pj.float16
        assert opt.get_config()["m_dtype"] == "float16"


@pytest.mark.parametrize("kwargs", [dict(), dict(momentum=0.9), dict(momentum=0.9, nesterov=True)])
def test__sgd_ipu__is_kerass_sgd(real_tf, kwargs):
    grads = _grads(3, [(4,), (2, 2)])
    values = [np.ones(4, np.float32), np.full((2, 2), -1.0, np.float32)]
    got = _run(ipu_opt.SGDIpuOptimizer(0.1, **kwargs), values, grads)
    theirs = [real_tf.Variable(v) for v in values]
    opt = real_tf.keras.optimizers.SGD(0.1, **kwargs)
    for gs in grads:
        opt.apply_gradients(zip([real_tf.constant(g) for g in gs], theirs))
    for g, t in zip(got, theirs, strict=True):
        np.testing.assert_allclose(g, t.numpy(), rtol=1e-6, atol=1e-7)


def _lamb_reference(values, grads, names, lr=0.01, b1=0.9, b2=0.999, eps=1e-6, wd=0.0, no_decay=(), no_adapt=(),
                    clip=None):
    """LAMB as Graphcore's optimizer computes it, per variable."""
    out = []
    for k, (value, name) in enumerate(zip(values, names)):
        w, m, v = value.astype(np.float64), 0.0, 0.0
        for t, gs in enumerate(grads, start=1):
            g = gs[k]
            m, v = m * b1 + g * (1 - b1), v * b2 + g * g * (1 - b2)
            update = (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps)
            if not any(re.search(p, name) for p in no_decay):
                update = update + w * wd
            ratio = 1.0
            if not any(re.search(p, name) for p in no_adapt):
                w_norm, u_norm = np.linalg.norm(w), np.linalg.norm(update)
                if clip is not None:
                    w_norm = min(w_norm, clip)
                ratio = w_norm / u_norm if w_norm > 0 and u_norm > 0 else 1.0
            w = w - lr * ratio * update
        out.append(w)
    return out


@given(seed=st.integers(0, 2**16), wd=st.sampled_from([0.0, 0.01, 0.3]), clip=st.sampled_from([None, 0.5]))
def test__lamb_ipu__follows_the_numpy_reference_of_the_lamb_update(seed, wd, clip):
    rng = np.random.default_rng(seed)
    values = [rng.normal(size=(3, 2)).astype(np.float32), rng.normal(size=(2,)).astype(np.float32),
              np.zeros(2, np.float32)]
    names = ["dense/kernel", "dense/bias", "norm/gamma"]
    grads = _grads(seed + 1, [(3, 2), (2,), (2,)])
    opt = ipu_opt.LAMBIpuOptimizer(0.01, weight_decay_rate=wd, weight_norm_clip=clip,
                                   exclude_from_weight_decay=["bias"], exclude_from_layer_adaptation=["gamma"])
    got = _run(opt, values, grads, names)
    want = _lamb_reference(values, [[g.astype(np.float64) for g in gs] for gs in grads], names, wd=wd,
                           no_decay=["bias"], no_adapt=["gamma"], clip=clip)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-6)


def test__lamb_and_adam_ipu__give_the_same_numbers_in_a_compiled_ipu_step():
    values = [np.random.default_rng(5).normal(size=(4, 3)).astype(np.float32)]
    grads = _grads(6, [(4, 3)])
    for make in (lambda: ipu_opt.LAMBIpuOptimizer(0.02, weight_decay_rate=0.1),
                 lambda: ipu_opt.AdamIpuOptimizer(0.02, amsgrad=True)):
        eager = _run(make(), values, grads, ["w"])
        compiled = _run(make(), values, grads, ["w"], compiled=True)
        np.testing.assert_allclose(compiled[0], eager[0], rtol=1e-5, atol=1e-6)


def test__what_popjit_does_not_model_is_refused():
    for cls in (ipu_opt.AdamIpuOptimizer, ipu_opt.SGDIpuOptimizer, ipu_opt.LAMBIpuOptimizer):
        with pytest.raises(UnimplementedError, match=rf"{cls.__name__}\(outline_apply_gradients=True\) is not "
                                                     "supported by popjit"):
            cls(outline_apply_gradients=True)
    with pytest.raises(ValueError, match=r"Must provide a list of two elements for the optimizer compute precision\."):
        ipu_opt.LAMBIpuOptimizer(optimizer_compute_precisions=(pj.float32,))
    config = ipu_opt.LAMBIpuOptimizer(0.5, weight_decay_rate=0.01, exclude_from_weight_decay=["bias"]).get_config()
    assert config["learning_rate"] == 0.5 and config["weight_decay_rate"] == 0.01
    assert config["exclude_from_weight_decay"] == ["bias"] and config["optimizer_compute_precisions"] == (
        "float32", "float32")
