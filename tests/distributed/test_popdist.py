"""popdist, popdist.tensorflow, ipu.distributed (Horovod's functions and PopDistStrategy) in a program that
poprun did not start: instance 0 of 1, as Graphcore's popdist answers then. Several instances: test_poprun.py."""

from __future__ import annotations

import numpy as np
import pytest

import popjit.popdist as popdist
import popjit.popdist.tensorflow as popdist_tf
import popjit.tensorflow as tf
from popjit import ipu
from popjit.errors import UnimplementedError
from popjit.ipu.config import IPUConfig
from popjit.ipu.distributed import popdist_strategy

POPDIST_VARIABLES = ("POPDIST_NUM_TOTAL_REPLICAS", "POPDIST_NUM_LOCAL_REPLICAS", "POPDIST_NUM_IPUS_PER_REPLICA",
                     "POPDIST_REPLICA_INDEX_OFFSET", "POPDIST_NUM_INSTANCES", "POPDIST_INSTANCE_INDEX")


@pytest.fixture
def no_poprun(monkeypatch):
    for name in POPDIST_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def _layout() -> tuple:
    return (popdist.isPopdistEnvSet(), popdist.getNumInstances(), popdist.getInstanceIndex(),
            popdist.getNumTotalReplicas(), popdist.getNumLocalReplicas(), popdist.getNumIpusPerReplica(),
            popdist.getReplicaIndexOffset())


def test__without_poprun__one_instance_of_one_replica(no_poprun):
    assert _layout() == (False, 1, 0, 1, 1, 1, 0)
    popdist.init()
    assert popdist.getDeviceId() == 0


def test__replica_variables__are_read_and_derived(no_poprun):
    no_poprun.setenv("POPDIST_NUM_TOTAL_REPLICAS", "4")
    no_poprun.setenv("POPDIST_NUM_IPUS_PER_REPLICA", "2")
    assert _layout() == (True, 1, 0, 4, 4, 2, 0)
    assert popdist.getDeviceId() == 16 + 8 + 4  # the first device of 8 IPUs in a system of 16
    no_poprun.setenv("POPDIST_NUM_TOTAL_REPLICAS", "0")
    with pytest.raises(ValueError, match="POPDIST_NUM_TOTAL_REPLICAS=0 is out of range"):
        popdist.getNumTotalReplicas()


def test__device_id__of_more_ipus_than_the_system_has__raises(no_poprun):
    no_poprun.setenv("POPDIST_NUM_LOCAL_REPLICAS", "32")
    with pytest.raises(ValueError, match="the virtual system of 16 IPUs has no device of 32 IPUs"):
        popdist.getDeviceId()


def test__names_popjits_popdist_lacks__raise_unimplemented():
    with pytest.raises(UnimplementedError, match=r"popdist\.finalizeBackend is not implemented by popjit"):
        popdist.finalizeBackend  # noqa: B018
    with pytest.raises(UnimplementedError, match="PopDist's PopTorch helpers are for PyTorch programs"):
        popdist.poptorch  # noqa: B018


def test__set_ipu_config__sets_the_devices_and_the_distribution(no_poprun):
    no_poprun.setenv("POPDIST_NUM_LOCAL_REPLICAS", "2")
    cfg = IPUConfig()
    assert popdist_tf.set_ipu_config(cfg, ipus_per_replica=2) is cfg
    mrd = cfg.experimental.multi_replica_distribution
    assert (cfg.auto_select_ipus, mrd.process_count, mrd.process_index) == (4, 1, 0)
    kept = IPUConfig()
    kept.auto_select_ipus = 1
    popdist_tf.set_ipu_config(kept, configure_device=False)
    assert kept.auto_select_ipus == 1 and kept.experimental.multi_replica_distribution.process_count == 1


def test__set_ipu_config__contradicting_poprun__raises(no_poprun):
    no_poprun.setenv("POPDIST_NUM_IPUS_PER_REPLICA", "1")
    cfg = IPUConfig()
    with pytest.raises(ValueError, match=r"ipus_per_replica=2, but the program was started with 1 IPUs per replica "
                                         r"\(poprun --ipus-per-replica 1\)"):
        popdist_tf.set_ipu_config(cfg, ipus_per_replica=2)
    with pytest.raises(ValueError, match="ipus_per_replica must be a positive int, not 0"):
        popdist_tf.set_ipu_config(cfg, ipus_per_replica=0)
    assert cfg.auto_select_ipus == [] and cfg.experimental.multi_replica_distribution.process_count == 0


def test__configure__with_popdists_config__attaches_the_local_replicas_ipus(no_poprun, fresh_ipu_system):
    no_poprun.setenv("POPDIST_NUM_LOCAL_REPLICAS", "2")
    cfg = popdist_tf.set_ipu_config(IPUConfig())
    cfg.configure_ipu_system()
    assert [d.num_ipus for d in fresh_ipu_system.system().devices] == [2]
    assert ipu.config.get_ipu_config()[0].experimental.multi_replica_distribution.process_count == 1


@pytest.mark.parametrize("reduce_op, expected", [("SUM", [2.0, 4.0]), ("MEAN", [2.0, 4.0])])
def test__popdist_strategy__reduces_on_the_host(reduce_op, expected, no_poprun):
    strategy = popdist_strategy.PopDistStrategy()
    value = tf.constant([2.0, 4.0])
    with strategy.scope():
        out = strategy.reduce(reduce_op, value)
        along = strategy.reduce(reduce_op, value, axis=0)
        nested = strategy.reduce(reduce_op, {"a": value, "b": (np.int32(7),)})
    np.testing.assert_array_equal(out.numpy(), np.array(expected, np.float32))
    assert float(along) == (6.0 if reduce_op == "SUM" else 3.0)
    assert nested["a"].numpy().tolist() == expected and nested["b"][0].numpy() == 7
    with pytest.raises(ValueError, match="Unsupported reduce op: MAX"):
        strategy.reduce("MAX", value)


def test__popdist_strategy__config_replicas_and_broadcast(no_poprun):
    no_poprun.setenv("POPDIST_NUM_TOTAL_REPLICAS", "4")
    strategy = popdist_strategy.PopDistStrategy(add_ipu_cross_replica_reductions=False)
    assert isinstance(strategy, ipu.ipu_strategy.IPUStrategyV1)
    assert strategy.num_replicas_in_sync == 4
    cfg = strategy.update_ipu_config(IPUConfig())
    mrd = cfg.experimental.multi_replica_distribution
    assert (mrd.process_count, mrd.process_index) == (1, 0)
    assert strategy.broadcast_to(tf.constant([1, 2]), "/device:CPU:0").numpy().tolist() == [1, 2]
    with pytest.raises(RuntimeError, match=r"^Can only broadcast on CPU, but got device /device:IPU:0$"):
        strategy.broadcast_to(tf.constant(1.0), "/device:IPU:0")


def test__horovod_functions__of_one_instance():
    hvd = ipu.distributed
    hvd.init()
    assert (hvd.size(), hvd.rank(), hvd.local_size(), hvd.local_rank()) == (1, 0, 1, 0)
    assert hvd.allreduce([1.0, 3.0]).numpy().tolist() == [1.0, 3.0]
    assert hvd.allreduce(tf.constant([5, 7]), op=hvd.Sum).numpy().tolist() == [5, 7]
    assert hvd.allgather(tf.constant([[1.0, 2.0]])).shape == (1, 2)
    assert hvd.broadcast(tf.constant(3.0), root_rank=0).numpy() == 3.0
    with pytest.raises(NotImplementedError, match=r"^The Adasum reduction is not implemented\.$"):
        hvd.allreduce(tf.constant(1.0), op=hvd.Adasum)
    assert ipu.horovod.allreduce is hvd.allreduce  # SDK 2.x's name of the module

    @tf.function
    def inside(x):
        return hvd.allreduce(x)

    with pytest.raises(UnimplementedError, match=r"ipu\.distributed\.allreduce inside a tf\.function"):
        inside(tf.constant(1.0))


@pytest.mark.parametrize("name, reason", [
    ("ipu.horovod.ipu_horovod_strategy", "IPUHorovodStrategy was renamed PopDistStrategy in SDK 2.4"),
    ("ipu.distributed.ipu_multi_replica_strategy", "IPUMultiReplicaStrategy was renamed PopDistStrategy in SDK 2.4"),
    ("ipu.ipu_multi_worker_strategy", "IPUMultiWorkerStrategyV1 (gRPC collectives between hosts"),
])
def test__renamed_and_removed_strategies__name_popdist_strategy(name, reason):
    module = ipu
    *parents, last = name.split(".")[1:]
    for part in parents:
        module = getattr(module, part)
    with pytest.raises(UnimplementedError) as e:
        getattr(module, last)
    assert reason in str(e.value) and "Use ipu.distributed.popdist_strategy.PopDistStrategy" in str(e.value)
