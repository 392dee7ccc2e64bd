"""``pad_sequences`` against stock Keras's, and ``keras.utils.Sequence`` inputs: trained on the host
exactly as the same batches given as arrays; refused inside an IPU scope as Graphcore's Keras refuses
generators."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import popjit.tensorflow as pj
from popjit import ipu

SEQUENCES = st.lists(st.lists(st.integers(-50, 50), max_size=7), min_size=1, max_size=6)


# maxlen starts at 1: with 0, stock Keras fails to broadcast (popjit returns an empty [n, 0] array)
@given(SEQUENCES, st.one_of(st.none(), st.integers(1, 9)), st.sampled_from(["pre", "post"]),
       st.sampled_from(["pre", "post"]), st.sampled_from([0, -1, 7]), st.sampled_from(["int32", "float32", "int64"]))
def test__pad_sequences__equals_stock_keras(real_tf: Any, sequences: list, maxlen: Any, padding: str,
                                             truncating: str, value: int, dtype: str) -> None:
    ours = pj.keras.preprocessing.sequence.pad_sequences(sequences, maxlen, dtype, padding, truncating, value)
    theirs = real_tf.keras.utils.pad_sequences(sequences, maxlen, dtype, padding, truncating, value)
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
    np.testing.assert_array_equal(ours, theirs)
    assert pj.keras.utils.pad_sequences is pj.keras.preprocessing.sequence.pad_sequences


def test__pad_sequences__keeps_the_step_shape_and_refuses_bad_arguments() -> None:
    pad = pj.keras.preprocessing.sequence.pad_sequences
    steps = [np.ones((2, 3)), np.zeros((0, 3)), np.full((4, 3), 2.0)]
    out = pad(steps, maxlen=3, dtype="float32", padding="post")
    assert out.shape == (3, 3, 3)
    np.testing.assert_array_equal(out[0], [[1] * 3, [1] * 3, [0] * 3])
    np.testing.assert_array_equal(out[2], np.full((3, 3), 2.0))
    with pytest.raises(ValueError, match='Padding type "middle" not understood'):
        pad([[1, 2]], padding="middle")
    with pytest.raises(ValueError, match='Truncating type "middle" not understood'):
        pad([[1, 2]], maxlen=1, truncating="middle")
    with pytest.raises(ValueError, match="`dtype` int32 is not compatible with `value`'s type"):
        pad([[1]], value="x")
    with pytest.raises(ValueError, match="is different from expected shape"):
        pad([np.ones((1, 2)), np.ones((1, 3))], dtype="float32")


class Batches(pj.keras.utils.Sequence):
    """Fixed batches by index; counts the epoch hook."""

    def __init__(self, x: np.ndarray, y: np.ndarray, batch: int) -> None:
        self.x, self.y, self.batch, self.epochs_ended = x, y, batch, 0

    def __len__(self) -> int:
        return len(self.x) // self.batch

    def __getitem__(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        part = slice(index * self.batch, (index + 1) * self.batch)
        return self.x[part], self.y[part]

    def on_epoch_end(self) -> None:
        self.epochs_ended += 1


def small_model() -> Any:
    model = pj.keras.Sequential([pj.keras.Input((3,)), pj.keras.layers.Dense(4, activation="relu"),
                                 pj.keras.layers.Dense(1)])
    model.set_weights([np.linspace(-1, 1, w.size).reshape(w.shape).astype(np.float32) for w in model.get_weights()])
    model.compile(pj.keras.optimizers.SGD(0.05), "mse", metrics=["mae"])
    return model


def test__a_sequence__trains_as_its_batches_given_as_arrays() -> None:
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=(24, 3)).astype(np.float32), rng.normal(size=(24, 1)).astype(np.float32)
    batches = Batches(x, y, 6)
    from_sequence = small_model().fit(batches, epochs=3, verbose=0, shuffle=False, validation_data=Batches(x, y, 8))
    from_arrays = small_model().fit(x, y, batch_size=6, epochs=3, verbose=0, shuffle=False,
                                    validation_data=(x, y), validation_batch_size=8)
    for key in ("loss", "mae", "val_loss", "val_mae"):
        np.testing.assert_allclose(from_sequence.history[key], from_arrays.history[key], rtol=1e-6)
    assert batches.epochs_ended == 3
    model = small_model()
    np.testing.assert_allclose(model.predict(Batches(x, y, 6)), model.predict(x, batch_size=6), rtol=1e-6)


def test__a_sequence__is_refused_on_the_ipu_as_a_generator() -> None:
    x, y = np.zeros((8, 3), np.float32), np.zeros((8, 1), np.float32)
    with ipu.ipu_strategy.IPUStrategy().scope():
        model = small_model()
        with pytest.raises(ValueError, match="requirement to know the data shape ahead of time"):
            model.fit(Batches(x, y, 4), epochs=1, verbose=0)
