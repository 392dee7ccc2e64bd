"""``tf.keras.datasets.cifar100``: CIFAR-100 from the Keras cache (never downloaded)."""

from __future__ import annotations

from popjit.keras.datasets.cifar import Split, channels_last, read_batches

__all__ = ["load_data"]


def load_data(label_mode: str = "fine") -> tuple[Split, Split]:
    """``((x_train, y_train), (x_test, y_test))`` with the 100 ``"fine"`` or the 20 ``"coarse"`` labels,
    from ``$KERAS_HOME/datasets/cifar-100-python``."""
    if label_mode not in ("fine", "coarse"):
        raise ValueError(f'`label_mode` must be one of `"fine"`, `"coarse"`. Received: label_mode={label_mode}.')
    train, test = read_batches("cifar-100-python", "cifar-100-python.tar.gz", ["train", "test"],
                               f"{label_mode}_labels", "tf.keras.datasets.cifar100.load_data()")
    return channels_last([train]), channels_last([test])
