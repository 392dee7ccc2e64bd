"""tf.keras.utils.model_to_dot / plot_model: the layer graph through pydot, Keras's ImportError without
pydot or Graphviz."""

from __future__ import annotations

import sys

import pytest

import popjit.tensorflow as tf

pydot = pytest.importorskip("pydot")


def _branching_model():
    inp = tf.keras.Input((4,), name="x")
    a = tf.keras.layers.Dense(3, name="a")(inp)
    b = tf.keras.layers.Dense(3, name="b")(inp)
    return tf.keras.Model(inp, tf.keras.layers.Add(name="sum")([a, b]))


def _labels_and_edges(dot):
    labels = {n.get_name(): n.get("label").strip('"') for n in dot.get_nodes() if n.get("label")}
    edges = {(labels[e.get_source()].split(":")[0].strip("{"), labels[e.get_destination()].split(":")[0].strip("{"))
             for e in dot.get_edges()}
    return labels, edges


def test__model_to_dot__has_a_node_per_layer_and_the_functional_edges():
    labels, edges = _labels_and_edges(tf.keras.utils.model_to_dot(_branching_model()))
    assert sorted(labels.values()) == ["a: Dense", "b: Dense", "sum: Add", "x: InputLayer"]
    assert edges == {("x", "a"), ("x", "b"), ("a", "sum"), ("b", "sum")}


def test__model_to_dot__sequential_is_a_chain_and_shapes_are_shown():
    model = tf.keras.Sequential([tf.keras.layers.Dense(2, input_shape=(3,), name="d1"),
                                 tf.keras.layers.Dense(1, name="d2")])
    labels, edges = _labels_and_edges(tf.keras.utils.model_to_dot(model, show_shapes=True, show_layer_names=False))
    assert len(edges) == 1
    texts = sorted(labels.values())
    assert texts == ["{Dense}|{input:|output:}|{{(?, 2)}|{(?, 1)}}", "{Dense}|{input:|output:}|{{(?, 3)}|{(?, 2)}}"]


def test__plot_model__writes_graphviz_source_for_dot_files(tmp_path):
    path = tmp_path / "model.dot"
    assert tf.keras.utils.plot_model(_branching_model(), to_file=str(path), rankdir="LR") is None
    (graph,) = pydot.graph_from_dot_file(str(path))
    labels, edges = _labels_and_edges(graph)
    assert len(labels) == 4 and len(edges) == 4 and graph.get("rankdir") == "LR"


def test__plot_model__an_image_without_graphviz_raises_kerass_import_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no `dot` program to run
    with pytest.raises(ImportError, match=r"install graphviz"):
        tf.keras.utils.plot_model(_branching_model(), to_file=str(tmp_path / "model.png"))
    assert not (tmp_path / "model.png").exists()


def test__model_to_dot__without_pydot_raises_kerass_import_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "pydot", None)  # what Python does when pydot is not installed
    with pytest.raises(ImportError, match=r"You must install pydot \(`pip install pydot`\)"):
        tf.keras.utils.model_to_dot(_branching_model())
