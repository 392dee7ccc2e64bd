"""Keras's training API: ``fit``/``evaluate``/``predict`` and the ``*_on_batch`` methods give stock
TensorFlow's numbers for the same model, weights and data, outside any IPU scope (stock Keras on the
CPU) and inside ``IPUStrategy`` (one compiled device loop per mode, fed by an infeed, reused across
calls and epochs); callbacks see what Keras (and Graphcore's Keras) shows them."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

import popjit.tensorflow as pj
from popjit.pipeline import cache
from popjit.tensorflow.python import ipu

RNG = np.random.default_rng(5)
X = RNG.normal(size=(96, 6)).astype(np.float32)
Y = (X[:, 0] + X[:, 1] * X[:, 2] > 0).astype(np.int32)


def _scope(where: str):
    """``host``: no strategy; ``ipu``: IPUStrategy (Graphcore's Keras); ``ipu_plain``: IPUStrategy without
    its Keras extensions (stock Keras stepping through the strategy, one IPU program per batch)."""
    if where == "host":
        return contextlib.nullcontext()
    return ipu.ipu_strategy.IPUStrategy(enable_keras_extensions=where == "ipu").scope()


def _mlp(k, outputs: int = 2, activation: str | None = None):
    model = k.keras.Sequential([k.keras.layers.Dense(8, activation="relu"),
                                k.keras.layers.Dense(outputs, activation=activation)])
    model(X[:1])
    return model


def _twins(real_tf, make, where: str):
    """The same model in popjit (built in ``where``) and in TensorFlow, with TensorFlow's initial weights
    (seeded: unseeded, some draws trained to predictions 1.4e-5 apart after 3 epochs of Adam, others
    to 8e-6, so a comparison at atol=1e-5 passed or failed by the draw)."""
    real_tf.keras.utils.set_random_seed(1234)
    theirs = make(real_tf)
    with _scope(where):
        ours = make(pj)
    ours.set_weights(theirs.get_weights())
    return ours, theirs


def _compile_both(ours, theirs, real_tf, where, optimizer, loss, metrics=None, spe=2, **kwargs):
    """Compile both models alike (``optimizer``, ``loss`` and ``metrics`` made for each library)."""
    for lib, model in ((pj, ours), (real_tf, theirs)):
        with _scope(where) if lib is pj else contextlib.nullcontext():
            model.compile(optimizer(lib), loss=loss(lib) if callable(loss) else loss,
                          metrics=metrics(lib) if callable(metrics) else metrics,
                          steps_per_execution=spe if where == "ipu" and lib is pj else 1, **kwargs)


def _close(ours: dict, theirs: dict, rtol=2e-5, atol=2e-6):
    theirs = {"lr" if k == "learning_rate" else k: v for k, v in theirs.items()}  # Keras 3's new name
    assert set(ours) == set(theirs), (sorted(ours), sorted(theirs))
    for key in theirs:
        np.testing.assert_allclose(ours[key], theirs[key], rtol=rtol, atol=atol, err_msg=key)


SPARSE_CE = lambda k: k.keras.losses.SparseCategoricalCrossentropy(from_logits=True)  # noqa: E731
ADAM = lambda k: k.keras.optimizers.Adam(0.02)  # noqa: E731


# -- numbers equal stock TensorFlow's ------------------------------------------------------------------
@pytest.mark.parametrize("where", ["host", "ipu", "ipu_plain"])
def test__fit_evaluate_predict__equal_tensorflow(real_tf, where):
    ours, theirs = _twins(real_tf, _mlp, where)
    _compile_both(ours, theirs, real_tf, where, ADAM, SPARSE_CE, ["accuracy"])
    kwargs = dict(batch_size=16, epochs=3, shuffle=False, verbose=0, validation_split=1 / 3)
    with _scope(where):
        h_ours = ours.fit(X, Y, **kwargs)
        e_ours = ours.evaluate(X, Y, batch_size=16, verbose=0)
        p_ours = ours.predict(X, batch_size=16)
    h_theirs = theirs.fit(X, Y, **kwargs)
    _close(h_ours.history, h_theirs.history)
    assert list(h_ours.history) == ["loss", "accuracy", "val_loss", "val_accuracy"]
    assert h_ours.epoch == [0, 1, 2]
    np.testing.assert_allclose(e_ours, theirs.evaluate(X, Y, batch_size=16, verbose=0), rtol=2e-5)
    # why atol 5e-5: outputs of order 1 after 3 epochs of Adam(0.02) from the same weights, summed in
    # another order (OpenBLAS vs Eigen); elements near 0 differ by up to 1.5e-5 (float32 agreement)
    np.testing.assert_allclose(p_ours, theirs.predict(X, batch_size=16, verbose=0), rtol=1e-4, atol=5e-5)
    for a, b in zip(ours.get_weights(), theirs.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("where", ["host", "ipu"])
def test__sample_and_class_weights__equal_tensorflow(real_tf, where):
    sample_weight = RNG.random(len(X)).astype(np.float32)
    histories = []
    for weights in (dict(sample_weight=sample_weight), dict(class_weight={0: 0.3, 1: 2.0})):
        pj.keras.backend.clear_session()
        ours, theirs = _twins(real_tf, _mlp, where)
        _compile_both(ours, theirs, real_tf, where, lambda k: k.keras.optimizers.SGD(0.1, momentum=0.9), SPARSE_CE,
                      lambda k: [k.keras.metrics.SparseCategoricalAccuracy()], spe=3)
        with _scope(where):
            h_ours = ours.fit(X, Y, batch_size=32, epochs=2, shuffle=False, verbose=0, **weights)
        _close(h_ours.history, theirs.fit(X, Y, batch_size=32, epochs=2, shuffle=False, verbose=0,
                                          **weights).history)
        histories.append(h_ours.history["loss"])
    assert histories[0] != histories[1]


def _two_outputs(k):
    inputs = k.keras.Input((6,))
    hidden = k.keras.layers.Dense(8, activation="tanh", name="hidden")(inputs)
    klass = k.keras.layers.Dense(3, name="klass")(hidden)
    value = k.keras.layers.Dense(1, name="value")(hidden)
    return k.keras.Model(inputs, [klass, value])


@pytest.mark.parametrize("where", ["host", "ipu"])
def test__two_outputs__per_output_losses_weights_and_metrics_equal_tensorflow(real_tf, where):
    ours, theirs = _twins(real_tf, _two_outputs, where)
    labels = (X[:, 0] > 0).astype(np.int32) + (X[:, 1] > 1).astype(np.int32)
    values = X[:, 2:3] * 2
    _compile_both(ours, theirs, real_tf, where, lambda k: k.keras.optimizers.SGD(0.05),
                  lambda k: {"klass": k.keras.losses.SparseCategoricalCrossentropy(from_logits=True), "value": "mse"},
                  lambda k: {"klass": ["accuracy"], "value": [k.keras.metrics.MeanAbsoluteError()]},
                  loss_weights={"klass": 1.0, "value": 0.5})
    with _scope(where):
        h_ours = ours.fit(X, [labels, values], batch_size=16, epochs=2, shuffle=False, verbose=0)
        e_ours = ours.evaluate(X, [labels, values], batch_size=16, verbose=0, return_dict=True)
    h_theirs = theirs.fit(X, [labels, values], batch_size=16, epochs=2, shuffle=False, verbose=0)
    # Keras 2 (which popjit follows) names per-output entries by layer: klass_loss, value_mean_absolute_error
    assert set(h_ours.history) == {"loss", "klass_loss", "value_loss", "klass_accuracy",
                                   "value_mean_absolute_error"}
    np.testing.assert_allclose(h_ours.history["loss"], h_theirs.history["loss"], rtol=2e-5)
    np.testing.assert_allclose(h_ours.history["klass_accuracy"], h_theirs.history["klass_accuracy"], rtol=2e-5)
    np.testing.assert_allclose(h_ours.history["value_mean_absolute_error"],
                               h_theirs.history["value_mean_absolute_error"], rtol=2e-5)
    theirs_eval = theirs.evaluate(X, [labels, values], batch_size=16, verbose=0, return_dict=True)
    np.testing.assert_allclose(e_ours["loss"], theirs_eval["loss"], rtol=2e-5)


@pytest.mark.parametrize("where", ["host", "ipu"])
def test__datasets__train_evaluate_and_predict_as_arrays_do(real_tf, where):
    ours, theirs = _twins(real_tf, _mlp, where)
    _compile_both(ours, theirs, real_tf, where, ADAM, SPARSE_CE, ["accuracy"])
    with _scope(where):
        dataset = pj.data.Dataset.from_tensor_slices((X, Y)).batch(16, drop_remainder=True)
        h_ours = ours.fit(dataset, epochs=2, verbose=0, validation_data=dataset, shuffle=False)
        p_ours = ours.predict(dataset.map(lambda x, y: x))
    dataset = real_tf.data.Dataset.from_tensor_slices((X, Y)).batch(16, drop_remainder=True)
    h_theirs = theirs.fit(dataset, epochs=2, verbose=0, validation_data=dataset, shuffle=False)
    _close(h_ours.history, h_theirs.history)
    np.testing.assert_allclose(p_ours, theirs.predict(dataset.map(lambda x, y: x), verbose=0), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("where", ["host", "ipu"])
def test__on_batch_methods__equal_tensorflow(real_tf, where):
    ours, theirs = _twins(real_tf, _mlp, where)
    _compile_both(ours, theirs, real_tf, where, ADAM, SPARSE_CE, ["accuracy"])
    for start in (0, 16, 32):
        batch = (X[start:start + 16], Y[start:start + 16])
        with _scope(where):
            got = ours.train_on_batch(*batch, return_dict=True)
        _close(got, theirs.train_on_batch(*batch, return_dict=True))
    with _scope(where):
        got = ours.test_on_batch(X[:16], Y[:16])
        out = ours.predict_on_batch(X[:16])
    np.testing.assert_allclose(got, theirs.test_on_batch(X[:16], Y[:16]), rtol=2e-5)
    np.testing.assert_allclose(out, np.asarray(theirs.predict_on_batch(X[:16])), rtol=1e-4, atol=1e-5)


def test__float64_data__is_cast_to_float32_and_trains_as_float32_data_does():
    losses = []
    for data in (X, X.astype(np.float64)):
        pj.keras.backend.clear_session()
        with _scope("ipu"):
            model = _mlp(pj)
            model.set_weights([np.full(w.shape, 0.1, np.float32) for w in model.get_weights()])
            model.compile("sgd", SPARSE_CE(pj), steps_per_execution=3)
            losses.append(model.fit(data, Y, batch_size=32, verbose=0, shuffle=False).history["loss"])
    assert losses[0] == losses[1]


# -- one program per mode on the IPU -------------------------------------------------------------------
def test__ipu__each_mode_is_one_program_reused_across_epochs_and_calls():
    with _scope("ipu"):
        model = _mlp(pj)
        model.compile(ADAM(pj), SPARSE_CE(pj), ["accuracy"], steps_per_execution=3)
        before = cache.stats["compilations"]
        model.fit(X, Y, batch_size=16, epochs=3, verbose=0)
        assert cache.stats["compilations"] - before == 1
        model.fit(X, Y, batch_size=16, epochs=2, verbose=0)
        model.evaluate(X, Y, batch_size=16, verbose=0)
        model.evaluate(X, Y, batch_size=16, verbose=0)
        assert cache.stats["compilations"] - before == 2
        model.predict(X, batch_size=16)
        model.predict(X, batch_size=16)
        assert cache.stats["compilations"] - before == 3
        programs = [k for k in model._functions if k[0] == "device"]
    assert sorted((k[1], k[-1]) for k in programs) == [("predict", 3), ("test", 3), ("train", 3)]


class Recorder(pj.keras.callbacks.Callback):
    """Every hook Keras calls, in order, with the batch or epoch number."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __getattribute__(self, name):
        attr = object.__getattribute__(self, name)
        if name.startswith("on_") and callable(attr):
            def record(*args, **kwargs):
                number = [a for a in args if isinstance(a, int)]
                self.calls.append((name, *number))
                return attr(*args, **kwargs)
            return record
        return attr


@pytest.mark.parametrize("asynchronous", [False, True])
def test__ipu__per_batch_callbacks_fire_once_per_execution_or_per_step_when_asynchronous(asynchronous):
    recorder = Recorder()
    with _scope("ipu"):
        model = _mlp(pj)
        model.compile(ADAM(pj), SPARSE_CE(pj), steps_per_execution=2)
        model.set_asynchronous_callbacks(asynchronous)
        model.fit(X, Y, batch_size=16, epochs=1, verbose=0, callbacks=[recorder])
    ends = [c for c in recorder.calls if c[0] == "on_train_batch_end"]
    assert ends == ([("on_train_batch_end", b) for b in range(6)] if asynchronous else
                    [("on_train_batch_end", 1), ("on_train_batch_end", 3), ("on_train_batch_end", 5)])
    assert [c for c in recorder.calls if c[0] == "on_train_batch_begin"] == \
        [("on_train_batch_begin", b) for b in (0, 2, 4)]


def test__host__callbacks_see_every_hook_in_kerass_order(real_tf):
    ours, theirs = _twins(real_tf, _mlp, "host")
    _compile_both(ours, theirs, real_tf, "host", ADAM, SPARSE_CE)
    recorded = []
    for lib, model in ((pj, ours), (real_tf, theirs)):
        class Hooks(lib.keras.callbacks.Callback):
            pass
        names = [n for n in dir(lib.keras.callbacks.Callback) if n.startswith("on_")]
        hooks = Hooks()
        calls = []
        for n in names:
            setattr(hooks, n, lambda *a, _n=n, _calls=calls, **k: _calls.append(
                (_n, *[x for x in a if isinstance(x, int)])))
        model.fit(X[:64], Y[:64], batch_size=32, epochs=2, verbose=0, validation_data=(X[64:], Y[64:]),
                  callbacks=[hooks])
        model.evaluate(X[:32], Y[:32], batch_size=32, verbose=0, callbacks=[hooks])
        model.predict(X[:32], batch_size=32, callbacks=[hooks])
        recorded.append(calls)
    assert recorded[0] == recorded[1]


# -- callbacks ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("where", ["host", "ipu"])
def test__learning_rate_scheduler_and_early_stopping__equal_tensorflow(real_tf, where):
    ours, theirs = _twins(real_tf, _mlp, where)
    _compile_both(ours, theirs, real_tf, where, lambda k: k.keras.optimizers.SGD(0.3), SPARSE_CE)
    histories = []
    for lib, model in ((pj, ours), (real_tf, theirs)):
        callbacks = [lib.keras.callbacks.LearningRateScheduler(lambda epoch, lr: lr * 0.5),
                     lib.keras.callbacks.EarlyStopping(monitor="loss", patience=1, min_delta=0.05)]
        with _scope(where) if lib is pj else contextlib.nullcontext():
            histories.append(model.fit(X, Y, batch_size=16, epochs=12, shuffle=False, verbose=0,
                                       callbacks=callbacks).history)
    assert len(histories[0]["loss"]) < 12  # early stopping stopped it
    _close(*histories)


def test__reduce_lr_on_plateau_and_terminate_on_nan(real_tf):
    ours, theirs = _twins(real_tf, _mlp, "host")
    _compile_both(ours, theirs, real_tf, "host", lambda k: k.keras.optimizers.SGD(0.1), SPARSE_CE)
    histories = []
    for lib, model in ((pj, ours), (real_tf, theirs)):
        plateau = lib.keras.callbacks.ReduceLROnPlateau(monitor="loss", factor=0.5, patience=1, min_delta=0.2)
        histories.append(model.fit(X, Y, batch_size=16, epochs=6, shuffle=False, verbose=0,
                                   callbacks=[plateau]).history)
    _close(*histories)
    assert min(histories[0]["lr"]) < 0.1
    model = _mlp(pj, outputs=1)
    model.compile(pj.keras.optimizers.SGD(1e30), "mse")
    h = model.fit(X, Y.astype(np.float32), batch_size=16, epochs=5, verbose=0,
                  callbacks=[pj.keras.callbacks.TerminateOnNaN()])
    assert len(h.history["loss"]) == 1 and not np.isfinite(h.history["loss"][0])


def test__csv_logger_and_lambda_callback(tmp_path):
    seen = []
    model = _mlp(pj)
    model.compile("adam", SPARSE_CE(pj), ["accuracy"])
    path = tmp_path / "log.csv"
    h = model.fit(X, Y, batch_size=32, epochs=3, verbose=0, callbacks=[
        pj.keras.callbacks.CSVLogger(str(path)),
        pj.keras.callbacks.LambdaCallback(on_epoch_end=lambda epoch, logs: seen.append((epoch, logs["loss"])))])
    rows = path.read_text().splitlines()
    assert rows[0] == "epoch,accuracy,loss"
    for epoch, row in enumerate(rows[1:]):
        fields = row.split(",")
        assert int(fields[0]) == epoch
        assert float(fields[2]) == pytest.approx(h.history["loss"][epoch], rel=1e-6)
    assert seen == list(enumerate(h.history["loss"]))


# -- the progress bar ------------------------------------------------------------------------------------
def test__progress_bar__advances_per_execution_and_shows_the_metrics(capsys):
    with _scope("ipu"):
        model = _mlp(pj)
        model.compile(ADAM(pj), SPARSE_CE(pj), ["accuracy"], steps_per_execution=3)
        h = model.fit(X, Y, batch_size=16, epochs=2, verbose=1)
    out = capsys.readouterr().out
    assert "Epoch 1/2" in out and "Epoch 2/2" in out
    final = [line for line in out.replace("\r", "\n").splitlines() if line.startswith("6/6")]
    assert len(final) == 2
    loss = float(final[-1].split("loss: ")[1].split()[0])
    assert loss == pytest.approx(h.history["loss"][-1], abs=1e-4)


def test__verbose_2__prints_one_line_per_epoch(capsys):
    model = _mlp(pj)
    model.compile("adam", SPARSE_CE(pj))
    model.fit(X, Y, batch_size=32, epochs=2, verbose=2)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert lines[0] == "Epoch 1/2" and lines[2] == "Epoch 2/2"
    assert lines[1].startswith("3/3 - ") and " - loss: " in lines[1] and "=" not in lines[1]
