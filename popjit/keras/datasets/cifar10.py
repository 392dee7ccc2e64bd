"""``tf.keras.datasets.cifar10``: CIFAR-10 from the Keras cache (never downloaded)."""

from __future__ import annotations

from popjit.keras.datasets.cifar import Split, channels_last, read_batches

__all__ = ["load_data"]


def load_data() -> tuple[Split, Split]:
    """``((x_train, y_train), (x_test, y_test))``: uint8 images ``[50000, 32, 32, 3]`` and labels
    ``[50000, 1]`` (10,000 for the test split), from ``$KERAS_HOME/datasets/cifar-10-batches-py``."""
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    batches = read_batches("cifar-10-batches-py", "cifar-10-python.tar.gz", names, "labels",
                           "tf.keras.datasets.cifar10.load_data()")
    return channels_last(batches[:5]), channels_last(batches[5:])
