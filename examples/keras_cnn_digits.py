"""A small CNN learns scikit-learn's 8x8 handwritten digits with Keras on an IPU.

Run with ``popjit run examples/keras_cnn_digits.py`` (written as for Graphcore's TensorFlow: the
model is built, compiled and trained inside ``IPUStrategy``; ``fit`` runs each 5 steps as one
device loop fed by an infeed).
"""

import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits
from tensorflow.python import ipu

digits = load_digits()
images = (digits.images / 16.0).astype(np.float32)[..., np.newaxis]
labels = digits.target.astype(np.int32)
order = np.random.default_rng(0).permutation(len(images))
x_train, y_train = images[order[:1440]], labels[order[:1440]]
x_test, y_test = images[order[1440:1760]], labels[order[1440:1760]]

config = ipu.config.IPUConfig()
config.auto_select_ipus = 1
config.configure_ipu_system()
tf.keras.utils.set_random_seed(1)

strategy = ipu.ipu_strategy.IPUStrategy()
with strategy.scope():
    model = tf.keras.Sequential([
        tf.keras.Input((8, 8, 1)),
        tf.keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
        tf.keras.layers.MaxPooling2D(),
        tf.keras.layers.Conv2D(64, 3, padding="same", activation="relu"),
        tf.keras.layers.MaxPooling2D(),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(10),
    ])
    model.compile(optimizer=tf.keras.optimizers.Adam(0.003),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"], steps_per_execution=5)
    model.fit(x_train, y_train, batch_size=32, epochs=10, verbose=2)
    loss, accuracy = model.evaluate(x_test, y_test, batch_size=32, verbose=0)
print(f"test accuracy: {accuracy:.4f}")
