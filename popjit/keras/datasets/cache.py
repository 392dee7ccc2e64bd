"""Finding files in the Keras dataset cache, and reading the IDX format of (Fashion-)MNIST.

Keras keeps downloads in ``$KERAS_HOME/datasets`` (``KERAS_HOME`` defaults to ``~/.keras``; when
that is not writable Keras uses ``/tmp/.keras``). popjit reads the same files and never
downloads: a missing file is a ``FileNotFoundError`` that says where to put it.
"""

from __future__ import annotations

import gzip
import os

import numpy as np

ORIGIN = "https://storage.googleapis.com/tensorflow/tf-keras-datasets/"


def keras_home() -> str:
    """The Keras cache directory: ``$KERAS_HOME``, else ``~/.keras``."""
    return os.environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras")


def _candidates(relative: str) -> list[str]:
    primary = os.path.join(keras_home(), "datasets", relative)
    if os.path.isabs(relative):
        return [primary]
    fallback = os.path.join("/tmp", ".keras", "datasets", relative)
    return [primary] if fallback == primary or os.environ.get("KERAS_HOME") else [primary, fallback]


def find(relative: str, url: str, what: str) -> str:
    """The path of a cached file, or ``FileNotFoundError`` telling the user how to provide it."""
    paths = _candidates(relative)
    for p in paths:
        if os.path.isfile(p):
            return p
    expected = paths[0]
    raise FileNotFoundError(
        f"{what}: popjit does not download datasets, and {expected} does not exist.\n"
        f"Download {url}\nand save it as {expected}\n"
        "(Keras' dataset cache: $KERAS_HOME/datasets, where KERAS_HOME defaults to ~/.keras). A Keras "
        "installation that has downloaded this dataset before has already put it there."
    )


def read_idx(path: str) -> np.ndarray:
    """An array from a gzipped IDX file (big-endian header: magic, dimension sizes; then the data)."""
    with gzip.open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
        raise ValueError(f"{path} is not an IDX file of unsigned bytes (its header is {raw[:4].hex()})")
    ndim = raw[3]
    dims = tuple(int(d) for d in np.frombuffer(raw, dtype=">i4", count=ndim, offset=4))
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if data.size != int(np.prod(dims)):
        raise ValueError(f"{path}: the header says {dims} ({int(np.prod(dims))} bytes) but it holds {data.size} bytes")
    return data.reshape(dims).copy()
