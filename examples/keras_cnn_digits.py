"""A CNN with batch normalisation and dropout learns scikit-learn's handwritten digits, fed by a
``tf.data`` pipeline, with the best weights kept by ``ModelCheckpoint``.

Run with ``popjit run examples/keras_cnn_digits.py``. The model is built, compiled and trained
inside ``IPUStrategy``: each execution of ``fit`` is one device loop of 9 steps reading batches
from an infeed. ``popjit demo`` trains a smaller CNN on the same data.
"""

import os
import tempfile

import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits
from tensorflow.python import ipu

BATCH = 16

data = load_digits()
pixels = np.expand_dims(data.images.astype(np.float32) / 16.0, -1)
classes = data.target.astype(np.int32)
shuffled = np.random.default_rng(7).permutation(len(classes))
train, held_out = shuffled[:1440], shuffled[1440:1728]


def batches(index, repeat):
    ds = tf.data.Dataset.from_tensor_slices((pixels[index], classes[index]))
    ds = ds.shuffle(len(index), seed=1) if repeat else ds
    return ds.batch(BATCH, drop_remainder=True)


config = ipu.config.IPUConfig()
config.auto_select_ipus = 1
config.configure_ipu_system()
tf.random.set_seed(4)

strategy = ipu.ipu_strategy.IPUStrategy()
with strategy.scope():
    model = tf.keras.Sequential([
        tf.keras.layers.Conv2D(16, 3, padding="same", input_shape=(8, 8, 1)),
        tf.keras.layers.BatchNormalization(),
        tf.keras.layers.ReLU(),
        tf.keras.layers.Conv2D(32, 3, strides=2, padding="same", activation="relu"),
        tf.keras.layers.Dropout(0.25),
        tf.keras.layers.GlobalAveragePooling2D(),
        tf.keras.layers.Dense(10, activation="softmax"),
    ])
    model.compile(optimizer=tf.keras.optimizers.RMSprop(0.004), loss="sparse_categorical_crossentropy",
                  metrics=["accuracy"], steps_per_execution=9)
    best = os.path.join(tempfile.mkdtemp(), "best.h5")
    keep_best = tf.keras.callbacks.ModelCheckpoint(best, monitor="val_accuracy", save_best_only=True,
                                                   save_weights_only=True)
    model.fit(batches(train, True), validation_data=batches(held_out, False), epochs=12, verbose=2,
              callbacks=[keep_best])
    model.load_weights(best)
    loss, accuracy = model.evaluate(batches(held_out, False), verbose=0)
print(f"test accuracy: {accuracy:.4f}")
