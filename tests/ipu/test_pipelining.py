"""``ipu.pipelining_ops.pipeline`` and ``ipu.scopes.ipu_shard`` (spec §1.8, §1.10, §3.3): the values are those of
running the micro-batches one after another with gradient accumulation, checked against NumPy; a program
of S shards on N IPUs runs as N / S replicas."""

from __future__ import annotations

import re

import numpy as np
import pytest

from popjit import ipu
from popjit import tensorflow as tf
from popjit.errors import FailedPreconditionError, InternalError, UnimplementedError
from popjit.ipu.ops import pipelining_ops
from popjit.runtime import device as devices
from tests.helpers import device_of

rng = np.random.default_rng(0)
X = rng.standard_normal((32, 3)).astype(np.float32)
Y = rng.standard_normal((32, 1)).astype(np.float32)
LR = 0.1




def _numpy(gac: int, repeats: int, reduction: str = "sum", replicas: int = 1, batch: int = 2) -> tuple:
    """Sequential gradient accumulation of the two-stage model below, in float64 (the gradients of every
    replica summed, as a Keras optimizer sums them); and each micro-batch's loss."""
    a, b = np.full((3, 4), 0.1), np.full((4, 1), 0.2)
    losses = []
    for rep in range(repeats):
        ga, gb = np.zeros_like(a), np.zeros_like(b)
        for m in range(gac):
            for r in range(replicas):
                i = (rep * gac + m) * replicas + r
                x, y = X[batch * i:batch * i + batch].astype(np.float64), Y[batch * i:batch * i + batch]
                h = np.tanh(x @ a)
                e = h @ b - y
                losses.append(np.mean(e ** 2))
                d = 2 * e / e.size
                gb += h.T @ d
                ga += x.T @ ((d @ b.T) * (1 - h ** 2))
        scale = 1.0 / gac if reduction == "mean" else 1.0
        a, b = a - LR * scale * ga, b - LR * scale * gb
    return a, b, np.array(losses)


def _train(strategy, gac: int, repeats: int, **options):
    dataset = tf.data.Dataset.from_tensor_slices((X, Y)).batch(2, drop_remainder=True)
    infeed = ipu.ipu_infeed_queue.IPUInfeedQueue(dataset)
    outfeed = ipu.ipu_outfeed_queue.IPUOutfeedQueue()
    with strategy.scope():
        w1 = tf.Variable(np.full((3, 4), 0.1, np.float32))
        w2 = tf.Variable(np.full((4, 1), 0.2, np.float32))
        opt = tf.keras.optimizers.SGD(LR)

        def stage1(x, y):
            return tf.tanh(x @ w1), y

        def stage2(h, y):
            return tf.reduce_mean((h @ w2 - y) ** 2)

        def optimizer_function(loss):
            return pipelining_ops.OptimizerFunctionOutput(opt, loss, variables=[w1, w2])

        @tf.function(jit_compile=True)
        def run():
            pipelining_ops.pipeline([stage1, stage2], gradient_accumulation_count=gac, repeat_count=repeats,
                                    infeed_queue=infeed, outfeed_queue=outfeed, optimizer_function=optimizer_function,
                                    outfeed_loss=True, **options)

        strategy.run(run)
    return w1.numpy(), w2.numpy(), outfeed.dequeue(), run


@pytest.mark.parametrize("reduction", ["sum", "mean", "running_mean"])
def test_training_equals_sequential_gradient_accumulation(fresh_ipu_system, reduction):
    w1, w2, losses, _ = _train(device_of(2), 4, 2, reduction_method=reduction)
    a, b, want = _numpy(4, 2, "mean" if reduction != "sum" else "sum")
    np.testing.assert_allclose(w1, a, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(w2, b, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(losses, want, rtol=1e-5)  # one loss per micro-batch


def test_two_stages_on_four_ipus_run_as_two_replicas(fresh_ipu_system):
    w1, w2, losses, run = _train(device_of(4), 4, 1)
    a, b, want = _numpy(4, 1, replicas=2)
    np.testing.assert_allclose(w1, a, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(w2, b, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(losses, want.reshape(4, 2), rtol=1e-5)  # [micro-batches, replicas]
    target = run.get_concrete_function().executable("/device:IPU:0").target
    assert (target.num_ipus, target.replicas) == (2, 2)
    assert target.tiles == 2 * devices.get_device(0).target.tiles


def _x_feeds() -> tuple:
    """An infeed of X in batches of 4, and an outfeed."""
    dataset = tf.data.Dataset.from_tensor_slices(X).batch(4, drop_remainder=True)
    return ipu.ipu_infeed_queue.IPUInfeedQueue(dataset), ipu.ipu_outfeed_queue.IPUOutfeedQueue()


def test_inference_and_accumulated_outfeed(fresh_ipu_system):
    strategy = device_of(2)
    infeed, every = _x_feeds()

    @tf.function(jit_compile=True)
    def run(scale):
        pipelining_ops.pipeline([lambda s, x: x * s, lambda x: {"total": tf.reduce_sum(x, axis=0)}],
                                gradient_accumulation_count=4, repeat_count=2, inputs=[scale], infeed_queue=infeed,
                                outfeed_queue=every, accumulate_outfeed=True, device_mapping=[0, 1])

    with strategy.scope():
        strategy.run(run, args=(np.float32(2.0),))
    got = every.dequeue()["total"]
    want = (2.0 * X).reshape(2, 16, 3).sum(1)  # one sum per repeat of 4 micro-batches of 4
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_tf1_pipeline_in_a_session(fresh_ipu_system):
    tf1 = tf.compat.v1
    graph = tf1.Graph()
    with graph.as_default():
        device_of(2)
        infeed = ipu.ipu_infeed_queue.IPUInfeedQueue(tf.data.Dataset.from_tensor_slices((X, Y)).batch(
            2, drop_remainder=True))
        outfeed = ipu.ipu_outfeed_queue.IPUOutfeedQueue()

        def stage1(x, y):
            with tf1.variable_scope("s1", use_resource=True):
                w = tf1.get_variable("w", initializer=np.full((3, 4), 0.1, np.float32))
            return tf.tanh(x @ w), y

        def stage2(h, y):
            with tf1.variable_scope("s2", use_resource=True):
                w = tf1.get_variable("w", initializer=np.full((4, 1), 0.2, np.float32))
            return tf.reduce_mean((h @ w - y) ** 2)

        def optimizer_function(loss):
            return pipelining_ops.OptimizerFunctionOutput(tf1.train.GradientDescentOptimizer(LR), loss)

        def model():
            return pipelining_ops.pipeline([stage1, stage2], 4, repeat_count=2, infeed_queue=infeed,
                                           outfeed_queue=outfeed, optimizer_function=optimizer_function,
                                           outfeed_loss=True)

        with ipu.scopes.ipu_scope("/device:IPU:0"):
            train = ipu.ipu_compiler.compile(model)
        with tf1.Session() as sess:
            sess.run(infeed.initializer)
            sess.run(tf1.global_variables_initializer())
            sess.run(train)
            w1, w2 = sess.run(tf1.trainable_variables())
    a, b, _ = _numpy(4, 2)
    np.testing.assert_allclose(w1, a, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(w2, b, rtol=1e-5, atol=1e-7)


def test_graphcores_pipeline_errors(fresh_ipu_system):
    strategy = device_of(2)
    outfeed = ipu.ipu_outfeed_queue.IPUOutfeedQueue(ipu.ipu_outfeed_queue.IPUOutfeedMode.LAST)
    stages = [lambda x: x, lambda x: x]
    with pytest.raises(ValueError, match=re.escape("gradient_accumulation_count must be specified.")):
        pipelining_ops.pipeline(stages)
    with pytest.raises(ValueError, match=re.escape("Pipeline requires at least two computational stages.")):
        pipelining_ops.pipeline(stages[:1], 4)
    with pytest.raises(TypeError, match=re.escape("computational_stages argument needs to be a list or a tuple.")):
        pipelining_ops.pipeline(lambda x: x, 4)
    with pytest.raises(ValueError, match=r"Each stage must be mapped to an IPU: 1 mappings != 2 stages"):
        pipelining_ops.pipeline(stages, 4, device_mapping=[0])
    with pytest.raises(TypeError, match="infeed_queue is not an instance of ipu_infeed_queue"):
        pipelining_ops.pipeline(stages, 4, infeed_queue=object())
    with pytest.raises(ValueError, match="An optimizer_function must be provided when outfeed_loss is True"):
        pipelining_ops.pipeline(stages, 4, outfeed_loss=True)
    with pytest.raises(ValueError, match=re.escape("To accumulate the outfeed, it must be in IPUOutfeedMode ALL.")):
        pipelining_ops.pipeline(stages, 4, outfeed_queue=outfeed, accumulate_outfeed=True)
    with pytest.raises(NotImplementedError, match="'Interleaved' does not currently support multiple pipeline stages"):
        pipelining_ops.pipeline(stages, 4, device_mapping=[0, 0], optimizer_function=lambda x: None,
                                pipeline_schedule=pipelining_ops.PipelineSchedule.Interleaved)
    with pytest.raises(FailedPreconditionError, match="must be at least 4, but it is 3"):  # training: 2 x stages
        pipelining_ops.pipeline(stages, 3, optimizer_function=lambda x: None)
    with pytest.raises(FailedPreconditionError, match="must be at least 2, but it is 1"):  # inference: the stages
        pipelining_ops.pipeline(stages, 1)
    with pytest.raises(UnimplementedError, match="offload_weights=True"):
        pipelining_ops.pipeline(stages, 4, offload_weights=True)
    with pytest.raises(TypeError, match=re.escape("OptimizerFunctionOutput.opt must be a TensorFlow Optimizer")):
        pipelining_ops.OptimizerFunctionOutput("sgd", tf.constant(1.0))
    with pytest.raises(TypeError, match=re.escape("OptimizerFunctionOutput.loss must be a TensorFlow Tensor object.")):
        pipelining_ops.OptimizerFunctionOutput(tf.keras.optimizers.SGD(), 1.0)
    with pytest.raises(RuntimeError, match=re.escape("No variables to optimize. When using OptimzerV2")):
        pipelining_ops.OptimizerFunctionOutput(tf.keras.optimizers.SGD(), tf.constant(1.0))
    infeed = ipu.ipu_infeed_queue.IPUInfeedQueue(tf.data.Dataset.from_tensor_slices(X).batch(2, drop_remainder=True))

    @tf.function(jit_compile=True)
    def no_outfeed():
        pipelining_ops.pipeline(stages, 4, infeed_queue=infeed)

    with pytest.raises(ValueError, match="The last computational stage has tensor outputs"):
        strategy.run(no_outfeed)


def test_sharding_places_ops_on_shards_and_needs_the_ipus(fresh_ipu_system):
    @tf.function(jit_compile=True)
    def sharded(a, b, c):
        with ipu.scopes.ipu_shard(0):
            o1 = a + b
        with ipu.scopes.ipu_shard(1):
            o2 = a + c
        with ipu.scopes.ipu_shard(2):
            o3 = b + c
        with ipu.scopes.ipu_shard(3):
            return o1 + o2 + o3

    args = [np.array([1.0, 1.0], np.float32), np.array([0.0, 1.0], np.float32), np.array([1.0, 5.0], np.float32)]
    np.testing.assert_array_equal(device_of(4).run(sharded, args=args).numpy(), [4.0, 14.0])  # seed 004's numbers
    assert sharded.get_concrete_function(*args).graph.shards == 4
    with pytest.raises(InternalError, match="device with 2 IPUs, but the graph spans 4 shards"):
        device_of(2).run(sharded, args=args)
    with pytest.raises(ValueError, match="non-negative int"), ipu.scopes.ipu_shard(-1):
        pass


def test_a_stage_may_not_capture_a_tensor_from_outside_the_pipeline(fresh_ipu_system):
    strategy = device_of(2)
    infeed, outfeed = _x_feeds()

    @tf.function(jit_compile=True)
    def run(scale):
        offset = scale * 2.0
        pipelining_ops.pipeline([lambda x: x * 3.0, lambda x: x + offset], gradient_accumulation_count=4,
                                infeed_queue=infeed, outfeed_queue=outfeed)

    with strategy.scope(), pytest.raises(ValueError, match=re.escape(
            'Trying to capture the tensor Tensor("mul:0", shape=(), dtype=float32) which is not a resource. This '
            "tensor needs to be passed as either part of the `input` or `infeed_queue` of the pipeline.")):
        strategy.run(run, args=(np.float32(2.0),))
