"""``ipu.keras.layers`` (SDK ≤ 2.5; also ``ipu.layers``): the IPU Keras layers, the same classes as
``ipu_tensorflow_addons.keras.layers``."""

from popjit.errors import missing_attributes as _missing_attributes
from popjit.keras.ipu_layers import (
    AssumeEqualAcrossReplicas,
    Dropout,
    Embedding,
    RecomputationCheckpoint,
    SerialDense,
)
from popjit.keras.ipu_normalization import (
    GroupNorm,
    GroupNormalization,
    InstanceNorm,
    InstanceNormalization,
    LayerNorm,
    LayerNormalization,
)
from popjit.keras.ipu_recurrent import GRU, LSTM, PopnnGRU, PopnnLSTM

__all__ = ["GRU", "LSTM", "AssumeEqualAcrossReplicas", "Dropout", "Embedding", "GroupNorm", "GroupNormalization",
           "InstanceNorm", "InstanceNormalization", "LayerNorm", "LayerNormalization", "PopnnGRU", "PopnnLSTM",
           "RecomputationCheckpoint", "SerialDense"]

__getattr__ = _missing_attributes("ipu.keras.layers")
