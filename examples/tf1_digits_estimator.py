"""A TensorFlow 1 CNN learns scikit-learn's handwritten digits with Graphcore's ``IPUEstimator``.

Run with ``popjit run examples/tf1_digits_estimator.py``. ``model_fn`` builds the network with
``tf.compat.v1.layers``; the estimator runs it on the IPU in on-device loops of
``ITERATIONS_PER_LOOP`` steps fed by an infeed, keeps checkpoints in a temporary ``model_dir``,
evaluates the held-out digits with ``tf.compat.v1.metrics.accuracy`` and predicts their classes.
"""

import tempfile

import numpy as np
import tensorflow.compat.v1 as tf
from sklearn.datasets import load_digits
from tensorflow.python import ipu

BATCH = 16
ITERATIONS_PER_LOOP = 18  # the held-out digits are 18 batches: one loop evaluates them all

data = load_digits()
pixels = np.expand_dims(data.images.astype(np.float32) / 16.0, -1)
classes = data.target.astype(np.int32)
shuffled = np.random.default_rng(7).permutation(len(classes))
train, held_out = shuffled[:1440], shuffled[1440:1728]


def input_fn(index, repeat):
    def make(params):
        ds = tf.data.Dataset.from_tensor_slices((pixels[index], classes[index]))
        ds = ds.shuffle(len(index), seed=1).repeat() if repeat else ds
        return ds.batch(params["batch_size"], drop_remainder=True)
    return make


def model_fn(features, labels, mode, params):
    h = tf.layers.conv2d(features, 16, 3, padding="same", activation=tf.nn.relu)
    h = tf.layers.conv2d(h, 32, 3, strides=2, padding="same", activation=tf.nn.relu)
    logits = tf.layers.dense(tf.layers.flatten(h), 10)
    predicted = tf.argmax(logits, 1, output_type=tf.int32)
    if mode == tf.estimator.ModeKeys.PREDICT:
        return ipu.ipu_estimator.IPUEstimatorSpec(mode, predictions=predicted)
    loss = tf.losses.sparse_softmax_cross_entropy(labels, logits)
    if mode == tf.estimator.ModeKeys.EVAL:
        accuracy = tf.metrics.accuracy(labels, predicted)
        return ipu.ipu_estimator.IPUEstimatorSpec(mode, loss=loss, eval_metric_ops={"accuracy": accuracy})
    train_op = tf.train.AdamOptimizer(0.005).minimize(loss)
    return ipu.ipu_estimator.IPUEstimatorSpec(mode, loss=loss, train_op=train_op)


ipu_options = ipu.config.IPUConfig()
ipu_options.auto_select_ipus = 1
config = ipu.ipu_run_config.RunConfig(
    ipu_run_config=ipu.ipu_run_config.IPURunConfig(iterations_per_loop=ITERATIONS_PER_LOOP, ipu_options=ipu_options),
    model_dir=tempfile.mkdtemp(), tf_random_seed=4, log_step_count_steps=90)
estimator = ipu.ipu_estimator.IPUEstimator(model_fn, config=config, params={"batch_size": BATCH})

estimator.train(input_fn(train, repeat=True), steps=900)  # 10 epochs of 90 steps
results = estimator.evaluate(input_fn(held_out, repeat=False))
predictions = np.array(list(estimator.predict(input_fn(held_out, repeat=False))))
print(f"global step: {results['global_step']}")
print(f"predicted {len(predictions)} digits, {np.mean(predictions == classes[held_out]):.4f} of them right")
print(f"test accuracy: {results['accuracy']:.4f}")
