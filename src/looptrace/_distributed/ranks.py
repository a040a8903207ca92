"""Rank information from the launcher's environment (torchrun, Slurm, Open MPI, MPICH/PMI).

The vocabulary, used on the Resource and on span and metric attributes:

==========================  ==============================================================
``looptrace.rank``          global rank of this process (0 without a launcher)
``looptrace.local_rank``    rank on this node
``looptrace.world_size``    number of processes in the job
``looptrace.local_world_size``  processes on this node
``looptrace.node_rank``     index of this node
``looptrace.job_id``        the launcher's job or run id
``looptrace.launcher``      ``torchrun``, ``openmpi``, ``pmi``, ``slurm`` or ``none``
==========================  ==============================================================
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from looptrace._base.errors import ConfigError

# The namespace the OpenTelemetry semantic conventions give for a UUIDv5 service.instance.id.
_SERVICE_INSTANCE_NAMESPACE = uuid.UUID("4d63009a-8d0f-11ee-aad7-4c796ed8e320")

RANK = "looptrace.rank"
LOCAL_RANK = "looptrace.local_rank"
WORLD_SIZE = "looptrace.world_size"
LOCAL_WORLD_SIZE = "looptrace.local_world_size"
NODE_RANK = "looptrace.node_rank"
JOB_ID = "looptrace.job_id"
LAUNCHER = "looptrace.launcher"

# Per launcher: the variable for each field; the first launcher whose rank variable is set wins.
# torchrun comes first because it also runs inside Slurm and MPI allocations, where its RANK is
# the one the training code uses; MPI's per-process variables beat Slurm's allocation-wide ones.
_LAUNCHERS: tuple[tuple[str, dict[str, str]], ...] = (
    (
        "torchrun",
        {
            "rank": "RANK",
            "local_rank": "LOCAL_RANK",
            "world_size": "WORLD_SIZE",
            "local_world_size": "LOCAL_WORLD_SIZE",
            "node_rank": "GROUP_RANK",
            "job_id": "TORCHELASTIC_RUN_ID",
        },
    ),
    (
        "openmpi",
        {
            "rank": "OMPI_COMM_WORLD_RANK",
            "local_rank": "OMPI_COMM_WORLD_LOCAL_RANK",
            "world_size": "OMPI_COMM_WORLD_SIZE",
            "local_world_size": "OMPI_COMM_WORLD_LOCAL_SIZE",
            "node_rank": "OMPI_COMM_WORLD_NODE_RANK",
            "job_id": "OMPI_MCA_orte_ess_jobid",
        },
    ),
    (
        "pmi",
        {
            "rank": "PMI_RANK",
            "local_rank": "MPI_LOCALRANKID",
            "world_size": "PMI_SIZE",
            "local_world_size": "MPI_LOCALNRANKS",
        },
    ),
    (
        "slurm",
        {
            "rank": "SLURM_PROCID",
            "local_rank": "SLURM_LOCALID",
            "world_size": "SLURM_NTASKS",
            "node_rank": "SLURM_NODEID",
            "job_id": "SLURM_JOB_ID",
        },
    ),
)


@dataclass(frozen=True, slots=True)
class RankInfo:
    """Where this process sits in a distributed job."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    local_world_size: int = 1
    node_rank: int = 0
    job_id: str | None = None
    launcher: str = "none"

    def __post_init__(self) -> None:
        if not 0 <= self.rank < self.world_size:
            raise ConfigError(f"rank {self.rank} is outside the world size {self.world_size}")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> RankInfo:
        """Detect the rank from the first launcher whose variables are set."""
        env = os.environ if environ is None else environ
        for launcher, names in _LAUNCHERS:
            if names["rank"] not in env:
                continue
            values = {field: env.get(var) for field, var in names.items()}
            if launcher == "slurm" and values.get("job_id") and env.get("SLURM_STEP_ID"):
                # Job steps of one allocation are separate runs: tell them apart.
                values["job_id"] = f"{values['job_id']}.{env['SLURM_STEP_ID']}"
            rank = _int(names["rank"], values["rank"], 0)
            return cls(
                rank=rank,
                local_rank=_int(names.get("local_rank"), values.get("local_rank"), rank),
                world_size=_int(names.get("world_size"), values.get("world_size"), rank + 1),
                local_world_size=_int(
                    names.get("local_world_size"), values.get("local_world_size"), 1
                ),
                node_rank=_int(names.get("node_rank"), values.get("node_rank"), 0),
                job_id=values.get("job_id") or None,
                launcher=launcher,
            )
        return cls()

    @property
    def instance_id(self) -> str:
        """Return a `service.instance.id` that is the same for the same job and rank."""
        job = self.job_id or f"{socket.gethostname()}-{os.getpid()}"
        return str(uuid.uuid5(_SERVICE_INSTANCE_NAMESPACE, f"looptrace:{job}:{self.rank}"))

    def attributes(self) -> dict[str, str | int]:
        """Return the namespaced attributes of this rank, for the Resource."""
        attrs: dict[str, str | int] = {
            RANK: self.rank,
            LOCAL_RANK: self.local_rank,
            WORLD_SIZE: self.world_size,
            LOCAL_WORLD_SIZE: self.local_world_size,
            NODE_RANK: self.node_rank,
            LAUNCHER: self.launcher,
        }
        if self.job_id is not None:
            attrs[JOB_ID] = self.job_id
        return attrs

    def span_attributes(self) -> dict[str, int]:
        """Return the attributes every span and metric point carries."""
        return {RANK: self.rank, WORLD_SIZE: self.world_size}


def _int(var: str | None, value: str | None, default: int) -> int:
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise ConfigError(f"environment variable {var}={value!r} is not an integer") from None
