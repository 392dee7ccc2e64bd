"""Whole models: functional and Sequential configs (``get_config``/``from_config``, ``to_json``), ``model.save`` /
``load_model`` in Keras 2's ``.h5`` and Keras 3's ``.keras``, both ways with stock Keras 3 (equal predictions,
optimizer state and compile settings), the user's own classes, subclassed models, and the IPU options a model
keeps inside the strategy's scope. Real files in temporary directories."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import popjit.tensorflow as pj
from popjit import ipu
from popjit.errors import UnimplementedError
from popjit.keras import saving
from tests.keras_api.test_saving import X_IMG, X_SEQ, image_model, randomize, sequence_model

X4 = np.random.default_rng(10).normal(size=(6, 4)).astype(np.float32)
Y4 = (np.arange(6) % 2).astype(np.int32)


def branchy_model(tf: Any) -> Any:
    """A functional model with a fork, a shared layer and a join."""
    inp = tf.keras.Input((4,), name="x")
    shared = tf.keras.layers.Dense(4, activation="tanh", name="shared")
    a = tf.keras.layers.Dense(3, activation="relu", name="a")(shared(inp))
    b = shared(shared(inp))
    joined = tf.keras.layers.Concatenate(name="join")([a, b])
    return tf.keras.Model(inp, tf.keras.layers.Dense(2, name="logits")(joined), name="branchy")


def trained(model: Any, tf: Any, x: np.ndarray, y: np.ndarray) -> Any:
    """``model`` compiled with Adam (so it has optimizer state) and trained a step."""
    model.compile(tf.keras.optimizers.Adam(0.01), "sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(x, y, batch_size=len(x), epochs=1, verbose=0)
    return model


def optimizer_state(model: Any) -> list[np.ndarray]:
    return [np.asarray(v.numpy() if hasattr(v, "numpy") else v) for v in model.optimizer.variables]


def keras3_state(model: Any) -> list[np.ndarray]:
    """popjit's optimizer state in Keras 3's order (step, learning rate, slots)."""
    return [v.numpy() for v in saving.keras3_optimizer_variables(model.optimizer, model.trainable_variables)]


def test__functional_config__round_trips_and_rebuilds_the_same_graph() -> None:
    model = branchy_model(pj)
    randomize(model, 1)
    config = model.get_config()
    assert config["input_layers"] == [["x", 0, 0]] and config["output_layers"] == [["logits", 0, 0]]
    shared = next(layer for layer in config["layers"] if layer["name"] == "shared")
    assert shared["inbound_nodes"] == [[["x", 0, 0, {}]], [["x", 0, 0, {}]], [["shared", 1, 0, {}]]]
    rebuilt = pj.keras.Model.from_config(config)
    assert [layer.name for layer in rebuilt.layers] == [layer.name for layer in model.layers]
    rebuilt.set_weights(model.get_weights())
    np.testing.assert_array_equal(rebuilt(X4).numpy(), model(X4).numpy())
    again = pj.keras.models.model_from_json(model.to_json())
    assert json.loads(again.to_json())["config"] == json.loads(model.to_json())["config"]


def test__stock_keras_json__is_read_by_model_from_json(real_tf: Any) -> None:
    theirs = branchy_model(real_tf)
    ours = pj.keras.models.model_from_json(theirs.to_json())
    assert [layer.name for layer in ours.layers] == [layer.name for layer in theirs.layers]
    ours.set_weights(theirs.get_weights())
    np.testing.assert_allclose(ours(X4).numpy(), theirs(X4).numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("suffix", [".keras", ".h5"])
@pytest.mark.parametrize("build", [branchy_model, image_model], ids=["functional", "sequential"])
def test__whole_model__round_trips_with_optimizer_state(tmp_path: Path, suffix: str, build: Any) -> None:
    x = X4 if build is branchy_model else X_IMG.repeat(3, axis=0)
    model = trained(build(pj), pj, x, Y4[:len(x)] % 2)
    model.save(tmp_path / f"m{suffix}")
    reloaded = pj.keras.models.load_model(tmp_path / f"m{suffix}")
    np.testing.assert_array_equal(reloaded(x).numpy(), model(x).numpy())
    assert reloaded.optimizer.get_config() == model.optimizer.get_config()
    assert reloaded.compiled_metrics.user_metrics == ["accuracy"] and reloaded.loss == model.loss
    for got, want in zip(reloaded.optimizer.weights, model.optimizer.weights, strict=True):
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    for m in (model, reloaded):  # the next step is the same: the Adam moments came back too
        m.fit(x, Y4[:len(x)] % 2, batch_size=len(x), epochs=1, verbose=0, shuffle=False)
    for got, want in zip(reloaded.get_weights(), model.get_weights(), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test__keras_file__has_keras3s_layout(tmp_path: Path) -> None:
    model = trained(branchy_model(pj), pj, X4, Y4)
    model.save(tmp_path / "m.keras")
    with zipfile.ZipFile(tmp_path / "m.keras") as z:
        assert sorted(z.namelist()) == ["config.json", "metadata.json", "model.weights.h5"]
        config = json.loads(z.read("config.json"))
    assert (config["module"], config["class_name"]) == ("keras.src.models.functional", "Functional")
    dense = next(layer for layer in config["config"]["layers"] if layer["name"] == "logits")
    assert dense["config"]["dtype"]["class_name"] == "DTypePolicy"
    assert dense["inbound_nodes"][0]["args"][0]["config"]["keras_history"] == ["join", 0, 0]
    assert config["compile_config"]["optimizer"]["class_name"] == "Adam"


@pytest.mark.parametrize("suffix", [".keras", ".h5"])
@pytest.mark.parametrize("kind", ["functional", "sequential", pytest.param("nested layers", marks=pytest.mark.slow)])
def test__whole_model_saved_by_popjit__loads_in_stock_keras(tmp_path: Path, real_tf: Any, suffix: str,
                                                             kind: str) -> None:
    if kind == "nested layers" and suffix == ".h5":
        pytest.skip("stock Keras 3 cannot read a Bidirectional layer's Keras 2 config (its own legacy loader)")
    build, x = {"functional": (branchy_model, X4), "sequential": (image_model, X_IMG),
                "nested layers": (sequence_model, X_SEQ)}[kind]
    model = trained(build(pj), pj, x, (np.arange(len(x)) % 2).astype(np.int32))
    model.save(str(tmp_path / f"m{suffix}"))
    theirs = real_tf.keras.models.load_model(str(tmp_path / f"m{suffix}"))
    np.testing.assert_allclose(theirs(x).numpy(), model(x).numpy(), rtol=1e-5, atol=1e-5)
    assert type(theirs.optimizer).__name__ == "Adam"
    assert float(theirs.optimizer.learning_rate.numpy()) == pytest.approx(0.01)
    if suffix == ".keras":  # Keras 3 reads its optimizer state only from its own format
        for got, want in zip(optimizer_state(theirs), keras3_state(model), strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("suffix", [".keras", ".h5"])
@pytest.mark.parametrize("kind", ["functional", "sequential", pytest.param("nested layers", marks=pytest.mark.slow)])
def test__whole_model_saved_by_stock_keras__loads_in_popjit(tmp_path: Path, real_tf: Any, suffix: str,
                                                             kind: str) -> None:
    build, x = {"functional": (branchy_model, X4), "sequential": (image_model, X_IMG),
                "nested layers": (sequence_model, X_SEQ)}[kind]
    theirs = trained(build(real_tf), real_tf, x, (np.arange(len(x)) % 2).astype(np.int32))
    theirs.save(str(tmp_path / f"m{suffix}"))
    ours = pj.keras.models.load_model(str(tmp_path / f"m{suffix}"))
    np.testing.assert_allclose(ours(x).numpy(), theirs(x).numpy(), rtol=1e-5, atol=1e-5)
    assert ours.optimizer.get_config()["learning_rate"] == pytest.approx(0.01)
    assert ours.compiled_metrics.user_metrics == ["accuracy"]
    if suffix == ".keras":
        for got, want in zip(keras3_state(ours), optimizer_state(theirs), strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-6)


@pj.keras.utils.register_keras_serializable(package="Tests")
class Scale(pj.keras.layers.Layer):
    """A custom layer: multiplies by a learned scalar."""

    def __init__(self, init: float = 2.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.init = init

    def build(self, input_shape: Any) -> None:
        self.scale = self.add_weight("scale", (), initializer=pj.keras.initializers.Constant(self.init))
        super().build(input_shape)

    def call(self, inputs: Any) -> Any:
        return inputs * self.scale

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "init": self.init}


class Shift(pj.keras.layers.Layer):
    """A custom layer found only through ``custom_objects``."""

    def call(self, inputs: Any) -> Any:
        return inputs + 1.0


@pytest.mark.parametrize("suffix", [".keras", ".h5"])
def test__custom_layers__load_when_registered_or_passed(tmp_path: Path, suffix: str) -> None:
    inp = pj.keras.Input((4,))
    model = pj.keras.Model(inp, Shift(name="shift")(Scale(3.0, name="scale")(inp)))
    model.save(tmp_path / f"m{suffix}")
    with pytest.raises(ValueError, match="Unknown layer: Shift"):
        pj.keras.models.load_model(tmp_path / f"m{suffix}")
    reloaded = pj.keras.models.load_model(tmp_path / f"m{suffix}", custom_objects={"Shift": Shift})
    assert isinstance(reloaded.get_layer("scale"), Scale) and reloaded.get_layer("scale").init == 3.0
    np.testing.assert_array_equal(reloaded(X4).numpy(), X4 * 3.0 + 1.0)
    with pj.keras.utils.custom_object_scope({"Shift": Shift}):
        np.testing.assert_array_equal(pj.keras.models.load_model(tmp_path / f"m{suffix}")(X4).numpy(),
                                      X4 * 3.0 + 1.0)


class Tower(pj.keras.Model):
    """A subclassed model with a config."""

    def __init__(self, width: int = 3, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.width = width
        self.hidden = pj.keras.layers.Dense(width, activation="relu")
        self.out = pj.keras.layers.Dense(2)

    def call(self, inputs: Any) -> Any:
        return self.out(self.hidden(inputs))

    def get_config(self) -> dict[str, Any]:
        return {"width": self.width, "name": self.name}


class Bare(pj.keras.Model):
    """A subclassed model without a config."""

    def __init__(self) -> None:
        super().__init__()
        self.dense = pj.keras.layers.Dense(2)

    def call(self, inputs: Any) -> Any:
        return self.dense(inputs)


def test__subclassed_models__save_as_keras_does(tmp_path: Path) -> None:
    tower = Tower(5)
    tower(X4)
    randomize(tower, 3)
    tower.save(tmp_path / "tower.keras")
    reloaded = pj.keras.models.load_model(tmp_path / "tower.keras", custom_objects={"Tower": Tower})
    assert reloaded.width == 5
    np.testing.assert_array_equal(reloaded(X4).numpy(), tower(X4).numpy())
    with pytest.raises(NotImplementedError, match="requires the model to be a Functional model or a Sequential"):
        tower.save(tmp_path / "tower.h5")
    bare = Bare()
    bare(X4)
    with pytest.raises(NotImplementedError, match="Implement `get_config\\(\\)` and `from_config\\(\\)`"):
        bare.save(tmp_path / "bare.keras")
    assert not (tmp_path / "bare.keras").exists()
    assert not list(tmp_path.glob(".*tmp*"))


def test__whole_model_errors(tmp_path: Path) -> None:
    model = image_model(pj)
    with pytest.raises(UnimplementedError, match="SavedModel format is not implemented"):
        model.save(tmp_path / "saved_model_dir")
    model.save_weights(tmp_path / "weights.h5")
    with pytest.raises(ValueError, match="No model config found"):
        pj.keras.models.load_model(tmp_path / "weights.h5")
    with pytest.raises(OSError, match="No file or directory found"):
        pj.keras.models.load_model(tmp_path / "missing.keras")
    model.save(tmp_path / "m.keras")
    with pytest.raises(FileExistsError):
        model.save(tmp_path / "m.keras", overwrite=False)


def test__ipu_options__survive_save_and_load_inside_the_scope(tmp_path: Path) -> None:
    strategy = ipu.ipu_strategy.IPUStrategy()
    with strategy.scope():
        model = branchy_model(pj)
        model.set_gradient_accumulation_options(gradient_accumulation_steps_per_replica=2,
                                                gradient_accumulation_reduction_method="mean")
        model.set_asynchronous_callbacks(True)
        model.set_infeed_queue_options(prefetch_depth=3)
        model.set_outfeed_queue_options(buffer_depth=2)
        config = model.get_config()
        assert (config["gradient_accumulation_steps_per_replica"], config["gradient_accumulation_reduction_method"],
                config["asynchronous_callbacks"], config["infeed_kwargs"], config["outfeed_kwargs"]) == \
            (2, 1, True, {"prefetch_depth": 3}, {"buffer_depth": 2})
        for path in (tmp_path / "m.h5", tmp_path / "m.keras"):
            model.save(path)
            reloaded = pj.keras.models.load_model(path)
            assert reloaded._ipu_config() == model._ipu_config()
        sequential = image_model(pj)
        sequential.set_gradient_accumulation_options(gradient_accumulation_steps_per_replica=4)
        again = pj.keras.Sequential.from_config(sequential.get_config())
        assert again._ipu_config()["gradient_accumulation_steps_per_replica"] == 4
    outside = pj.keras.models.load_model(tmp_path / "m.h5")  # outside the scope these are not Keras options
    assert getattr(outside, "_gradient_accumulation", None) is None and "infeed_kwargs" not in outside.get_config()


@pytest.mark.parametrize("suffix", [".keras", ".h5"])
def test__sequential_built_by_its_first_call__reloads_with_its_input_shape(tmp_path: Path, real_tf: Any,
                                                                          suffix: str) -> None:
    """A Sequential with no input shape, built by ``fit``: Keras records ``build_input_shape`` in its config,
    so popjit and stock Keras rebuild it and load its weights."""
    model = pj.keras.Sequential([pj.keras.layers.Dense(3, activation="relu"), pj.keras.layers.Dense(2)])
    model.compile(pj.keras.optimizers.SGD(0.1), "sparse_categorical_crossentropy")
    model.fit(X4, (np.arange(len(X4)) % 2).astype(np.int32), batch_size=4, epochs=1, verbose=0)
    assert model.get_config()["build_input_shape"] == [None, X4.shape[1]]
    model.save(str(tmp_path / f"m{suffix}"))
    for loaded in (pj.keras.models.load_model(str(tmp_path / f"m{suffix}")),
                   real_tf.keras.models.load_model(str(tmp_path / f"m{suffix}"))):
        np.testing.assert_allclose(np.asarray(loaded(X4)), model(X4).numpy(), rtol=1e-6, atol=1e-6)
