"""``ipu.keras`` (``tensorflow.python.ipu.keras``): Graphcore's Keras names of SDK ≤ 2.5.

``Sequential`` and ``Model`` are the SDK ≤ 2.1 IPU models (:mod:`popjit.keras.ipu_models`);
``layers`` the IPU layers (the same classes as ``ipu_tensorflow_addons.keras.layers``); the
pipelining names (``PipelineStage``, ``PipelineModel``, ``PipelineSequential``) train those models as
pipelines (:mod:`popjit.keras.pipelining`). In SDK ≥ 2.2 stock ``tf.keras`` models run on the IPU inside an
``IPUStrategy`` scope (popjit's ``tf.keras``).
"""

from popjit.errors import missing_attributes as _missing_attributes
from popjit.ipu.keras import layers, losses, optimizers  # noqa: F401
from popjit.keras.ipu_models import (  # noqa: F401
    Model,
    PipelineModel,
    PipelineSequential,
    PipelineStage,
    Sequential,
    SequentialPipelineModel,
)

__getattr__ = _missing_attributes("ipu.keras")
