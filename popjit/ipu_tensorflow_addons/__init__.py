"""``ipu_tensorflow_addons`` (graphcore/ipu_tensorflow_addons), as ``popjit run`` maps it: the IPU Keras
layers (``ipu_tensorflow_addons.keras.layers``) and optimizers (``...keras.optimizers``) on popjit's
Keras. ``saved_model_tool`` and the TensorFlow 1 layers (``ipu_tensorflow_addons.layers``) are not
implemented and raise ``UnimplementedError``.
"""

from popjit.errors import missing_attributes as _missing_attributes
from popjit.ipu_tensorflow_addons import keras  # noqa: F401

__getattr__ = _missing_attributes("ipu_tensorflow_addons")
