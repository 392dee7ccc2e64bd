"""Graphcore's ``popdist`` module: where this instance stands among the instances and replicas of a program
started by ``poprun`` (``popjit poprun``). Under ``popjit run``, ``import popdist`` is this module, and
``import popdist.tensorflow`` is :mod:`popjit.popdist.tensorflow`.

    if popdist.isPopdistEnvSet():
        dataset = dataset.shard(popdist.getNumInstances(), popdist.getInstanceIndex())
        replicas = popdist.getNumLocalReplicas()          # this instance's replicas
        first = popdist.getReplicaIndexOffset()           # the global index of its first replica

The values come from the environment poprun sets for every instance (:data:`ENV`, Graphcore's names; the
instance count and index are :func:`popjit.runtime.instances.world`'s). A program started otherwise is
instance 0 of 1, with one replica of one IPU, as Graphcore's popdist answers without poprun. A program
started by another MPI launcher (``mpiexec -n 2 python -m popjit run train.py``) takes its instances from
MPI, one replica each unless ``POPDIST_NUM_TOTAL_REPLICAS`` (or ``POPDIST_NUM_LOCAL_REPLICAS``) says more.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

from popjit.errors import missing_api
from popjit.runtime import instances

#: The variables poprun sets for every instance (their values for ``--num-instances 2 --num-replicas 4``,
#: instance 1); the instance count and index are POPDIST_NUM_INSTANCES and POPDIST_INSTANCE_INDEX.
TOTAL_REPLICAS_ENV = "POPDIST_NUM_TOTAL_REPLICAS"  # 4
LOCAL_REPLICAS_ENV = "POPDIST_NUM_LOCAL_REPLICAS"  # 2
IPUS_PER_REPLICA_ENV = "POPDIST_NUM_IPUS_PER_REPLICA"  # 1
REPLICA_INDEX_OFFSET_ENV = "POPDIST_REPLICA_INDEX_OFFSET"  # 2
UNIFORM_REPLICAS_ENV = "POPDIST_UNIFORM_REPLICAS_PER_INSTANCE"  # 1: every instance has as many replicas
LOCAL_INSTANCE_INDEX_ENV = "POPDIST_LOCAL_INSTANCE_INDEX"  # the instance's index among those on its host
ENV = (instances.NUM_INSTANCES_ENV, instances.INSTANCE_INDEX_ENV, TOTAL_REPLICAS_ENV, LOCAL_REPLICAS_ENV,
       IPUS_PER_REPLICA_ENV, REPLICA_INDEX_OFFSET_ENV, UNIFORM_REPLICAS_ENV, LOCAL_INSTANCE_INDEX_ENV)


def _env(name: str) -> int | None:
    value = instances.int_env(os.environ, name)
    if value is not None and value < (0 if name in (REPLICA_INDEX_OFFSET_ENV, LOCAL_INSTANCE_INDEX_ENV) else 1):
        raise ValueError(f"{name}={value} is out of range")
    return value


def isPopdistEnvSet() -> bool:
    """True in a program started by poprun (or by another MPI launcher as several instances)."""
    return any(name in os.environ for name in ENV) or instances.world().count > 1


def init() -> None:
    """Connect this instance to the others (MPI) now; ``popjit run`` already does when it starts one of
    several instances, so calling it is optional, as in Graphcore's popdist."""
    instances.world().connect()


def getNumInstances() -> int:
    """How many instances run the program (``poprun --num-instances``)."""
    return instances.world().count


def getInstanceIndex() -> int:
    """This instance's index, from 0 (instance 0 is the one that writes checkpoints in Graphcore's examples)."""
    return instances.world().index


def getNumLocalReplicas() -> int:
    """How many replicas this instance runs: ``--num-replicas`` divided by ``--num-instances``."""
    local = _env(LOCAL_REPLICAS_ENV)
    if local is not None:
        return local
    total, count = _env(TOTAL_REPLICAS_ENV), getNumInstances()
    if total is None:
        return 1
    if total % count:
        raise ValueError(f"{TOTAL_REPLICAS_ENV}={total} replicas cannot be divided evenly among {count} instances")
    return total // count


def getNumTotalReplicas() -> int:
    """How many replicas the program runs over all its instances (``poprun --num-replicas``)."""
    total = _env(TOTAL_REPLICAS_ENV)
    return total if total is not None else getNumLocalReplicas() * getNumInstances()


def getNumIpusPerReplica() -> int:
    """How many IPUs each replica spans (``poprun --ipus-per-replica``, default 1)."""
    ipus = _env(IPUS_PER_REPLICA_ENV)
    return ipus if ipus is not None else 1


def getReplicaIndexOffset() -> int:
    """The global index of this instance's first replica: its replicas are ``offset .. offset + local - 1``."""
    offset = _env(REPLICA_INDEX_OFFSET_ENV)
    return offset if offset is not None else getInstanceIndex() * getNumLocalReplicas()


def getDeviceId(ipus_per_replica: int | None = None) -> int:
    """The id of the virtual device holding this instance's IPUs (local replicas × IPUs per replica), for
    ``IPUConfig.select_ipus``: each instance has its own virtual system, whose devices ``gc-info -l`` would
    list as ``popjit.ipu.config.virtual_device_ids`` does."""
    # why: the virtual system's device ids are the ipu package's; the other popdist functions need none of it
    from popjit import config
    from popjit.ipu.config import virtual_device_ids

    per_replica = ipus_per_replica if ipus_per_replica is not None else getNumIpusPerReplica()
    wanted = tuple(range(getNumLocalReplicas() * per_replica))
    ids = virtual_device_ids(config.get("NUM_IPUS"))
    if wanted not in ids:
        raise ValueError(f"popdist.getDeviceId: the virtual system of {config.get('NUM_IPUS')} IPUs has no device of "
                         f"{len(wanted)} IPUs (device sizes are powers of two up to the system's size; "
                         "POPJIT_NUM_IPUS sets it)")
    return ids.index(wanted)


__all__ = ["getDeviceId", "getInstanceIndex", "getNumInstances", "getNumIpusPerReplica", "getNumLocalReplicas",
           "getNumTotalReplicas", "getReplicaIndexOffset", "init", "isPopdistEnvSet"]


def __getattr__(name: str) -> ModuleType:
    """``popdist.tensorflow`` loads on first use; a name popjit's popdist lacks raises ``UnimplementedError``."""
    if name == "tensorflow":
        return importlib.import_module("popjit.popdist.tensorflow")
    if name.startswith("__"):
        raise AttributeError(name)
    raise missing_api("popdist", name)
