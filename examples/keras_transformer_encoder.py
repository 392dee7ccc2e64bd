"""A small Transformer encoder: which of two marker tokens comes first in a sequence?

The answer depends on positions, so the model needs its learned position embeddings and
self-attention: token and position embeddings, one encoder block (MultiHeadAttention, residual
connections, LayerNormalization, a feed-forward network), average pooling and a classifier.
Trained with ``fit`` inside ``IPUStrategy``. Run with ``popjit run examples/keras_transformer_encoder.py``.
"""

import numpy as np
import tensorflow as tf
from tensorflow.python import ipu

VOCAB, LENGTH, WIDTH = 64, 16, 32
FIRST, SECOND = 1, 2


def sequences(count, rng):
    x = rng.integers(3, VOCAB, (count, LENGTH))
    y = rng.integers(0, 2, count)
    for row, label in zip(x, y):
        a, b = sorted(rng.choice(LENGTH, 2, replace=False))
        row[a], row[b] = (FIRST, SECOND) if label else (SECOND, FIRST)
    return x.astype(np.int32), y.astype(np.int32)


def encoder(inputs):
    tokens = tf.keras.layers.Embedding(VOCAB, WIDTH)(inputs)
    positions = tf.keras.layers.Embedding(LENGTH, WIDTH)(tf.range(LENGTH))
    x = tokens + positions
    attended = tf.keras.layers.MultiHeadAttention(num_heads=4, key_dim=WIDTH // 4)(x, x)
    x = tf.keras.layers.LayerNormalization()(x + attended)
    hidden = tf.keras.layers.Dense(64, activation="relu")(x)
    x = tf.keras.layers.LayerNormalization()(x + tf.keras.layers.Dense(WIDTH)(hidden))
    pooled = tf.keras.layers.GlobalAveragePooling1D()(x)
    return tf.keras.layers.Dense(2)(pooled)


rng = np.random.default_rng(0)
x_train, y_train = sequences(2048, rng)
x_test, y_test = sequences(256, rng)

config = ipu.config.IPUConfig()
config.auto_select_ipus = 1
config.configure_ipu_system()
tf.keras.utils.set_random_seed(3)

strategy = ipu.ipu_strategy.IPUStrategy()
with strategy.scope():
    inputs = tf.keras.Input((LENGTH,), dtype=tf.int32)
    model = tf.keras.Model(inputs, encoder(inputs))
    model.compile(optimizer=tf.keras.optimizers.Adam(0.003),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"], steps_per_execution=16)
    model.fit(x_train, y_train, batch_size=32, epochs=8, verbose=2)
    loss, accuracy = model.evaluate(x_test, y_test, batch_size=32, verbose=0)
print(f"test accuracy: {accuracy:.4f}")
