"""What the Slurm readers hand out: frozen jobs and nodes, and the errors they raise."""

from __future__ import annotations

from dataclasses import dataclass

from services.errors import PrimeTrainError
from services.models import GpuSample

# Slurm's job states (base states and the flag states squeue shows in their place)
JOB_STATES = frozenset(
    {
        "PENDING",
        "RUNNING",
        "SUSPENDED",
        "COMPLETING",
        "COMPLETED",
        "CANCELLED",
        "FAILED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
        "OUT_OF_MEMORY",
        "REQUEUED",
        "REQUEUE_HOLD",
        "REQUEUE_FED",
        "RESIZING",
        "CONFIGURING",
        "STOPPED",
        "SIGNALING",
        "STAGE_OUT",
        "SPECIAL_EXIT",
        "REVOKED",
        "RESV_DEL_HOLD",
        "LAUNCH_FAILED",
        "UPDATE_DB",
        "POWER_UP_NODE",
        "RECONFIG_FAIL",
    }
)
# states in which a job holds no node any more and will not run again by itself
FINISHED_STATES = frozenset(
    {
        "COMPLETED",
        "CANCELLED",
        "FAILED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
        "OUT_OF_MEMORY",
        "SPECIAL_EXIT",
        "REVOKED",
    }
)
UNKNOWN = "UNKNOWN"


class SlurmError(PrimeTrainError):
    """Slurm on the login node could not be asked (not installed, controller down, command failed)."""


class SlurmOutputError(SlurmError):
    """A Slurm command answered with output that cannot be read."""


@dataclass(frozen=True)
class SlurmJob:
    """One job as Slurm reports it. Times are epoch seconds (``None``: not known or not yet), durations
    seconds; ``time_limit_s`` is ``None`` for no limit. ``nodes`` are the expanded host names, ``nodelist``
    Slurm's compressed form (``gpu[01-04]``)."""

    id: str
    name: str = ""
    state: str = UNKNOWN
    reason: str = ""
    nodelist: str = ""
    nodes: tuple[str, ...] = ()
    elapsed_s: int | None = None
    time_limit_s: int | None = None
    submit_time: float | None = None
    start_time: float | None = None
    end_time: float | None = None
    user: str = ""

    @property
    def finished(self) -> bool:
        return self.state in FINISHED_STATES

    @property
    def pending(self) -> bool:
        return self.state == "PENDING"


@dataclass(frozen=True)
class SlurmNode:
    """One compute node: ``state`` as Slurm writes it (``MIXED+NOT_RESPONDING``), ``reason`` why an
    administrator or Slurm took it out of service."""

    name: str
    state: str = UNKNOWN
    reason: str = ""

    @property
    def base_state(self) -> str:
        return self.state.split("+", 1)[0]

    @property
    def flags(self) -> tuple[str, ...]:
        return tuple(self.state.split("+")[1:])

    @property
    def responding(self) -> bool:
        """False when the controller has lost the node's daemon (NOT_RESPONDING, or DOWN)."""
        return "NOT_RESPONDING" not in self.flags and self.base_state != "DOWN"


@dataclass(frozen=True)
class NodeGpus:
    """One node of a running job, as read through the login node (``srun`` into the job): its GPUs
    (memory in bytes), the prime-rl roles the job runs there (``inference``, ``orchestrator``, ``trainer``),
    or ``error`` (why its GPUs could not be read, naming the node)."""

    node: str
    gpus: tuple[GpuSample, ...] = ()
    roles: tuple[str, ...] = ()
    error: str = ""


@dataclass(frozen=True)
class JobGpus:
    """The GPUs of one running job, node by node (in the job's node order), or ``error`` when the job's
    nodes could not be asked at all. ``checked_at``: when they were read."""

    job_id: str
    nodes: tuple[NodeGpus, ...] = ()
    error: str = ""
    checked_at: float | None = None


@dataclass(frozen=True)
class ClusterView:
    """One look at a cluster for the monitor: the user's jobs (recently ended ones too) and every node, or
    ``error`` (why Slurm could not be asked; ``jobs``/``nodes`` then hold the previous look, if any).
    ``checked_at`` is when the look was taken (None: not yet), ``error_at`` when it failed. ``gpus``: the
    per-node GPUs of the running jobs, read after the jobs (a job missing here has not been read yet)."""

    jobs: tuple[SlurmJob, ...] = ()
    nodes: tuple[SlurmNode, ...] = ()
    error: str = ""
    checked_at: float | None = None
    error_at: float | None = None
    gpus: tuple[JobGpus, ...] = ()

    def gpus_of(self, job_id: str) -> JobGpus | None:
        return next((g for g in self.gpus if g.job_id == job_id), None)
