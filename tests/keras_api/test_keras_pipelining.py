"""Keras pipelining (spec §1.15, §3.4): ``keras.ipu.PipelineStage`` scopes, ``set_pipelining_options``, the
stage-assignment methods and the SDK ≤ 2.1 ``PipelineSequential``. A pipelined model trains as gradient
accumulation over ``gradient_accumulation_steps_per_replica`` steps does, on one IPU per stage."""

from __future__ import annotations

import contextlib
import re
from typing import Any

import numpy as np
import pytest

import popjit.tensorflow as tf
from popjit import ipu
from popjit.ipu.ops import pipelining_ops
from popjit.runtime import device as devices
from tests.helpers import device_of

keras = tf.keras
rng = np.random.default_rng(1)
X = rng.standard_normal((64, 6)).astype(np.float32)
Y = rng.standard_normal((64, 1)).astype(np.float32)




def _functional(stages: bool) -> Any:
    stage = keras.ipu.PipelineStage if stages else (lambda k: contextlib.nullcontext())
    inp = keras.Input((6,))
    with stage(0):
        h = keras.layers.Dense(4, activation="tanh", kernel_initializer=keras.initializers.Constant(0.1))(inp)
    with stage(1):
        out = keras.layers.Dense(1, kernel_initializer=keras.initializers.Constant(0.2))(h)
    return keras.Model(inp, out)


def _fit(model: Any, pipelined: bool) -> list[np.ndarray]:
    model.compile(keras.optimizers.SGD(0.01), loss="mse", steps_per_execution=4)
    if pipelined:
        model.set_pipelining_options(gradient_accumulation_steps_per_replica=4)
    else:
        model.set_gradient_accumulation_options(4)
    model.fit(X, Y, batch_size=4, epochs=1, shuffle=False, verbose=0)
    return model.get_weights()


def test_a_pipelined_model_trains_as_gradient_accumulation(fresh_ipu_system):
    with device_of(2).scope():
        model = _functional(stages=True)
        pipelined = _fit(model, True)
    program = devices.get_device(0).last_program("train_function")
    assert (program.target.num_ipus, program.target.replicas) == (2, 1)
    with device_of(1).scope():
        accumulated = _fit(_functional(stages=False), False)
    for got, want in zip(pipelined, accumulated, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6)
    assert [str(a) for a in model.get_pipeline_stage_assignment()] == [
        "Layer: dense (node index 0) is assigned to pipeline stage: 0",
        "Layer: dense_1 (node index 0) is assigned to pipeline stage: 1"] or \
        [a.pipeline_stage for a in model.get_pipeline_stage_assignment()] == [0, 1]


def test_a_pipelined_model_replicates_over_the_rest_of_the_device(fresh_ipu_system, caplog):
    with device_of(4).scope():
        model = _functional(stages=True)
        with caplog.at_level("INFO", logger="popjit"):
            _fit(model, True)
    program = devices.get_device(0).last_program("train_function")
    assert (program.target.num_ipus, program.target.replicas) == (2, 2)
    assert "Training is distributed across 2 replicas, your effective batch size is 32." in caplog.text


def test_sequential_stage_assignment_and_summary(fresh_ipu_system):
    with device_of(2).scope():
        model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(4, name="a"), keras.layers.Dense(4, name="b"),
                                  keras.layers.Dense(1, name="c")])
        assert all(a.pipeline_stage is None for a in model.get_pipeline_stage_assignment())
        model.set_pipeline_stage_assignment([0, 0, 1])
        got = model.get_pipeline_stage_assignment()
        assert [(a.layer.name, a.pipeline_stage, [x.name for x in a.inbound_layers]) for a in got] == [
            ("a", 0, []), ("b", 0, ["a"]), ("c", 1, ["b"])]
        lines: list[str] = []
        model.print_pipeline_stage_assignment_summary(print_fn=lines.append)
        assert "Layer (type) (node index)" in lines[1] and "Pipeline Stage" in lines[1]
        assert re.match(r"b \(Dense\) \(0\)\s+a\s+0", lines[5])
        for bad, message in [((0, 1, 1), "`pipeline_stage_assignment` needs to be a list"),
                             ([0, 1], "The length of the provided `pipeline_stage_assignment` (2) does not match the "
                                      "number of layers in the graph (3)"),
                             ([1, 1, 2], "Pipeline stage assignments must start at 0 and be strictly increasing"),
                             ([0, 1, 0], "Layer c in pipeline stage 0 has a dependency from a pipeline stage which has "
                                         "not yet been executed")]:
            with pytest.raises(ValueError, match=re.escape(message)):
                model.set_pipeline_stage_assignment(bad)
        model.reset_pipeline_stage_assignment()
        assert all(a.pipeline_stage is None for a in model.get_pipeline_stage_assignment())


def test_graphcores_keras_pipelining_errors(fresh_ipu_system):
    with device_of(2).scope():
        unbuilt = keras.Sequential([keras.layers.Dense(2)])
        with pytest.raises(RuntimeError, match=re.escape("which has not been built yet. Please call `model.build()`")):
            unbuilt.get_pipeline_stage_assignment()
        model = _functional(stages=True)
        model.compile("sgd", "mse", steps_per_execution=4)
        with pytest.raises(ValueError, match="The model which you are attempting to train is pipelined, however "
                                             "`gradient_accumulation_steps_per_replica` has not been set"):
            model.fit(X, Y, batch_size=4, verbose=0)
        with pytest.raises(ValueError, match="Found `outfeed_queue` key in `pipelining_kwargs`"):
            model.set_pipelining_options(4, outfeed_queue=None)
        model.set_pipelining_options(gradient_accumulation_steps_per_replica=2)
        with pytest.raises(tf.errors.FailedPreconditionError, match="must be at least 4, but it is 2"):
            model.fit(X, Y, batch_size=4, verbose=0)
        model.set_pipelining_options(gradient_accumulation_steps_per_replica=4, device_mapping=[0, 2])
        with pytest.raises(ValueError, match=re.escape("Current device has 2 IPUs attached, however the current model "
                                                       "requires a multiple of 4 IPUs.")):
            model.fit(X, Y, batch_size=4, verbose=0)
        inp = keras.Input((6,))
        with keras.ipu.PipelineStage(0):
            h = keras.layers.Dense(4, name="staged")(inp)
        partial = keras.Model(inp, keras.layers.Dense(1, name="unstaged")(h))
        partial.compile("sgd", "mse", steps_per_execution=4)
        partial.set_pipelining_options(gradient_accumulation_steps_per_replica=4)
        message = ("All layers of a pipelined model must have an associated pipeline stage. However, unstaged has "
                   "not been assigned to one.")
        with pytest.raises(ValueError, match=re.escape(message)):
            partial.fit(X, Y, batch_size=4, verbose=0)


def test_sdk1_pipeline_sequential_trains_as_an_accumulating_sequential(fresh_ipu_system):
    def layers() -> list[Any]:
        return [keras.layers.Dense(4, activation="tanh", kernel_initializer=keras.initializers.Constant(0.1)),
                keras.layers.Dense(1, kernel_initializer=keras.initializers.Constant(0.2))]

    dataset = tf.data.Dataset.from_tensor_slices((X, Y)).batch(4, drop_remainder=True)
    weights = []
    for ipus, pipelined in ((2, True), (1, False)):
        with device_of(ipus).scope():
            a, b = layers()
            model = ipu.keras.PipelineSequential([[a], [b]], gradient_accumulation_count=4) if pipelined else \
                ipu.keras.Sequential([a, b], gradient_accumulation_count=4)
            model.compile(keras.optimizers.SGD(0.01), "mse")
            model.fit(dataset, epochs=1, verbose=0)
            weights.append(model.get_weights())
    for got, want in zip(*weights, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6)


def _matmul_ipus(schedule: Any) -> list[int]:
    return [s.ipu for s in schedule.steps if s.kind == "matmul" and not s.backward]


def test_the_estimate_places_each_stage_on_its_ipu_and_overlaps_the_steps(fresh_ipu_system):
    with device_of(2).scope():
        model = _functional(stages=True)
        model.compile(keras.optimizers.SGD(0.01), loss="mse", steps_per_execution=8)
        model.set_pipelining_options(gradient_accumulation_steps_per_replica=4, device_mapping=[1, 0],
                                     pipeline_schedule=pipelining_ops.PipelineSchedule.Interleaved)
        model.fit(X[:32], Y[:32], batch_size=4, epochs=1, verbose=0)
    schedule = devices.get_device(0).last_program("train_function").schedule
    (pipe,) = schedule.pipelines
    got = (pipe.schedule, pipe.mapping, pipe.count, pipe.group, pipe.runs_per_loop)
    assert got == ("Interleaved", (1, 0), 8, 4, 2)
    assert _matmul_ipus(schedule) == [1, 0]  # stage 0's Dense on IPU 1, stage 1's on IPU 0
    loss = [s for s in schedule.steps if "squared_difference" in s.name]
    assert loss and {s.ipu for s in loss} == {0}  # the loss on the last stage's IPU
    assert pipe.work.update > 0  # the weight update, once per 4 steps
    assert pipe.cycles == pipe.steps * pipe.step_cycles + 2 * pipe.work.update
    assert pipe.steps == 2 * (4 + 2)


def test_a_sequential_models_layers_go_on_their_stages_ipus(fresh_ipu_system):
    with device_of(2).scope():
        model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(4), keras.layers.Dense(4),
                                  keras.layers.Dense(1)])
        model.set_pipeline_stage_assignment([0, 1, 1])
        model.compile(keras.optimizers.SGD(0.01), loss="mse", steps_per_execution=4)
        model.set_pipelining_options(gradient_accumulation_steps_per_replica=4)
        model.fit(X[:16], Y[:16], batch_size=4, epochs=1, verbose=0)
    schedule = devices.get_device(0).last_program("train_function").schedule
    assert _matmul_ipus(schedule) == [0, 1, 1]
    assert any(s.kind == "inter-ipu copy" for s in schedule.steps)
