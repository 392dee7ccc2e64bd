"""``tf.nest``."""

from popjit.errors import missing_attributes as _missing_attributes
from popjit.frontend.nest import assert_same_structure, flatten, map_structure, pack_sequence_as  # noqa: F401

__getattr__ = _missing_attributes("tf.nest")
