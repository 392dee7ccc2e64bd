"""popjit.runtime.instances in a lone process: where a process stands (read from the environment as MPI
launchers and poprun set it), and the collectives of a world of one, which never load MPI. The collectives
between real instances are tested in test_poprun.py."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from popjit.runtime import instances
from popjit.runtime.instances import World, placement


@pytest.mark.parametrize("env, expected", [
    ({}, (1, 0)),
    ({"PMI_SIZE": "4", "PMI_RANK": "3"}, (4, 3)),  # MPICH's mpiexec
    ({"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "1"}, (2, 1)),  # Open MPI's
    ({"POPDIST_NUM_INSTANCES": "2", "PMI_SIZE": "2", "PMI_RANK": "0"}, (2, 0)),  # poprun's relay
    ({"POPDIST_NUM_INSTANCES": "2", "POPDIST_INSTANCE_INDEX": "1", "PMI_SIZE": "2", "PMI_RANK": "1"}, (2, 1)),
    ({"POPDIST_NUM_INSTANCES": "1"}, (1, 0)),
])
def test__placement__comes_from_poprun_or_the_mpi_launcher(env, expected):
    assert placement(env) == expected


@pytest.mark.parametrize("env, message", [
    ({"POPDIST_NUM_INSTANCES": "2"}, "POPDIST_NUM_INSTANCES=2, but no MPI launcher started this process: start the "
                                     "program with `popjit poprun --num-instances 2 ...`"),
    ({"POPDIST_NUM_INSTANCES": "3", "PMI_SIZE": "2", "PMI_RANK": "1"},
     "say instance 1 of 3, but the MPI launcher started this process as rank 1 of 2"),
    ({"POPDIST_NUM_INSTANCES": "2", "POPDIST_INSTANCE_INDEX": "2", "PMI_SIZE": "2", "PMI_RANK": "1"},
     "instance 2 of 2 (POPDIST_NUM_INSTANCES, POPDIST_INSTANCE_INDEX): the index must be in the range [0, count)"),
    ({"PMI_SIZE": "two", "PMI_RANK": "0"}, "PMI_SIZE='two' is not a whole number"),
])
def test__placement__that_contradicts_itself__raises_naming_the_variables(env, message):
    with pytest.raises(ValueError) as e:
        placement(env)
    assert message in str(e.value)


def test__local_placement__from_the_launcher():
    assert instances.local_placement({}) == (1, 0)
    assert instances.local_placement({"MPI_LOCALNRANKS": "2", "MPI_LOCALRANKID": "1"}) == (2, 1)
    assert instances.local_placement({"OMPI_COMM_WORLD_LOCAL_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "3"}) == (4, 3)


def test__this_test_process__is_instance_0_of_1():
    w = instances.world()
    assert (w.count, w.index) == (1, 0)
    assert instances.world() is w


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64", "int32", "int64"])
def test__collectives_of_one_instance__return_a_copy_of_the_input(dtype):
    w = World(1, 0)
    a = (np.arange(6).reshape(2, 3) - 2).astype(dtype)
    for out, expected in ((w.allreduce_sum(a), a), (w.allgather(a), a[np.newaxis]), (w.broadcast(a), a)):
        assert out.dtype == a.dtype and out.shape == expected.shape
        np.testing.assert_array_equal(out, expected)
        assert not np.shares_memory(out, a)
    w.barrier()


def test__collectives_of_one_instance__keep_scalars_and_bools():
    w = World(1, 0)
    assert w.allreduce_sum(np.float32(2.5)).shape == ()
    assert w.allgather(np.array(True)).tolist() == [True]
    assert w.broadcast(np.array([True, False])).tolist() == [True, False]


def test__collectives__refuse_what_they_cannot_exchange():
    w = World(1, 0)
    with pytest.raises(TypeError, match="the sum of bool arrays is not defined"):
        w.allreduce_sum(np.array([True]))
    with pytest.raises(TypeError, match=r"allgather: arrays of complex64 cannot be exchanged between instances"):
        w.allgather(np.zeros(2, np.complex64))
    with pytest.raises(ValueError, match=r"broadcast: root 1 is not an instance \(there are 1\)"):
        w.broadcast(np.zeros(2, np.float32), root=1)


def test__exit_status__is_pythons():
    assert [instances.exit_status(c) for c in (None, 0, 3, "message", True)] == [0, 0, 3, 1, True]


def test__a_lone_instance__never_imports_mpi4py(tmp_path):
    code = ("import sys, numpy as np\n"
            "from popjit.runtime import instances\n"
            "w = instances.world(); w.connect(); w.barrier()\n"
            "print(w.allreduce_sum(np.ones(3, np.float32)).tolist(), 'mpi4py' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["[1.0,", "1.0,", "1.0]", "False"]


def test__popjit_run__in_an_environment_that_contradicts_itself__says_so_before_the_program_starts(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "OMPI_", "MV2_", "POPDIST_"))}
    out = subprocess.run([sys.executable, "-m", "popjit", "run", "-c", "print('ran')"], capture_output=True,
                         text=True, timeout=120, cwd=tmp_path, env={**env, "POPDIST_NUM_INSTANCES": "2"})
    assert (out.returncode, out.stdout) == (1, "")
    assert out.stderr == ("popjit run: POPDIST_NUM_INSTANCES=2, but no MPI launcher started this process: start the "
                          "program with `popjit poprun --num-instances 2 ...`\n")
