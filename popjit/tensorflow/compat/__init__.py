"""``tf.compat``: re-exported from :mod:`popjit.compat`; ``tf.compat.v2`` is ``popjit.tensorflow`` itself."""

from __future__ import annotations

import importlib
from types import ModuleType

from popjit.compat import *  # noqa: F403
from popjit.errors import missing_api
from popjit.tensorflow.compat import v1  # noqa: F401


def __getattr__(name: str) -> ModuleType:
    if name == "v2":  # TensorFlow 2's API is popjit.tensorflow itself (imported lazily: it imports us)
        return importlib.import_module("popjit.tensorflow")
    if name.startswith("__"):
        raise AttributeError(name)
    raise missing_api("tf.compat", name)
