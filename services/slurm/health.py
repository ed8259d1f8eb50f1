"""What one look at a cluster says is wrong: a node that stopped answering under one of the user's running
jobs, a job waiting longer than it should (with Slurm's reason in words), a job that just ended badly
(NODE_FAIL, PREEMPTED, TIMEOUT, OUT_OF_MEMORY...), and a rank that stalls while the others work (a node of a
running job whose GPUs have sat idle for minutes while another node of the job is busy). Pure: jobs, nodes
and the nodes' GPUs in, alerts out.

Alert ids are stable while the condition lasts (``slurm-node-down:<job>:<node>``...), as the monitor's own
alerts are, so a watcher pushes each once.
"""

from __future__ import annotations

from collections.abc import Iterable

from services.models import Alert, Severity
from services.slurm.models import JobGpus, NodeGpus, SlurmJob, SlurmNode
from services.units import fmt_duration

PENDING_ALERT_S = 30 * 60  # a job pending longer than this gets a warning naming Slurm's reason
# a node of a running job whose GPUs average <= IDLE_UTIL % for STALL_S while another node of the job averages
# >= BUSY_UTIL % is a stalled rank (a hung collective, a dead inference server): the job still looks RUNNING
STALL_S = 10 * 60
IDLE_UTIL = 5.0
BUSY_UTIL = 30.0

# Slurm's pending reasons in words (the common ones; others are shown as Slurm writes them)
PENDING_REASONS = {
    "Resources": "the nodes it asks for are busy",
    "Priority": "other jobs are ahead of it in the queue",
    "ReqNodeNotAvail": "a node it needs is down, drained or reserved",
    "PartitionNodeLimit": "it asks for more nodes than the partition allows",
    "PartitionTimeLimit": "its time limit is longer than the partition allows",
    "QOSMaxGRESPerUser": "you already use as many GPUs as your QOS allows",
    "QOSMaxNodePerUserLimit": "you already use as many nodes as your QOS allows",
    "AssocGrpGRES": "your account's GPU limit is reached",
    "JobHeldUser": "it is held (released by its owner)",
    "JobHeldAdmin": "an administrator holds it",
    "BeginTime": "it asked to start later",
    "Dependency": "it waits for another job",
    "DependencyNeverSatisfied": "the job it waits for failed: it will never start",
    "Reservation": "it waits for its reservation",
    "launch failed requeued held": "its launch failed and it was held",
}

# how a job that ended says it failed, and what that means for the run
ENDED = {
    "NODE_FAIL": (Severity.CRITICAL, "a node failed under it"),
    "PREEMPTED": (Severity.CRITICAL, "Slurm preempted it for another job"),
    "TIMEOUT": (Severity.CRITICAL, "it reached its time limit"),
    "OUT_OF_MEMORY": (Severity.CRITICAL, "a process ran out of host memory"),
    "BOOT_FAIL": (Severity.CRITICAL, "its nodes failed to boot"),
    "DEADLINE": (Severity.WARNING, "it missed its deadline"),
    "FAILED": (Severity.CRITICAL, "it exited with an error"),
}


def _job_label(job: SlurmJob) -> str:
    return f"job {job.id}" + (f" ({job.name})" if job.name else "")


def pending_reason(reason: str) -> str:
    """Slurm's reason code in words ("Resources" → "the nodes it asks for are busy")."""
    if not reason:
        return "Slurm gives no reason"
    return PENDING_REASONS.get(reason, f"Slurm's reason: {reason}")


def judge(
    jobs: Iterable[SlurmJob], nodes: Iterable[SlurmNode], now: float, *, pending_alert_s: float = PENDING_ALERT_S
) -> list[Alert]:
    """The alerts a look at these jobs (the user's, recently ended ones included) and nodes decides, worst
    first."""
    by_name = {n.name: n for n in nodes}
    alerts: list[Alert] = []
    for job in jobs:
        label = _job_label(job)
        if job.state in ("RUNNING", "COMPLETING", "SUSPENDED"):
            for host in job.nodes:
                node = by_name.get(host)
                if node is not None and not node.responding:
                    alerts.append(
                        Alert(
                            f"slurm-node-down:{job.id}:{host}",
                            Severity.CRITICAL,
                            f"Node {host} is not responding",
                            f"Slurm lost contact with {host} ({node.state.lower().replace('_', ' ')}) while {label} "
                            f"runs there: its ranks on {host} have stopped, and the job will hang or end with a node "
                            f"failure. Resume from the newest complete checkpoint once it ends."
                            + (f" Slurm says: {node.reason}" if node.reason else ""),
                            since=now,
                            line=f"{host} State={node.state}",
                        )
                    )
        elif job.pending and job.submit_time is not None and now - job.submit_time >= pending_alert_s:
            waited = fmt_duration(now - job.submit_time)
            alerts.append(
                Alert(
                    f"slurm-pending:{job.id}",
                    Severity.WARNING,
                    f"Job {job.id} has waited {waited}",
                    f"{label[0].upper()}{label[1:]} is still pending after {waited}: {pending_reason(job.reason)}.",
                    since=job.submit_time,
                    line=f"JobId={job.id} Reason={job.reason or 'None'}",
                )
            )
        elif job.state in ENDED:
            severity, why = ENDED[job.state]
            alerts.append(
                Alert(
                    f"slurm-ended:{job.id}",
                    severity,
                    f"Job {job.id} ended: {job.state.lower().replace('_', ' ')}",
                    f"{label[0].upper()}{label[1:]} ended because {why}"
                    + (f" (on {', '.join(job.nodes)})" if job.nodes else "")
                    + ". Resume from the newest complete checkpoint.",
                    since=job.end_time or now,
                    line=f"JobId={job.id} JobState={job.state}",
                )
            )
    return sorted(alerts, key=lambda a: -a.severity.rank)


def unreachable(message: str, since: float) -> Alert:
    """Slurm could not be asked at all (its commands missing on the host, the controller not answering)."""
    return Alert("slurm-unreachable", Severity.WARNING, "Slurm did not answer", message, since=since)


def node_util(node: NodeGpus) -> float | None:
    """The mean utilisation of a node's GPUs, or None when it has none read (an error, no driver)."""
    utils = [g.util for g in node.gpus if g.util is not None]
    return sum(utils) / len(utils) if utils and not node.error else None


def track_idle(
    idle_since: dict[tuple[str, str], float], gpus: Iterable[JobGpus], now: float
) -> dict[tuple[str, str], float]:
    """(job, node) -> since when the node's GPUs have been idle, after one more read: an idle node keeps its
    first idle time, a busy or unread node leaves the map (a stall is only judged from reads, never guessed)."""
    out: dict[tuple[str, str], float] = {}
    for job in gpus:
        for node in job.nodes:
            util = node_util(node)
            if util is not None and util <= IDLE_UTIL:
                key = (job.job_id, node.node)
                out[key] = idle_since.get(key, now)
    return out


def stalled_ranks(
    gpus: Iterable[JobGpus], idle_since: dict[tuple[str, str], float], now: float, *, stall_s: float = STALL_S
) -> list[Alert]:
    """A warning per node idle for ``stall_s`` or more while another node of the same job is busy now."""
    alerts: list[Alert] = []
    for job in gpus:
        busy = [(n, u) for n in job.nodes if (u := node_util(n)) is not None and u >= BUSY_UTIL]
        if not busy:  # the whole job idles (loading, evaluating, finished its work): not one rank's stall
            continue
        for node in job.nodes:
            since = idle_since.get((job.job_id, node.node))
            if since is None or now - since < stall_s:
                continue
            other, util = max(busy, key=lambda nu: nu[1])
            roles = f" ({', '.join(node.roles)})" if node.roles else ""
            alerts.append(
                Alert(
                    f"slurm-stalled:{job.job_id}:{node.node}",
                    Severity.WARNING,
                    f"{node.node} looks stalled",
                    f"The GPUs of job {job.job_id} on {node.node}{roles} have been idle ({node_util(node):.0f} %) for "
                    f"{fmt_duration(now - since)} while {other.node} works ({util:.0f} %): a rank there may be stuck "
                    f"(a hung collective, a dead inference server) and the job still shows as running. Read its "
                    f"output; if it does not recover, kill the job and resume from the newest complete checkpoint.",
                    since=since,
                    line=f"JobId={job.job_id} node={node.node} util={node_util(node):.0f}%",
                )
            )
    return alerts
