"""``tf.keras.layers``."""

from popjit.errors import missing_attributes
from popjit.keras.layers import *  # noqa: F403
from popjit.keras.layers import deserialize, serialize  # noqa: F401
from popjit.keras.layers_attention import *  # noqa: F403
from popjit.keras.layers_conv import *  # noqa: F403
from popjit.keras.layers_embedding import *  # noqa: F403
from popjit.keras.layers_norm import *  # noqa: F403
from popjit.keras.layers_recurrent import *  # noqa: F403
from popjit.keras.layers_reshaping import *  # noqa: F403

__getattr__ = missing_attributes("tf.keras.layers")
