"""``tf.nest``."""

from popjit.frontend.nest import assert_same_structure, flatten, map_structure, pack_sequence_as  # noqa: F401
