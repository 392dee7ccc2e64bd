"""``ipu.embedding_ops`` (also ``ipu.ops.embedding_ops``): the IPU's multi-slice embedding lookup
(host embeddings, ``HostEmbedding``, are not implemented)."""

from popjit.errors import missing_attributes as _missing_attributes
from popjit.frontend.ipu_ops import embedding_lookup  # noqa: F401

__getattr__ = _missing_attributes("ipu.embedding_ops")
