"""``tf.train``: checkpoints (implemented in :mod:`popjit.train`)."""

from popjit.errors import missing_attributes as _missing_attributes
from popjit.train.checkpoint import (  # noqa: F401
    Checkpoint,
    CheckpointManager,
    CheckpointReader,
    latest_checkpoint,
    list_variables,
    load_checkpoint,
)

__getattr__ = _missing_attributes("tf.train")
