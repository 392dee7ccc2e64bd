"""``tf.keras.mixed_precision``: dtype policies, autocast weights and dynamic loss scaling, and float16
models, compared with stock Keras (TensorFlow's Keras 3, whose semantics for these are Keras 2.6's,
except where a test says otherwise) at float16 tolerances, outside any IPU scope and inside
``IPUStrategy``."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

import popjit.tensorflow as pj
from popjit.errors import UnimplementedError
from popjit.tensorflow.python import ipu

RNG = np.random.default_rng(11)
X = (RNG.normal(size=(64, 6)) * 0.5).astype(np.float32)
Y = RNG.integers(0, 3, 64).astype(np.int32)
F16 = {"rtol": 2e-3, "atol": 2e-3}


@pytest.fixture(autouse=True)
def _float32_policy(real_tf):
    """Every test starts and ends with the default policy, in popjit and in stock Keras."""
    yield
    pj.keras.mixed_precision.set_global_policy(None)
    real_tf.keras.mixed_precision.set_global_policy("float32")


def _scope(where: str):
    return ipu.ipu_strategy.IPUStrategy().scope() if where == "ipu" else contextlib.nullcontext()


def _mixed(k, make):
    """``make(k)`` built under the mixed_float16 global policy (restored afterwards)."""
    k.keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        return make(k)
    finally:
        k.keras.mixed_precision.set_global_policy("float32")


def _classifier(k):
    layers = k.keras.layers
    model = k.keras.Sequential([layers.Dense(16, activation="relu"), layers.BatchNormalization(), layers.Dense(3),
                                layers.Activation("softmax", dtype="float32")])
    model(X[:2])
    return model


def _weights(model) -> list[np.ndarray]:
    """Fixed initial weights of ``model``'s shapes (stock Keras draws its own otherwise)."""
    rng = np.random.default_rng(3)
    return [(rng.normal(size=w.shape) * 0.4).astype(w.dtype) for w in model.get_weights()]


def _classifier_pair(real_tf, where: str):
    """The mixed_float16 classifier in stock Keras and in popjit (built ``where``), with equal weights."""
    theirs = _mixed(real_tf, _classifier)
    with _scope(where):
        ours = _mixed(pj, _classifier)
    weights = _weights(theirs)
    theirs.set_weights(weights)
    ours.set_weights(weights)
    return theirs, ours


# -- policies ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["mixed_float16", "float16", "float32", "float64"])
def test__policy__dtypes_as_stock_keras(real_tf, name: str) -> None:
    ours, theirs = pj.keras.mixed_precision.Policy(name), real_tf.keras.mixed_precision.Policy(name)
    assert (ours.name, ours.compute_dtype, ours.variable_dtype) == (theirs.name, theirs.compute_dtype,
                                                                    theirs.variable_dtype)


def test__policy__errors() -> None:
    mp = pj.keras.mixed_precision
    with pytest.raises(TypeError, match="'name' must be a string, not a DType"):
        mp.Policy(pj.float16)
    with pytest.raises(ValueError, match="Cannot convert value mixed_float61 to a mixed precision Policy"):
        mp.Policy("mixed_float61")
    with pytest.raises(UnimplementedError, match="bfloat16, which popjit does not have"):
        mp.Policy("mixed_bfloat16")
    with pytest.raises(ValueError, match="only be used to set the global policy to floating-point policies"):
        mp.set_global_policy("int32")


def test__global_policy__set_reset_and_taken_by_new_layers() -> None:
    mp = pj.keras.mixed_precision
    assert mp.global_policy().name == "float32"
    mp.set_global_policy("mixed_float16")
    assert mp.global_policy() == mp.Policy("mixed_float16")
    dense = pj.keras.layers.Dense(2)
    mp.set_global_policy(None)
    assert mp.global_policy().name == "float32"
    assert (dense.dtype, dense.compute_dtype, dense.dtype_policy.name) == ("float32", "float16", "mixed_float16")
    assert pj.keras.layers.Dense(2).compute_dtype == "float32"  # created after the reset


@pytest.mark.parametrize("dtype", ["mixed_float16", {"class_name": "Policy", "config": {"name": "mixed_float16"}}])
def test__layer_dtype__accepts_a_policy_name_or_config_and_serializes_it_as_keras(dtype) -> None:
    layer = pj.keras.layers.Dense(3, dtype=dtype)
    assert (layer.dtype, layer.compute_dtype) == ("float32", "float16")
    config = layer.get_config()
    assert config["dtype"] == {"class_name": "Policy", "config": {"name": "mixed_float16"}}
    assert pj.keras.layers.Dense.from_config(config).compute_dtype == "float16"
    assert pj.keras.layers.Dense(3, dtype="float16").get_config()["dtype"] == "float16"


# -- autocast ---------------------------------------------------------------------------------------


def test__autocast__weights_are_float32_read_as_float16_inside_the_layer_call_only() -> None:
    layer = pj.keras.layers.Dense(4, dtype="mixed_float16")
    out = layer(X[:3])
    assert out.dtype == pj.float16 and layer.kernel.dtype == pj.float32
    assert layer.kernel.read_value().dtype == pj.float32  # outside the call
    np.testing.assert_array_equal(layer.kernel.numpy(), layer.get_weights()[0])
    want = (X[:3].astype(np.float16) @ layer.kernel.numpy().astype(np.float16)).astype(np.float16)
    np.testing.assert_allclose(out.numpy(), want, **F16)  # bias is zero


@pytest.mark.slow
@pytest.mark.parametrize("where", ["host", "ipu"])
def test__mixed_layers__outputs_and_gradients_as_stock_keras(real_tf, where: str) -> None:
    theirs, ours = _classifier_pair(real_tf, where)

    def grads(k, model, run=lambda f, *args: f(*args)):
        def step(x, y):
            with k.GradientTape() as tape:
                loss = k.keras.losses.SparseCategoricalCrossentropy()(y, model(x, training=True))
            return loss, tape.gradient(loss, model.trainable_variables)

        loss, g = run(k.function(step), X[:16], Y[:16])
        return float(loss), [np.asarray(t) for t in g]

    with _scope(where):
        out = ours.predict(X, batch_size=16, verbose=0)
        strategy = ipu.ipu_strategy.IPUStrategy()
        loss, g = grads(pj, ours, (lambda f, *a: strategy.run(f, args=a)) if where == "ipu" else lambda f, *a: f(*a))
    their_loss, their_g = grads(real_tf, theirs)
    np.testing.assert_allclose(out, theirs.predict(X, batch_size=16, verbose=0), **F16)
    assert out.dtype == np.float32 and ours.layers[0](X[:2]).dtype == pj.float16
    np.testing.assert_allclose(loss, their_loss, **F16)
    for a, b in zip(g, their_g):
        assert a.dtype == np.float32
        np.testing.assert_allclose(a, b, rtol=1e-2, atol=1e-2)


# -- training -----------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("where", ["host", "ipu"])
def test__mixed_float16_fit__losses_and_weights_as_stock_keras(real_tf, where: str) -> None:
    theirs, ours = _classifier_pair(real_tf, where)
    theirs.compile(optimizer=real_tf.keras.optimizers.SGD(0.1), loss="sparse_categorical_crossentropy")
    with _scope(where):
        ours.compile(optimizer=pj.keras.optimizers.SGD(0.1), loss="sparse_categorical_crossentropy",
                     steps_per_execution=8 if where == "ipu" else None)
        assert isinstance(ours.optimizer, pj.keras.mixed_precision.LossScaleOptimizer)  # compile wraps it, as Keras
        ours_losses = ours.fit(X, Y, epochs=3, batch_size=8, shuffle=False, verbose=0).history["loss"]
        evaluated = ours.evaluate(X, Y, batch_size=8, verbose=0)
    their_losses = theirs.fit(X, Y, epochs=3, batch_size=8, shuffle=False, verbose=0).history["loss"]
    np.testing.assert_allclose(ours_losses, their_losses, rtol=5e-3, atol=5e-3)
    np.testing.assert_allclose(evaluated, theirs.evaluate(X, Y, batch_size=8, verbose=0), rtol=5e-3, atol=5e-3)
    assert float(ours.optimizer.loss_scale) == float(theirs.optimizer.dynamic_scale.numpy())
    for a, b in zip(ours.get_weights(), theirs.get_weights()):
        assert a.dtype == b.dtype == np.float32
        np.testing.assert_allclose(a, b, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("where", ["host", "ipu"])
def test__float16_model__trains_as_stock_keras(real_tf, where: str) -> None:
    def make(k):
        layers = k.keras.layers
        model = k.keras.Sequential([layers.Dense(16, activation="tanh", dtype="float16"),
                                    layers.Dense(1, dtype="float16")])
        model(X[:2].astype(np.float16))
        return model

    x16 = X.astype(np.float16)
    y16 = (X[:, :1] * 0.5 + 0.1).astype(np.float16)
    theirs = make(real_tf)
    with _scope(where):
        ours = make(pj)
    weights = _weights(theirs)
    theirs.set_weights(weights)
    ours.set_weights(weights)
    theirs.compile(optimizer=real_tf.keras.optimizers.SGD(0.05), loss="mse")
    with _scope(where):
        ours.compile(optimizer=pj.keras.optimizers.SGD(0.05), loss="mse",
                     steps_per_execution=8 if where == "ipu" else None)
        ours_losses = ours.fit(x16, y16, epochs=3, batch_size=8, shuffle=False, verbose=0).history["loss"]
    their_losses = theirs.fit(x16, y16, epochs=3, batch_size=8, shuffle=False, verbose=0).history["loss"]
    assert ours_losses[-1] < 0.5 * ours_losses[0]
    np.testing.assert_allclose(ours_losses, their_losses, **F16)
    for a, b in zip(ours.get_weights(), theirs.get_weights()):
        assert a.dtype == b.dtype == np.float16
        np.testing.assert_allclose(a.astype(np.float32), b.astype(np.float32), **F16)


# -- LossScaleOptimizer -------------------------------------------------------------------------------


def test__loss_scale_optimizer__scales_the_loss_and_unscales_gradients() -> None:
    opt = pj.keras.mixed_precision.LossScaleOptimizer(pj.keras.optimizers.SGD(0.5), initial_scale=64.0)
    assert float(opt.get_scaled_loss(pj.constant(1.5))) == 96.0
    assert float(opt.get_scaled_loss(lambda: pj.constant(2.0, pj.float16))()) == 128.0
    g16, none = opt.get_unscaled_gradients([pj.constant([64.0, -128.0], pj.float16), None])
    assert g16.dtype == pj.float16 and none is None
    np.testing.assert_array_equal(g16.numpy(), [1.0, -2.0])
    opt.learning_rate = 0.25  # hyperparameters are the wrapped optimizer's
    assert float(opt.inner_optimizer.learning_rate) == 0.25 and float(opt.lr) == 0.25


def _lso_steps(opt, var, grads: list[float], compiled: bool) -> list[tuple[float, int, int, float]]:
    """(loss scale, counter, iterations, variable) after applying each gradient of ``grads``."""
    def step(g):
        opt.apply_gradients([(g, var)])
        return opt.loss_scale

    run = pj.function(step, jit_compile=True) if compiled else step
    out = []
    for g in grads:
        run(pj.constant([g], pj.float32))
        out.append((float(opt.loss_scale), int(opt.dynamic_counter.numpy()), int(opt.iterations.numpy()),
                    float(var.numpy()[0])))
    return out


@pytest.mark.parametrize("where", ["host", "ipu"])
def test__loss_scale_optimizer__dynamic_scale_as_keras_2(where: str) -> None:
    with _scope(where):
        var = pj.Variable([1.0])
        opt = pj.keras.mixed_precision.LossScaleOptimizer(pj.keras.optimizers.SGD(1.0), initial_scale=4.0,
                                                          dynamic_growth_steps=2)
        with ipu.ipu_strategy.IPUStrategy().scope() if where == "ipu" else contextlib.nullcontext():
            steps = _lso_steps(opt, var, [0.5, 0.25, np.inf, np.nan, 1.0, 0.5, np.inf], compiled=where == "ipu")
    # finite steps count up and double the scale every 2; a non-finite one is skipped (the variable keeps
    # its value, iterations still counts it), halves the scale (not below 1) and restarts the count
    assert steps == [(4.0, 1, 1, 0.5), (8.0, 0, 2, 0.25), (4.0, 0, 3, 0.25), (2.0, 0, 4, 0.25), (2.0, 1, 5, -0.75),
                     (4.0, 0, 6, -1.25), (2.0, 0, 7, -1.25)]


def test__loss_scale_optimizer__fixed_scale_and_errors() -> None:
    mp = pj.keras.mixed_precision
    opt = mp.LossScaleOptimizer(pj.keras.optimizers.SGD(1.0), dynamic=False, initial_scale=8.0)
    assert float(opt.loss_scale) == 8.0 and opt.dynamic_counter is None and opt.dynamic_growth_steps is None
    with pytest.raises(ValueError, match='"initial_scale" must be specified if "dynamic" is False'):
        mp.LossScaleOptimizer(pj.keras.optimizers.SGD(), dynamic=False)
    with pytest.raises(TypeError, match='"inner_optimizer" must be an instance of OptimizerV2'):
        mp.LossScaleOptimizer("sgd")
    with pytest.raises(TypeError, match="cannot wrap another LossScaleOptimizer"):
        mp.LossScaleOptimizer(opt)
    with pytest.raises(ValueError, match="already wrapped by a LossScaleOptimizer"):
        mp.LossScaleOptimizer(opt.inner_optimizer)
    config = opt.get_config()
    assert config["inner_optimizer"]["class_name"] == "SGD" and config["initial_scale"] == 8.0
    assert float(mp.LossScaleOptimizer.from_config(config).loss_scale) == 8.0


def test__loss_scale_optimizer__minimize_in_a_custom_loop_equals_unscaled_sgd() -> None:
    """The scaled loss's gradients, unscaled, are the loss's: while no step overflows float16, a float16
    model's steps equal plain SGD's."""
    def run(wrap: bool) -> np.ndarray:
        var = pj.Variable(np.array([0.5, -0.25], np.float32))
        sgd = pj.keras.optimizers.SGD(0.1)
        opt = pj.keras.mixed_precision.LossScaleOptimizer(sgd) if wrap else sgd

        @pj.function(jit_compile=True)
        def step(x):
            with pj.GradientTape() as tape:
                loss = pj.reduce_sum(pj.square(pj.cast(var, pj.float16) * x))
            opt.minimize(loss, [var], tape=tape)

        for _ in range(3):
            step(np.array([0.5, 0.75], np.float16))
        assert not wrap or float(opt.loss_scale) == 2.0**15  # no step skipped
        return var.numpy()

    np.testing.assert_allclose(run(True), run(False), **F16)


def test__float16_square_gradient__scaled_as_loss_scaling_does__as_tensorflow(real_tf) -> None:
    """``d(sum(square(u)) * 2**15)/du`` in float16: TensorFlow forms ``2u`` before multiplying by the
    cotangent, which stays finite where ``(g * 2) * u`` would overflow."""
    u = np.array([0.25, -0.375], np.float16)

    def grad(k):
        x = k.constant(u)
        with k.GradientTape() as tape:
            tape.watch(x)
            loss = k.reduce_sum(k.square(x)) * k.constant(2.0**15, k.float16)
        return np.asarray(tape.gradient(loss, x))

    ours = grad(pj)
    np.testing.assert_array_equal(ours, grad(real_tf))
    assert np.isfinite(ours).all()


def test__mixed_float16_model__saved_as_h5_loads_with_its_policy_and_loss_scale_optimizer(tmp_path) -> None:
    def make(k):
        layers = k.keras.layers
        return k.keras.Sequential([layers.Dense(16, activation="relu", input_shape=(6,)), layers.Dense(3),
                                   layers.Activation("softmax", dtype="float32")])

    model = _mixed(pj, make)
    model.compile(optimizer=pj.keras.optimizers.SGD(0.1), loss="sparse_categorical_crossentropy")
    model.fit(X, Y, epochs=1, batch_size=16, verbose=0)
    model.save(tmp_path / "mixed.h5")
    loaded = pj.keras.models.load_model(tmp_path / "mixed.h5")
    assert loaded.layers[0].dtype_policy.name == "mixed_float16" and loaded.layers[-1].compute_dtype == "float32"
    assert isinstance(loaded.optimizer, pj.keras.mixed_precision.LossScaleOptimizer)
    np.testing.assert_array_equal(loaded.predict(X, verbose=0), model.predict(X, verbose=0))
