"""TF1 variable scopes: names and reuse as in stock TensorFlow, the errors of reusing or re-creating a
variable, and Graphcore's error for a ref variable on the IPU."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from popjit.errors import InvalidArgumentError, UnimplementedError
from popjit.ipu.scopes import ipu_scope
from popjit.tensorflow.compat import v1 as tf1


def _names(tf: Any) -> list[str]:
    made = []
    with tf.variable_scope("outer", use_resource=True):
        made.append(tf.get_variable("w", [2]))
        with tf.variable_scope("inner"):
            made.append(tf.get_variable("b", [1], initializer=tf.zeros_initializer()))
        with tf.variable_scope(None, default_name="layer"):
            made.append(tf.get_variable("k", [1]))
        with tf.variable_scope(None, default_name="layer"):
            made.append(tf.get_variable("k", [1]))
    with tf.variable_scope("outer", reuse=True):
        made.append(tf.get_variable("w"))
    with tf.variable_scope("auto", reuse=tf.AUTO_REUSE, use_resource=True):
        made.append(tf.get_variable("a", [1]))
        made.append(tf.get_variable("a", [1]))
    return [v.name for v in made] + [str(made[0] is made[4]), str(made[5] is made[6])]


def test__variable_scope__names_and_reuse_as_stock_tensorflow(graph: Any, real_tf1: Any) -> None:
    ours = _names(tf1)
    with real_tf1.Graph().as_default():
        theirs = _names(real_tf1)
    assert ours == theirs
    assert ours[:4] == ["outer/w:0", "outer/inner/b:0", "outer/layer/k:0", "outer/layer_1/k:0"]
    assert [v.name for v in tf1.trainable_variables()] == ["outer/w:0", "outer/inner/b:0", "outer/layer/k:0",
                                                          "outer/layer_1/k:0", "auto/a:0"]


def test__get_variable__errors_of_reuse(graph: Any) -> None:
    with tf1.variable_scope("s", use_resource=True):
        tf1.get_variable("w", [2])
        with pytest.raises(ValueError, match=r"Variable s/w already exists, disallowed. Did you mean to set "
                                             r"reuse=True or reuse=tf.AUTO_REUSE in VarScope\?"):
            tf1.get_variable("w", [2])
    with tf1.variable_scope("s", reuse=True):
        with pytest.raises(ValueError, match="Variable s/x does not exist, or was not created with "
                                             r"tf.get_variable\(\)"):
            tf1.get_variable("x", [2])
        with pytest.raises(ValueError, match=r"Trying to share variable s/w, but specified shape \[3\]"):
            tf1.get_variable("w", [3])


def test__initializers__give_their_values(graph: Any) -> None:
    with tf1.variable_scope("i", use_resource=True):
        c = tf1.get_variable("c", [2, 2], initializer=tf1.constant_initializer(2.5))
        n = tf1.get_variable("n", [400], initializer=tf1.random_normal_initializer(1.0, 0.5, seed=3))
        t = tf1.get_variable("t", [400], initializer=tf1.truncated_normal_initializer(stddev=1.0, seed=4))
        g = tf1.get_variable("g", [20, 30], initializer=tf1.glorot_uniform_initializer(seed=5))
        ints = tf1.get_variable("k", [3], dtype=tf1.int32)
    with tf1.Session() as sess:
        sess.run(tf1.global_variables_initializer())
        cv, nv, tv, gv, kv = sess.run([c, n, t, g, ints])
    np.testing.assert_array_equal(cv, np.full((2, 2), 2.5))
    assert abs(nv.mean() - 1.0) < 0.1 and abs(nv.std() - 0.5) < 0.1
    assert np.abs(tv).max() <= 2.0
    assert np.abs(gv).max() <= np.sqrt(6 / 50) and gv.std() > 0.1
    assert kv.dtype == np.int32 and not kv.any()


def test__ref_variable_on_the_ipu__fails_as_on_graphcores_system(graph: Any) -> None:
    with tf1.device("/device:IPU:0"):
        with pytest.raises(InvalidArgumentError, match=r"Cannot assign a device for operation ref: Could not "
                                                       r"satisfy explicit device specification '/device:IPU:0'(.|\n)*"
                                                       r"VariableV2: CPU"):
            tf1.get_variable("ref", [2])
        with pytest.raises(InvalidArgumentError, match="VariableV2: CPU"):
            tf1.Variable(np.zeros(2, np.float32), name="plain")
    with ipu_scope("/device:IPU:0"):  # Graphcore's scope makes resource variables
        assert tf1.get_variable("res", [2]).name == "res:0"


def test__variable_scope__opens_the_name_scope_of_its_name(graph: Any, real_tf1: Any) -> None:
    def names(tf: Any) -> list[str]:
        with tf.name_scope("ns"), tf.variable_scope("vs", use_resource=True) as vs:
            p = tf.placeholder(tf.float32, [1], name="p")
            v = tf.Variable(np.zeros(1, np.float32), name="v")
            g = tf.get_variable("g", [1])
        with tf.variable_scope(vs):
            q = tf.placeholder(tf.float32, [1], name="q")
        with tf.variable_scope("quiet", auxiliary_name_scope=False):
            r = tf.placeholder(tf.float32, [1], name="r")
        return [p.name, v.name, g.name, q.name, r.name]

    ours = names(tf1)
    with real_tf1.Graph().as_default():
        theirs = names(real_tf1)
    assert ours == theirs == ["ns/vs/p:0", "ns/vs/v:0", "vs/g:0", "vs/q:0", "r:0"]
    with pytest.raises(UnimplementedError, match=r"variable_scope\(regularizer=\.\.\.\) is not supported"), \
            tf1.variable_scope("r", regularizer=lambda w: w):
        pass
