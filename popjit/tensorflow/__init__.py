"""A TensorFlow-compatible namespace: ``import popjit.tensorflow as tf``.

Re-exports only: the frontend's op namespace (:mod:`popjit.frontend.api`), ``tf.data``
(:mod:`popjit.data`), ``tf.train`` (:mod:`popjit.train`), ``tf.keras`` (:mod:`popjit.keras`),
``tf.compat`` and ``tf.distribute.ReduceOp``. Under ``popjit run`` the module ``tensorflow`` resolves
here. A name TensorFlow has and popjit lacks raises ``UnimplementedError`` naming it.
"""

from popjit.errors import missing_attributes as _missing_attributes
from popjit.frontend.api import *  # noqa: F403
from popjit.frontend.api import executing_eagerly, get_static_value, newaxis, range  # noqa: F401
from popjit.tensorflow import (  # noqa: F401
    autograph,
    bitwise,
    compat,
    data,
    distribute,
    dtypes,
    errors,
    image,
    keras,
    linalg,
    math,
    nest,
    nn,
    random,
    train,
)

__version__ = "2.6.3"  # the TensorFlow version whose API popjit follows (Graphcore SDK 3.x)

__getattr__ = _missing_attributes("tf")
