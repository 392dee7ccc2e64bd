"""Weight files: ``save_weights`` / ``load_weights`` in Keras 2's HDF5 layout (``.h5``) and Keras 3's
(``.weights.h5``), between popjit models, and between popjit and stock Keras in both directions
(same predictions); ``ModelCheckpoint``; the errors. Real files in temporary directories."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

import popjit.tensorflow as pj
from popjit import ipu

X_SEQ = np.random.default_rng(0).normal(size=(3, 6, 4)).astype(np.float32)
X_IMG = np.random.default_rng(1).normal(size=(2, 8, 8, 3)).astype(np.float32)


def sequence_model(tf: Any) -> Any:
    """A functional model with nested layers (Bidirectional LSTM, attention) and moving statistics."""
    inp = tf.keras.Input((6, 4), name="tokens")
    x = tf.keras.layers.Bidirectional(tf.keras.layers.LSTM(3, return_sequences=True), name="bi")(inp)
    x = tf.keras.layers.MultiHeadAttention(2, 3, name="attention")(x, x)
    x = tf.keras.layers.GRU(4, name="gru")(x)
    x = tf.keras.layers.BatchNormalization(name="norm")(x)
    return tf.keras.Model(inp, tf.keras.layers.Dense(2, name="logits")(x))


def image_model(tf: Any) -> Any:
    return tf.keras.Sequential([
        tf.keras.Input((8, 8, 3)),
        tf.keras.layers.Conv2D(4, 3, name="conv"),
        tf.keras.layers.BatchNormalization(name="bn"),
        tf.keras.layers.MaxPooling2D(name="pool"),
        tf.keras.layers.DepthwiseConv2D(3, name="depthwise"),
        tf.keras.layers.Flatten(name="flat"),
        tf.keras.layers.Dense(3, name="dense"),
    ])


def randomize(model: Any, seed: int) -> None:
    """New weights everywhere (moving variances kept positive)."""
    rng = np.random.default_rng(seed)
    model.set_weights([np.abs(rng.normal(size=w.shape)).astype(np.float32) + 0.5 if "variance" in v.name
                       else rng.normal(size=w.shape).astype(np.float32)
                       for v, w in zip(model.weights, model.get_weights())])


BUILDERS = {"sequence": (sequence_model, X_SEQ), "image": (image_model, X_IMG)}


@pytest.mark.parametrize("suffix", [".h5", ".weights.h5"])
@pytest.mark.parametrize("kind", list(BUILDERS))
def test__popjit_weights__round_trip(tmp_path: Path, suffix: str, kind: str) -> None:
    build, x = BUILDERS[kind]
    source, target = build(pj), build(pj)
    randomize(source, 2)
    source.save_weights(tmp_path / f"w{suffix}")
    target.load_weights(tmp_path / f"w{suffix}")
    for got, want in zip(target.get_weights(), source.get_weights(), strict=True):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(target(x).numpy(), source(x).numpy())


@pytest.mark.parametrize("suffix", [".h5", ".weights.h5"])
@pytest.mark.parametrize("kind", list(BUILDERS))
def test__weights_saved_by_popjit__load_in_stock_keras(tmp_path: Path, real_tf: Any, suffix: str,
                                                        kind: str) -> None:
    build, x = BUILDERS[kind]
    ours, theirs = build(pj), build(real_tf)
    randomize(ours, 3)
    ours.save_weights(str(tmp_path / f"w{suffix}"))
    theirs.load_weights(str(tmp_path / f"w{suffix}"))
    np.testing.assert_allclose(theirs(x).numpy(), ours(x).numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("how", ["save_weights .weights.h5", "model.save .h5"])
@pytest.mark.parametrize("kind", list(BUILDERS))
def test__files_saved_by_stock_keras__load_in_popjit(tmp_path: Path, real_tf: Any, how: str, kind: str) -> None:
    build, x = BUILDERS[kind]
    ours, theirs = build(pj), build(real_tf)
    randomize(theirs, 4)
    path = str(tmp_path / ("w.weights.h5" if how.startswith("save_weights") else "model.h5"))
    theirs.save_weights(path) if how.startswith("save_weights") else theirs.save(path)
    ours.load_weights(path)
    np.testing.assert_allclose(ours(x).numpy(), theirs(x).numpy(), rtol=1e-5, atol=1e-5)


def test__keras2_file__has_the_sdk_layout(tmp_path: Path) -> None:
    model = image_model(pj)
    model.save_weights(tmp_path / "w.h5")
    with h5py.File(tmp_path / "w.h5") as f:
        assert [n.decode() for n in f.attrs["layer_names"]] == [layer.name for layer in model.layers]
        assert (f.attrs["keras_version"], f.attrs["backend"]) == ("2.6.0", "tensorflow")
        names = [n.decode() for n in f["bn"].attrs["weight_names"]]
        assert names == ["bn/gamma:0", "bn/beta:0", "bn/moving_mean:0", "bn/moving_variance:0"]
        np.testing.assert_array_equal(f["conv"]["conv/kernel:0"][()], model.get_layer("conv").kernel.numpy())
        assert list(f["flat"].attrs["weight_names"]) == []


def test__by_name__loads_matching_layers_and_skip_mismatch_skips_the_rest(tmp_path: Path) -> None:
    source = pj.keras.Sequential([pj.keras.Input((4,)), pj.keras.layers.Dense(3, name="a"),
                                  pj.keras.layers.Dense(2, name="b")])
    randomize(source, 5)
    source.save_weights(tmp_path / "w.h5")
    target = pj.keras.Sequential([pj.keras.Input((4,)), pj.keras.layers.Dense(5, name="b"),
                                  pj.keras.layers.Dense(3, name="other"), pj.keras.layers.Dense(3, name="a")])
    before = target.get_layer("b").get_weights()
    with pytest.raises(ValueError, match="Shape mismatch in layer named b"):
        target.load_weights(tmp_path / "w.h5", by_name=True)
    target.load_weights(tmp_path / "w.h5", by_name=True, skip_mismatch=True)
    np.testing.assert_array_equal(target.get_layer("b").get_weights()[0], before[0])
    with pytest.raises(ValueError, match="skip_mismatch can only be set to True when by_name is True"):
        target.load_weights(tmp_path / "w.h5", skip_mismatch=True)


def test__a_file_for_another_model__is_refused_without_changing_weights(tmp_path: Path) -> None:
    small = pj.keras.Sequential([pj.keras.Input((4,)), pj.keras.layers.Dense(3)])
    small.save_weights(tmp_path / "small.h5")
    small.save_weights(tmp_path / "small.weights.h5")
    big = image_model(pj)
    before = big.get_weights()
    with pytest.raises(ValueError, match=r"Layer count mismatch when loading weights from file\. Model expected 4 "
                                         r"layers, found 1 saved layers\."):
        big.load_weights(tmp_path / "small.h5")
    other = pj.keras.Sequential([pj.keras.Input((5,)), pj.keras.layers.Dense(3)])
    with pytest.raises(ValueError, match=r"Shape mismatch in layer #0 .* \(5, 3\), the saved weight has shape "
                                         r"\(4, 3\)"):
        other.load_weights(tmp_path / "small.h5")
    with pytest.raises(ValueError, match="do not match"):
        other.load_weights(tmp_path / "small.weights.h5")
    for got, want in zip(big.get_weights(), before, strict=True):
        np.testing.assert_array_equal(got, want)


def test__weight_file_errors(tmp_path: Path) -> None:
    model = pj.keras.Sequential([pj.keras.Input((4,)), pj.keras.layers.Dense(3)])
    with pytest.raises(ValueError, match="Unknown format"):
        model.save_weights(tmp_path / "w.h5", save_format="pb")
    with pytest.raises(FileNotFoundError):
        model.load_weights(tmp_path / "missing.h5")
    model.save_weights(tmp_path / "w.h5")
    with pytest.raises(FileExistsError):
        model.save_weights(tmp_path / "w.h5", overwrite=False)


def test__weights_trained_on_the_ipu__save_and_load_inside_the_scope(tmp_path: Path) -> None:
    strategy = ipu.ipu_strategy.IPUStrategy()
    x, y = X_IMG.repeat(8, axis=0), (np.arange(16) % 3).astype(np.int32)
    with strategy.scope():
        model = image_model(pj)
        model.compile("sgd", pj.keras.losses.SparseCategoricalCrossentropy(from_logits=True), steps_per_execution=2)
        model.fit(x, y, batch_size=4, epochs=1, verbose=0)
        model.save_weights(str(tmp_path / "w.h5"))
        reloaded = image_model(pj)
        reloaded.load_weights(str(tmp_path / "w.h5"))
        np.testing.assert_array_equal(reloaded.predict(x, batch_size=4), model.predict(x, batch_size=4))


def test__model_checkpoint__saves_each_epoch_or_the_best(tmp_path: Path, capsys: Any) -> None:
    x = np.random.default_rng(6).normal(size=(32, 4)).astype(np.float32)
    y = x @ np.arange(4, dtype=np.float32)
    model = pj.keras.Sequential([pj.keras.Input((4,)), pj.keras.layers.Dense(1)])
    model.compile(pj.keras.optimizers.SGD(0.05), "mse")
    every = pj.keras.callbacks.ModelCheckpoint(str(tmp_path / "e{epoch:02d}-{loss:.3f}.h5"), save_weights_only=True)
    lr = {"value": 0.05}

    def wobble(epoch: int, logs: dict) -> None:  # epoch 3 gets worse: save_best_only skips it
        lr["value"] = 1.2 if epoch == 1 else 0.05
        pj.keras.backend.set_value(model.optimizer.lr, lr["value"])

    best = pj.keras.callbacks.ModelCheckpoint(str(tmp_path / "best.weights.h5"), monitor="loss", verbose=1,
                                              save_best_only=True, save_weights_only=True)
    history = model.fit(x, y, batch_size=8, epochs=4, verbose=0, shuffle=False,
                        callbacks=[every, best, pj.keras.callbacks.LambdaCallback(on_epoch_end=wobble)])
    losses = history.history["loss"]
    names = sorted(p.name for p in tmp_path.glob("e*.h5"))
    assert names == [f"e{e + 1:02d}-{loss:.3f}.h5" for e, loss in enumerate(losses)]
    printed = capsys.readouterr().out
    assert "Epoch 00001: loss improved from inf to" in printed
    assert printed.count("did not improve") == sum(b >= min(losses[:i]) for i, b in enumerate(losses) if i)
    best_epoch = int(np.argmin(losses))
    restored = pj.keras.Sequential([pj.keras.Input((4,)), pj.keras.layers.Dense(1)])
    restored.load_weights(str(tmp_path / "best.weights.h5"))
    at_best = pj.keras.Sequential([pj.keras.Input((4,)), pj.keras.layers.Dense(1)])
    at_best.load_weights(str(tmp_path / names[best_epoch]))
    np.testing.assert_array_equal(restored.get_weights()[0], at_best.get_weights()[0])


def test__model_checkpoint__saves_whole_models_and_refuses_bad_frequencies(tmp_path: Path) -> None:
    model = image_model(pj)
    model.compile("sgd", "sparse_categorical_crossentropy")
    checkpoint = pj.keras.callbacks.ModelCheckpoint(str(tmp_path / "m{epoch}.h5"))
    model.fit(X_IMG, np.array([0, 2], np.int32), epochs=2, verbose=0, callbacks=[checkpoint])
    reloaded = pj.keras.models.load_model(str(tmp_path / "m2.h5"))
    np.testing.assert_array_equal(reloaded(X_IMG).numpy(), model(X_IMG).numpy())
    with pytest.raises(ValueError, match="Unrecognized save_freq"):
        pj.keras.callbacks.ModelCheckpoint(str(tmp_path / "m.h5"), save_weights_only=True, save_freq="batch")


def compiled_image_model(tf: Any) -> Any:
    model = image_model(tf)
    model.compile(tf.keras.optimizers.Adam(0.02), "sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


def test__whole_model__round_trips_and_trains_on_as_before(tmp_path: Path) -> None:
    labels = np.array([1, 0], np.int32)
    model = compiled_image_model(pj)
    randomize(model, 7)
    model.save(tmp_path / "m.h5")
    reloaded = pj.keras.models.load_model(tmp_path / "m.h5")
    assert type(reloaded.optimizer).__name__ == "Adam"
    assert reloaded.optimizer.get_config()["learning_rate"] == pytest.approx(0.02)
    np.testing.assert_array_equal(reloaded(X_IMG).numpy(), model(X_IMG).numpy())
    for m in (model, reloaded):
        m.fit(X_IMG, labels, epochs=1, verbose=0)
    for got, want in zip(reloaded.get_weights(), model.get_weights(), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    uncompiled = pj.keras.models.load_model(tmp_path / "m.h5", compile=False)
    assert not getattr(uncompiled, "_is_compiled", False)


def test__whole_model_saved_by_popjit__loads_in_stock_keras(tmp_path: Path, real_tf: Any) -> None:
    model = compiled_image_model(pj)
    randomize(model, 8)
    model.save(str(tmp_path / "m.h5"))
    theirs = real_tf.keras.models.load_model(str(tmp_path / "m.h5"))
    np.testing.assert_allclose(theirs(X_IMG).numpy(), model(X_IMG).numpy(), rtol=1e-5, atol=1e-5)
    assert type(theirs.optimizer).__name__ == "Adam"


def test__whole_model_saved_by_stock_keras__loads_weights_too(tmp_path: Path, real_tf: Any) -> None:
    theirs = compiled_image_model(real_tf)
    randomize(theirs, 9)
    theirs.save(str(tmp_path / "keras3.h5"))
    ours = image_model(pj)
    ours.load_weights(str(tmp_path / "keras3.h5"))
    np.testing.assert_allclose(ours(X_IMG).numpy(), theirs(X_IMG).numpy(), rtol=1e-5, atol=1e-5)
