"""Graphcore's IPU API under its own module names: ``from popjit import ipu`` or, in a script run by
``popjit run``, ``from tensorflow.python import ipu``."""

from popjit.ipu import config, ipu_strategy, utils  # noqa: F401
