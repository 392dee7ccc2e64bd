"""``ipu_tensorflow_addons.keras.layers``: the IPU Keras layers (:mod:`popjit.keras.ipu_layers`,
:mod:`popjit.keras.ipu_normalization`, :mod:`popjit.keras.ipu_recurrent`). The CTC layers,
``EffectiveTransformer`` and the FP8 layers raise ``UnimplementedError``."""

from popjit.errors import missing_attributes as _missing_attributes
from popjit.ipu.keras.layers import *  # noqa: F403  (the same classes as Graphcore's ipu.keras.layers)

__getattr__ = _missing_attributes("ipu_tensorflow_addons.keras.layers")
