"""``tf.random``: seeded and stateless random tensors (see :mod:`popjit.frontend.random_ops`)."""

from popjit.errors import missing_attributes as _missing_attributes
from popjit.frontend.random_ops import (  # noqa: F401
    get_global_seed,
    normal,
    set_seed,
    stateless_normal,
    stateless_truncated_normal,
    stateless_uniform,
    truncated_normal,
    uniform,
)

__getattr__ = _missing_attributes("tf.random")
