"""Graphcore's IPU API under its own module names: ``from popjit import ipu``,
``from popjit.tensorflow.python import ipu``, or, in a script run by ``popjit run``,
``from tensorflow.python import ipu``.

Submodules are imported on first use (``ipu.loops``, ``ipu.ipu_outfeed_queue``...): any module
added to this package is reachable as an attribute without being listed here. As in Graphcore's
package, the op modules of ``ipu.ops`` are also ``ipu.nn_ops``, ``ipu.rand_ops``... and the IPU
Keras layers and losses ``ipu.layers`` and ``ipu.losses``.
"""

from __future__ import annotations

from popjit.ipu import config, ipu_strategy, scopes, utils  # noqa: F401
from popjit.ipu._modules import package_getattr

__getattr__ = package_getattr("popjit.ipu", "ipu", {
    **{name: f"popjit.ipu.ops.{name}" for name in ("embedding_ops", "math_ops", "nn_ops", "rand_ops", "all_to_all_op",
                                                   "cross_replica_ops", "reduce_scatter_op", "replication_ops",
                                                   "pipelining_ops")},
    "cross_replica_optimizer": "popjit.ipu.optimizers",
    "layers": "popjit.ipu.keras.layers",
    "losses": "popjit.ipu.keras.losses",
})
