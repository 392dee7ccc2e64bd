"""``tf.keras.ipu`` / ``keras.ipu`` (graphcore/keras, SDK 3.x): ``PipelineStage`` and the stage-assignment
classes (:mod:`popjit.keras.pipelining`), and the ``layers`` and ``optimizers`` submodules.
The Keras extensions themselves (``set_gradient_accumulation_options``...) are methods of every
model in an ``IPUStrategy`` scope."""

from popjit.errors import missing_attributes as _missing_attributes
from popjit.keras.pipelining import (  # noqa: F401
    FunctionalLayerPipelineStageAssignment,
    ModelLayerPipelineStageAssignment,
    PipelineStage,
    SequentialLayerPipelineStageAssignment,
)
from popjit.tensorflow.keras.ipu import layers, optimizers  # noqa: F401

__ipu__built__ = "1"

__getattr__ = _missing_attributes("keras.ipu")
