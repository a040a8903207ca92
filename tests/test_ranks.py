"""Rank detection from launcher environments, and the deterministic service.instance.id."""

from __future__ import annotations

import uuid

import pytest

from looptrace import ConfigError, RankInfo


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        (
            {
                "RANK": "5",
                "LOCAL_RANK": "1",
                "WORLD_SIZE": "8",
                "LOCAL_WORLD_SIZE": "4",
                "GROUP_RANK": "1",
                "TORCHELASTIC_RUN_ID": "run-7",
            },
            RankInfo(5, 1, 8, 4, 1, "run-7", "torchrun"),
        ),
        (
            {
                "SLURM_PROCID": "9",
                "SLURM_LOCALID": "1",
                "SLURM_NTASKS": "16",
                "SLURM_NODEID": "4",
                "SLURM_JOB_ID": "123456",
            },
            RankInfo(9, 1, 16, 1, 4, "123456", "slurm"),
        ),
        (
            {
                "OMPI_COMM_WORLD_RANK": "3",
                "OMPI_COMM_WORLD_LOCAL_RANK": "3",
                "OMPI_COMM_WORLD_SIZE": "4",
                "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
                "OMPI_COMM_WORLD_NODE_RANK": "0",
            },
            RankInfo(3, 3, 4, 4, 0, None, "openmpi"),
        ),
        (
            {"PMI_RANK": "2", "PMI_SIZE": "6", "MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "3"},
            RankInfo(2, 0, 6, 3, 0, None, "pmi"),
        ),
        ({}, RankInfo(0, 0, 1, 1, 0, None, "none")),
    ],
    ids=["torchrun", "slurm", "openmpi", "pmi", "none"],
)
def test_each_launcher_is_detected(env: dict[str, str], expected: RankInfo) -> None:
    """Each launcher's variables map onto the same RankInfo fields."""
    assert RankInfo.from_env(env) == expected


def test_torchrun_wins_inside_a_slurm_allocation() -> None:
    """Torchrun's RANK beats Slurm's variables when both are set (torchrun under srun)."""
    env = {
        "RANK": "3",
        "WORLD_SIZE": "8",
        "SLURM_PROCID": "0",
        "SLURM_NTASKS": "2",
        "SLURM_JOB_ID": "77",
    }
    info = RankInfo.from_env(env)
    assert (info.rank, info.world_size, info.launcher) == (3, 8, "torchrun")


def test_malformed_rank_variable_names_the_variable() -> None:
    """A non-integer rank variable raises an error naming the variable and value."""
    with pytest.raises(ConfigError, match=r"SLURM_PROCID='x' is not an integer"):
        RankInfo.from_env({"SLURM_PROCID": "x"})


def test_rank_outside_world_size_is_rejected() -> None:
    """A rank that does not fit the world size is an error, not a silent wrong label."""
    with pytest.raises(ConfigError, match="rank 4 is outside the world size 4"):
        RankInfo(rank=4, world_size=4)


def test_instance_id_is_deterministic_per_job_and_rank() -> None:
    """service.instance.id is the same for the same job and rank and differs otherwise."""
    a = RankInfo(rank=1, world_size=2, job_id="j1").instance_id
    assert a == RankInfo(rank=1, world_size=2, job_id="j1").instance_id
    assert a != RankInfo(rank=0, world_size=2, job_id="j1").instance_id
    assert a != RankInfo(rank=1, world_size=2, job_id="j2").instance_id


def test_instance_id_is_a_uuid5_in_the_semantic_conventions_namespace() -> None:
    """service.instance.id is a UUIDv5 in 4d63009a-8d0f-11ee-aad7-4c796ed8e320, as semconv says."""
    namespace = uuid.UUID("4d63009a-8d0f-11ee-aad7-4c796ed8e320")
    instance_id = RankInfo(rank=1, world_size=2, job_id="j1").instance_id
    assert instance_id == str(uuid.uuid5(namespace, "looptrace:j1:1"))
    assert (uuid.UUID(instance_id).version, instance_id) == (
        5,
        "a63e2d77-8729-5332-a790-f72aac81b527",
    )


def test_attributes_vocabulary() -> None:
    """Resource attributes use the documented looptrace.* names."""
    assert RankInfo(2, 0, 4, 2, 1, "j", "slurm").attributes() == {
        "looptrace.rank": 2,
        "looptrace.local_rank": 0,
        "looptrace.world_size": 4,
        "looptrace.local_world_size": 2,
        "looptrace.node_rank": 1,
        "looptrace.job_id": "j",
        "looptrace.launcher": "slurm",
    }
