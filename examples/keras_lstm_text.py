"""An LSTM text classifier: does a review use more positive than negative words?

Reviews are token sequences of varying length (a vocabulary of 300 words, of which 20 are
"positive" and 20 "negative"), padded with ``pad_sequences`` to 40 tokens. Embedding, LSTM and
Dense layers, trained with ``fit`` inside ``IPUStrategy``; the time loop runs on the device.
Run with ``popjit run examples/keras_lstm_text.py``.
"""

import numpy as np
import tensorflow as tf
from tensorflow.python import ipu

VOCAB, MAXLEN = 300, 40
POSITIVE, NEGATIVE = range(10, 30), range(30, 50)


def reviews(count, rng):
    texts, labels = [], []
    for _ in range(count):
        length = int(rng.integers(8, MAXLEN + 10))
        words = rng.integers(50, VOCAB, length)
        label = int(rng.integers(0, 2))
        strong, weak = (POSITIVE, NEGATIVE) if label else (NEGATIVE, POSITIVE)
        n_strong = int(rng.integers(2, 5))
        n_weak = int(rng.integers(0, n_strong))
        marks = rng.choice(length, n_strong + n_weak, replace=False)
        words[marks[:n_strong]] = rng.choice(list(strong), n_strong)
        words[marks[n_strong:]] = rng.choice(list(weak), n_weak)
        texts.append(list(words))
        labels.append(label)
    padded = tf.keras.preprocessing.sequence.pad_sequences(texts, maxlen=MAXLEN, truncating="post")
    return padded.astype(np.int32), np.array(labels, np.float32)


rng = np.random.default_rng(0)
x_train, y_train = reviews(1536, rng)
x_test, y_test = reviews(256, rng)

config = ipu.config.IPUConfig()
config.auto_select_ipus = 1
config.configure_ipu_system()
tf.keras.utils.set_random_seed(2)

strategy = ipu.ipu_strategy.IPUStrategy()
with strategy.scope():
    model = tf.keras.Sequential([
        tf.keras.Input((MAXLEN,), dtype=tf.int32),
        tf.keras.layers.Embedding(VOCAB, 16),
        tf.keras.layers.LSTM(32),
        tf.keras.layers.Dense(1, activation="sigmoid"),
    ])
    model.compile(optimizer=tf.keras.optimizers.Adam(0.01), loss="binary_crossentropy", metrics=["accuracy"],
                  steps_per_execution=16)
    model.fit(x_train, y_train, batch_size=32, epochs=8, verbose=2)
    loss, accuracy = model.evaluate(x_test, y_test, batch_size=32, verbose=0)
print(f"test accuracy: {accuracy:.4f}")
