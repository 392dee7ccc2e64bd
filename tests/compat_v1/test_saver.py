"""``tf.compat.v1.train.Saver``: checkpoints stock TensorFlow's Saver restores, and the other way round;
``max_to_keep`` and the ``checkpoint`` state file; restoring leaves variables intact on a bad file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from popjit.errors import NotFoundError, UnimplementedError
from popjit.tensorflow.compat import v1 as tf1

VALUES = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "scope/b": np.array([1.5, -2.0], np.float32)}


def _variables(tf: Any) -> dict[str, Any]:
    with tf.variable_scope("", use_resource=True):
        w = tf.get_variable("w", [2, 3], initializer=tf.zeros_initializer())
        with tf.variable_scope("scope"):
            b = tf.get_variable("b", [2], initializer=tf.zeros_initializer())
    return {"w": w, "scope/b": b}


def test__saver__checkpoints_read_both_ways_with_stock_tensorflow(graph: Any, real_tf1: Any, tmp_path: Path) -> None:
    ours = _variables(tf1)
    step = tf1.train.get_or_create_global_step()
    saver = tf1.train.Saver(list(ours.values()) + [step])
    with tf1.Session() as sess:
        sess.run(tf1.global_variables_initializer())
        for name, var in ours.items():
            sess.run(tf1.assign(var, VALUES[name]))
        sess.run(tf1.assign_add(step, 7))
        prefix = saver.save(sess, str(tmp_path / "model"), global_step=step)
    assert prefix == str(tmp_path / "model-7")
    with real_tf1.Graph().as_default():
        theirs = _variables(real_tf1)
        with real_tf1.Session() as sess:
            real_tf1.train.Saver(list(theirs.values())).restore(sess, real_tf1.train.latest_checkpoint(str(tmp_path)))
            for name, var in theirs.items():
                np.testing.assert_array_equal(sess.run(var), VALUES[name])
            sess.run([real_tf1.assign(var, VALUES[name] * 2) for name, var in theirs.items()])
            real_tf1.train.Saver(list(theirs.values())).save(sess, str(tmp_path / "stock"))
    with tf1.Session() as sess:
        tf1.train.Saver(list(ours.values())).restore(sess, str(tmp_path / "stock"))
        for name, var in ours.items():
            np.testing.assert_array_equal(sess.run(var), VALUES[name] * 2)


def test__saver__keeps_the_newest_and_writes_the_state_file(graph: Any, tmp_path: Path) -> None:
    variables = _variables(tf1)
    saver = tf1.train.Saver(max_to_keep=2)
    with tf1.Session() as sess:
        sess.run(tf1.global_variables_initializer())
        for k in range(4):
            saver.save(sess, str(tmp_path / "ckpt"), global_step=k)
    assert saver.last_checkpoints == [str(tmp_path / "ckpt-2"), str(tmp_path / "ckpt-3")]
    assert sorted(p.name for p in tmp_path.glob("*.index")) == ["ckpt-2.index", "ckpt-3.index"]
    state = tf1.train.get_checkpoint_state(str(tmp_path))
    assert state.model_checkpoint_path == str(tmp_path / "ckpt-3")
    assert tf1.train.latest_checkpoint(str(tmp_path)) == str(tmp_path / "ckpt-3")
    assert set(variables) == {"w", "scope/b"}


def test__saver__restore_of_a_missing_name_changes_nothing(graph: Any, tmp_path: Path) -> None:
    variables = _variables(tf1)
    extra = tf1.get_variable("extra", [1], initializer=tf1.ones_initializer(), use_resource=True)
    with tf1.Session() as sess:
        sess.run(tf1.global_variables_initializer())
        tf1.train.Saver(list(variables.values())).save(sess, str(tmp_path / "part"))
        sess.run(tf1.assign(variables["w"], np.ones((2, 3), np.float32)))
        with pytest.raises(NotFoundError, match="Key extra not found in checkpoint"):
            tf1.train.Saver().restore(sess, str(tmp_path / "part"))
        np.testing.assert_array_equal(sess.run(variables["w"]), np.ones((2, 3)))
        np.testing.assert_array_equal(sess.run(extra), [1])


def test__saver__options_it_does_not_model_raise(graph: Any) -> None:
    _variables(tf1)
    for options in ({"keep_checkpoint_every_n_hours": 1.0}, {"filename": "f"}, {"sharded": True}):
        with pytest.raises(UnimplementedError, match="is not supported by popjit"):
            tf1.train.Saver(**options)
