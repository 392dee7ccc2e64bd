"""Graphcore's ``popdist.tensorflow``: an ``IPUConfig`` for this instance's share of a poprun program.

    config = ipu.config.IPUConfig()
    popdist.tensorflow.set_ipu_config(config, ipus_per_replica=1)
    config.configure_ipu_system()
"""

from __future__ import annotations

import os
from typing import Any

import popjit.popdist as popdist
from popjit.errors import missing_attributes


def set_ipu_config(config: Any, ipus_per_replica: int | None = None, configure_device: bool = True) -> Any:
    """Set ``config`` (an ``IPUConfig``) up for this instance and return it.

    ``experimental.multi_replica_distribution.process_count`` and ``process_index`` become
    ``popdist.getNumInstances()`` and ``popdist.getInstanceIndex()`` (so the program's replicas span every
    instance); with ``configure_device`` (the default), ``auto_select_ipus`` becomes this instance's replicas
    times ``ipus_per_replica`` (default ``popdist.getNumIpusPerReplica()``, poprun's ``--ipus-per-replica``,
    which a different value contradicts: ``ValueError``).
    """
    given = popdist.getNumIpusPerReplica()
    if ipus_per_replica is None:
        ipus_per_replica = given
    if not isinstance(ipus_per_replica, int) or isinstance(ipus_per_replica, bool) or ipus_per_replica < 1:
        raise ValueError(f"set_ipu_config: ipus_per_replica must be a positive int, not {ipus_per_replica!r}")
    if popdist.IPUS_PER_REPLICA_ENV in os.environ and ipus_per_replica != given:
        raise ValueError(f"set_ipu_config: ipus_per_replica={ipus_per_replica}, but the program was started with "
                         f"{given} IPUs per replica (poprun --ipus-per-replica {given})")
    if configure_device:
        config.auto_select_ipus = popdist.getNumLocalReplicas() * ipus_per_replica
    distribution = config.experimental.multi_replica_distribution
    distribution.process_count = popdist.getNumInstances()
    distribution.process_index = popdist.getInstanceIndex()
    return config


__all__ = ["set_ipu_config"]

__getattr__ = missing_attributes("popdist.tensorflow")
