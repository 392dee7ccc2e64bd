"""``tf.train`` checkpoints in TensorFlow's own file format: popjit's files read by stock TensorFlow
(``tf.train.load_checkpoint``, ``Checkpoint.restore``) and stock TensorFlow's read by popjit; Keras models with
their optimizer state through ``Checkpoint`` and ``save_weights`` without ``.h5``; ``CheckpointManager``; damaged
files. Real files in temporary directories."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import popjit.tensorflow as pj
from popjit.errors import DataLossError, NotFoundError
from popjit.train import tensor_bundle as tb

X = np.random.default_rng(0).normal(size=(8, 4)).astype(np.float32)
Y = X @ np.array([[1.0], [-2.0], [0.5], [3.0]], np.float32)


def small_model() -> Any:
    model = pj.keras.Sequential([pj.keras.Input((4,)), pj.keras.layers.Dense(3, activation="tanh"),
                                 pj.keras.layers.Dense(1)])
    model.compile(pj.keras.optimizers.Adam(0.05), "mse")
    return model


def test__bundle__round_trips_and_stock_tensorflow_reads_it(tmp_path: Path, real_tf: Any) -> None:
    tensors = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "n": np.int64(7), "h": np.float16([1.5, -2]),
               "big": np.random.default_rng(1).normal(size=(300, 40)), "flag": np.array([True, False]),
               "graph": b"bytes"}
    tb.write_bundle(str(tmp_path / "c"), tensors)
    ours, theirs = tb.BundleReader(str(tmp_path / "c")), real_tf.train.load_checkpoint(str(tmp_path / "c"))
    for name, value in tensors.items():
        for got in (ours.get(name), theirs.get_tensor(name)):
            if isinstance(value, bytes):
                assert got == value
            else:
                np.testing.assert_array_equal(got, value)
                assert np.asarray(got).dtype == np.asarray(value).dtype
    assert theirs.get_variable_to_shape_map()["big"] == [300, 40]


def test__keras_checkpoint__restores_model_and_optimizer_and_names_variables_as_tensorflow(tmp_path: Path,
                                                                                            real_tf: Any) -> None:
    model = small_model()
    model.fit(X, Y, batch_size=4, epochs=2, verbose=0)
    prefix = pj.train.Checkpoint(model=model, optimizer=model.optimizer).save(str(tmp_path / "ckpt"))
    assert prefix == str(tmp_path / "ckpt-1")
    reader = real_tf.train.load_checkpoint(prefix)
    np.testing.assert_array_equal(reader.get_tensor("model/layer_with_weights-0/kernel/.ATTRIBUTES/VARIABLE_VALUE"),
                                  model.layers[0].kernel.numpy())
    slot = "model/layer_with_weights-1/bias/.OPTIMIZER_SLOT/optimizer/m/.ATTRIBUTES/VARIABLE_VALUE"
    np.testing.assert_array_equal(reader.get_tensor(slot),
                                  model.optimizer.get_slot(model.layers[1].bias, "m").numpy())
    assert reader.get_tensor("optimizer/iter/.ATTRIBUTES/VARIABLE_VALUE") == 4
    assert real_tf.train.latest_checkpoint(str(tmp_path)) == prefix
    assert [name for name, _ in pj.train.list_variables(str(tmp_path))] == \
        [name for name, _ in real_tf.train.list_variables(prefix)]
    restored = small_model()
    pj.train.Checkpoint(model=restored, optimizer=restored.optimizer).restore(str(tmp_path)).assert_consumed()
    for m in (model, restored):
        m.fit(X, Y, batch_size=4, epochs=1, verbose=0, shuffle=False)
    for got, want in zip(restored.get_weights(), model.get_weights(), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test__variables__restore_both_ways_with_stock_tensorflow(tmp_path: Path, real_tf: Any) -> None:
    theirs = {"v": real_tf.Variable([1.0, 2.0]), "step": real_tf.Variable(5, dtype=real_tf.int64)}
    prefix = real_tf.train.Checkpoint(v=theirs["v"], nested={"step": theirs["step"]}).save(str(tmp_path / "tf"))
    ours = {"v": pj.Variable([0.0, 0.0]), "step": pj.Variable(np.int64(0))}
    pj.train.Checkpoint(v=ours["v"], nested={"step": ours["step"]}).restore(prefix).assert_consumed()
    assert ours["v"].numpy().tolist() == [1.0, 2.0] and int(ours["step"].numpy()) == 5
    ours["v"].assign([7.0, 8.0])
    back = pj.train.Checkpoint(v=ours["v"], nested={"step": ours["step"]}).write(str(tmp_path / "pj"))
    fresh = real_tf.Variable([0.0, 0.0])
    real_tf.train.Checkpoint(v=fresh, nested={"step": real_tf.Variable(0, dtype=real_tf.int64)}).restore(
        back).assert_consumed()
    assert fresh.numpy().tolist() == [7.0, 8.0]


def test__partial_restores_and_mismatches(tmp_path: Path) -> None:
    v, w = pj.Variable([1.0, 2.0]), pj.Variable([3.0])
    prefix = pj.train.Checkpoint(v=v, w=w).write(str(tmp_path / "c"))
    only_v = pj.Variable([0.0, 0.0])
    status = pj.train.Checkpoint(v=only_v).read(prefix)
    with pytest.raises(AssertionError, match="Unresolved object in checkpoint"):
        status.assert_consumed()
    status.expect_partial()
    assert only_v.numpy().tolist() == [1.0, 2.0]
    wrong = pj.Variable([0.0, 0.0, 0.0])
    with pytest.raises(ValueError, match="incompatible tensor with shape \\[2\\]"):
        pj.train.Checkpoint(v=wrong).read(prefix)
    assert wrong.numpy().tolist() == [0.0, 0.0, 0.0]


def test__checkpoint_manager__keeps_the_newest_and_writes_the_index(tmp_path: Path) -> None:
    v = pj.Variable(0.0)
    manager = pj.train.CheckpointManager(pj.train.Checkpoint(v=v), str(tmp_path), max_to_keep=2)
    for step in range(4):
        v.assign(float(step))
        manager.save()
    assert manager.checkpoints == [str(tmp_path / "ckpt-3"), str(tmp_path / "ckpt-4")]
    assert sorted(p.name for p in tmp_path.glob("ckpt-*.index")) == ["ckpt-3.index", "ckpt-4.index"]
    state = (tmp_path / "checkpoint").read_text()
    assert 'model_checkpoint_path: "ckpt-4"' in state and state.count("all_model_checkpoint_paths") == 2
    assert pj.train.latest_checkpoint(str(tmp_path)) == str(tmp_path / "ckpt-4")
    again = pj.train.CheckpointManager(pj.train.Checkpoint(v=pj.Variable(9.0)), str(tmp_path), max_to_keep=2)
    assert again.checkpoints == manager.checkpoints
    restored = pj.Variable(-1.0)
    pj.train.Checkpoint(v=restored).restore(again.latest_checkpoint).assert_consumed()
    assert float(restored.numpy()) == 3.0


def test__save_weights_without_h5__writes_a_tensorflow_checkpoint(tmp_path: Path) -> None:
    model = small_model()
    model.fit(X, Y, batch_size=4, epochs=1, verbose=0)
    model.save_weights(str(tmp_path / "weights"))
    assert (tmp_path / "weights.index").exists() and (tmp_path / "weights.data-00000-of-00001").exists()
    keys = [name for name, _ in pj.train.list_variables(str(tmp_path / "weights"))]
    assert "layer_with_weights-0/kernel/.ATTRIBUTES/VARIABLE_VALUE" in keys and "optimizer/iter/.ATTRIBUTES/" \
        "VARIABLE_VALUE" in keys
    other = small_model()
    other.load_weights(str(tmp_path / "weights")).assert_consumed()
    np.testing.assert_array_equal(other.predict(X, verbose=0), model.predict(X, verbose=0))


def test__damaged_or_missing_checkpoints__raise_tensorflow_errors(tmp_path: Path) -> None:
    v = pj.Variable([1.0, 2.0])
    prefix = pj.train.Checkpoint(v=v).write(str(tmp_path / "c"))
    with pytest.raises(NotFoundError, match=r"Failed to find any matching files for .*nothing"):
        pj.train.Checkpoint(v=v).read(str(tmp_path / "nothing"))
    data = bytearray((tmp_path / "c.data-00000-of-00001").read_bytes())
    data[0] ^= 0xFF
    (tmp_path / "c.data-00000-of-00001").write_bytes(bytes(data))
    with pytest.raises(DataLossError, match=r"c\.data-00000-of-00001"):
        pj.train.Checkpoint(v=v).read(prefix)
    assert v.numpy().tolist() == [1.0, 2.0]
    index = bytearray((tmp_path / "c.index").read_bytes())
    index[3] ^= 0xFF
    (tmp_path / "c.index").write_bytes(bytes(index))
    with pytest.raises(DataLossError, match=r"c\.index"):
        pj.train.load_checkpoint(prefix)
    (tmp_path / "c.index").write_bytes(b"short")
    with pytest.raises(DataLossError, match="not an sstable"):
        pj.train.load_checkpoint(prefix)
    assert not list(tmp_path.glob(".*tmp*"))


def test__keras_2_checkpoints__restore_both_ways_with_stock_tf_keras(tmp_path: Path, real_tf: Any) -> None:
    """Keras 2 (``tf_keras``, the Keras of Graphcore's TensorFlow 2.6, with its OptimizerV2 ``legacy``
    optimizers) names a model's objects as popjit does: a checkpoint of a trained model and its Adam
    state restores both ways, and one more epoch on each side gives the same weights."""
    k2 = pytest.importorskip("tf_keras")

    def stock_model() -> Any:
        model = k2.Sequential([k2.Input((4,)), k2.layers.Dense(3, activation="tanh"), k2.layers.Dense(1)])
        model.compile(k2.optimizers.legacy.Adam(0.05), "mse")
        return model

    def one_more_epoch_agrees(ours: Any, theirs: Any) -> None:
        for m in (ours, theirs):
            m.fit(X, Y, batch_size=4, epochs=1, verbose=0, shuffle=False)
        for got, want in zip(ours.get_weights(), theirs.get_weights(), strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)

    theirs = stock_model()
    theirs.fit(X, Y, batch_size=4, epochs=2, verbose=0)
    prefix = real_tf.train.Checkpoint(model=theirs, optimizer=theirs.optimizer).save(str(tmp_path / "tf"))
    ours = small_model()
    pj.train.Checkpoint(model=ours, optimizer=ours.optimizer).restore(prefix).assert_consumed()
    one_more_epoch_agrees(ours, theirs)

    ours = small_model()
    ours.fit(X, Y, batch_size=4, epochs=2, verbose=0)
    prefix = pj.train.Checkpoint(model=ours, optimizer=ours.optimizer).save(str(tmp_path / "pj"))
    theirs = stock_model()
    real_tf.train.Checkpoint(model=theirs, optimizer=theirs.optimizer).restore(prefix) \
        .assert_existing_objects_matched()  # stock Keras creates (and then restores) its optimizer state lazily
    one_more_epoch_agrees(ours, theirs)
